"""Diarization scoring: frame-based DER with a one-to-one speaker mapping, reference turns,
and long recordings cycled from the eval set with their turns.

DER is counted at 10 ms with no collar and overlapped speech scored: (missed + false alarm
+ confusion) / reference speech, the hypothesis speakers mapped one-to-one onto reference
speakers to maximise agreement (Hungarian assignment). A hypothesis turn is anything with
``speaker``, ``start`` and ``end`` (the service's ``SpeakerTurn``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import av
import numpy as np
from scipy.optimize import linear_sum_assignment

__all__ = ["SCORED", "SOURCES", "VOICES", "build_conversation", "build_long", "der_counts",
           "load_audio", "read_rttm", "source_of", "speech_spans", "unmatched_voices",
           "voice_clips", "voice_frames", "voice_turns"]

SAMPLE_RATE = 16000
"""The eval audio is scored, and long recordings are written, at the service's 16 kHz."""
PCM_DTYPE = np.dtype("<i2")
STEP = 0.01
"""Scoring frame, s."""

SCORED = [
    "synthetic/conv01_support_call", "synthetic/conv02_team_meeting", "synthetic/conv03_overlap",
    "real/pyannote_ami/dev00", "real/pyannote_ami/dev01", "real/pyannote_ami/trn02",
]


class Turn(Protocol):
    """One speaker turn of a hypothesis (the service's ``SpeakerTurn`` is one)."""

    speaker: int
    start: float
    end: float


def load_audio(path: Path) -> np.ndarray:
    """Decode any container to 16 kHz mono float32 with PyAV."""
    chunks = []
    with av.open(str(path)) as container:
        resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        for frame in container.decode(audio=0):
            chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(frame))
        chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(None))
    return np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)


def read_rttm(path: Path) -> list[tuple[str, float, float]]:
    """(speaker, start, end) of each SPEAKER line."""
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "SPEAKER":
            start, dur = float(parts[3]), float(parts[4])
            out.append((parts[7], start, start + dur))
    return out


def _grid(spans: list[tuple[object, float, float]], frames: int) -> np.ndarray:
    names = sorted({s for s, _, _ in spans}, key=str)
    grid = np.zeros((frames, len(names)), dtype=bool)
    for spk, start, end in spans:
        grid[int(round(start / STEP)):int(round(end / STEP)), names.index(spk)] = True
    return grid


def unmatched_voices(ref: list[tuple[str, float, float]], hyp: Sequence[Turn],
                     duration: float) -> list[str]:
    """Reference speakers that no hypothesis speaker is mapped to (merged into another
    speaker or never heard), as in ``der_counts``' one-to-one mapping."""
    frames = int(np.ceil(max([duration] + [e for _, _, e in ref]
                             + [t.end for t in hyp]) / STEP)) + 1
    names = sorted({s for s, _, _ in ref}, key=str)
    r = _grid(ref, frames)
    h = _grid([(t.speaker, t.start, t.end) for t in hyp], frames)
    if not h.shape[1]:
        return names
    agree = r.T.astype(np.int64) @ h.astype(np.int64)
    rows, cols = linear_sum_assignment(-agree)
    mapped = {names[i] for i, j in zip(rows, cols) if agree[i, j] > 0}
    return [n for n in names if n not in mapped]


def der_counts(ref: list[tuple[str, float, float]], hyp: Sequence[Turn],
               duration: float, where: np.ndarray | None = None) -> dict[str, float]:
    """Seconds of reference speech, miss, false alarm and confusion for one file.

    ``where`` (bool per 10 ms frame, see ``voice_frames``) counts only those frames; the
    speaker mapping is still the whole file's."""
    frames = int(np.ceil(max([duration] + [e for _, _, e in ref]
                             + [t.end for t in hyp]) / STEP)) + 1
    r = _grid(ref, frames)
    h = _grid([(t.speaker, t.start, t.end) for t in hyp], frames)
    nr, nh = r.sum(1), h.sum(1)
    correct = np.zeros(frames, np.int64)
    if r.shape[1] and h.shape[1]:
        agree = r.T.astype(np.int64) @ h.astype(np.int64)
        rows, cols = linear_sum_assignment(-agree)
        correct = (r[:, rows] & h[:, cols]).sum(1)
    keep = np.ones(frames, bool) if where is None else np.resize(where, frames) & \
        (np.arange(frames) < len(where))
    both = np.minimum(nr, nh)
    return {"ref": nr[keep].sum() * STEP, "miss": np.maximum(nr - nh, 0)[keep].sum() * STEP,
            "fa": np.maximum(nh - nr, 0)[keep].sum() * STEP,
            "conf": (both - correct)[keep].sum() * STEP}


def voice_frames(ref: list[tuple[str, float, float]], duration: float,
                 voices: set[str]) -> np.ndarray:
    """Bool per 10 ms frame: some voice of ``voices`` speaks (for ``der_counts``' ``where``)."""
    frames = int(np.ceil(max([duration] + [e for _, _, e in ref]) / STEP)) + 1
    out = np.zeros(frames, bool)
    for spk, start, end in ref:
        if spk in voices:
            out[int(round(start / STEP)):int(round(end / STEP))] = True
    return out


def voice_turns(eval_dir: Path, stem: str) -> list[tuple[str, float, float]]:
    """Reference turns labelled by voice: a synthetic item's speakers by their TTS voice (two
    items share a voice), real items by the corpus' speaker ids."""
    ref = read_rttm(eval_dir / f"{stem}.rttm")
    meta = eval_dir / f"{stem}.json"
    if meta.is_file():
        voices = {t["speaker"]: t["voice"] for t in json.loads(meta.read_text())["turns"]}
        ref = [(voices.get(spk, spk), s, e) for spk, s, e in ref]
    return ref


def build_long(eval_dir: Path, seconds: float, pcm: Path, stems: list[str] | None = None,
               gap: float = 1.0) -> list[tuple[str, float, float]]:
    """Cycle ``stems`` (default: the scored items), ``gap`` s of silence between them, into
    the 16 kHz int16 file ``pcm`` up to ``seconds``; returns the reference turns labelled by
    voice, cut at the end."""
    ref: list[tuple[str, float, float]] = []
    cache: dict[str, tuple[np.ndarray, list]] = {}
    at = 0.0
    silence = np.zeros(int(gap * SAMPLE_RATE), PCM_DTYPE)
    with open(pcm, "wb") as out:
        while at < seconds:
            for stem in stems or SCORED:
                if stem not in cache:
                    audio = load_audio(eval_dir / f"{stem}.wav")
                    cache[stem] = ((np.clip(audio, -1, 1) * 32767).astype(PCM_DTYPE),
                                   voice_turns(eval_dir, stem))
                samples, turns = cache[stem]
                left = seconds - at
                if left <= 0:
                    break
                part = samples[:int(left * SAMPLE_RATE)]
                out.write(part.tobytes())
                ref += [(spk, at + s, min(at + e, seconds)) for spk, s, e in turns
                        if at + s < seconds]
                at += len(part) / SAMPLE_RATE
                if at < seconds:
                    out.write(silence[:int(min(gap, seconds - at) * SAMPLE_RATE)].tobytes())
                    at = min(seconds, at + gap)
    return ref


VOICES: dict[str, tuple[str, ...]] = {
    "allison_smith": ("real/asterisk_16k/*.wav",),
    "librivox_austen": ("real/pocketsphinx/librivox/*.wav",),
    "cmu_cards": ("real/pocketsphinx/cards/*.wav",),
    "pocketsphinx_dhd": ("real/pocketsphinx/goforward.wav",
                         "real/pocketsphinx/tidigits_dhd.*.wav"),
    "cmu_forever": ("real/pocketsphinx/forever_input_2_16k.wav",),
    "timit_ldc93s1": ("real/deepspeech/LDC93S1.wav",),
    "deepspeech_new_home": ("real/deepspeech/new-home-in-the-stars-16k.wav",),
    "lj": ("real/speechbrain/LJ*.wav",),
    "speechbrain_spk1": ("real/speechbrain/spk1_*.wav",),
    "speechbrain_spk2": ("real/speechbrain/spk2_*.wav",),
    "jfk": ("real/whisper/jfk.flac",),
    "alsa": ("real/alsa/*.wav",),
}
"""Single-speaker voices of the eval set and the items that are each: one voice per
recorded person as the source names them (Asterisk's prompts are all Allison Smith's, as
the manifest says; a LibriVox chapter is one reader; speechbrain's ``spkN_`` and TIDIGITS'
speaker code name the person; ALSA's channel names are one recording session). Items whose
source says nothing of who spoke are each a voice of their own, but for pocketsphinx's
``goforward``: its CAM++ embeddings are as alike to the TIDIGITS ``dhd`` item's as one
voice's own (average 0.76; no two other voices above 0.52), so the two are one voice. One
rendering of each recording only (the 16 kHz LDC93S1, asterisk_16k): the same speech at
other rates would be the same voice twice over."""

SOURCES: dict[str, str] = {
    "allison_smith": "asterisk", "librivox_austen": "pocketsphinx", "cmu_cards": "pocketsphinx",
    "pocketsphinx_dhd": "pocketsphinx", "cmu_forever": "pocketsphinx",
    "timit_ldc93s1": "deepspeech", "deepspeech_new_home": "deepspeech", "lj": "speechbrain",
    "speechbrain_spk1": "speechbrain", "speechbrain_spk2": "speechbrain", "jfk": "whisper",
    "alsa": "alsa",
}
"""The source (eval folder) of each single-speaker voice; the multi-speaker items' voices are
``synthetic`` (TTS voices) and ``pyannote_ami``."""

LEVEL = 0.05
"""RMS (full scale 1) the single-speaker clips are brought to over their speech."""


def source_of(voice: str) -> str:
    """Eval source of a voice label (see ``SOURCES``)."""
    if voice in SOURCES:
        return SOURCES[voice]
    return "pyannote_ami" if voice.startswith(("MEE", "FEO", "FEE", "MEO")) else "synthetic"


def speech_spans(audio: np.ndarray, bridge: float = 0.3, floor_db: float = 35.0
                 ) -> list[tuple[float, float]]:
    """Where a clean single-speaker clip holds speech, by energy alone (independent of the
    service's VAD): 10 ms frames within ``floor_db`` of the clip's loudest frames (95th
    percentile), pauses shorter than ``bridge`` s bridged, runs under 50 ms dropped."""
    hop = int(STEP * SAMPLE_RATE)
    n = len(audio) // hop
    if n == 0:
        return []
    frames = audio[:n * hop].astype(np.float64).reshape(n, hop)
    db = 10 * np.log10(np.mean(frames ** 2, axis=1) + 1e-10)
    on = db >= max(np.percentile(db, 95) - floor_db, -60.0)
    spans: list[list[int]] = []
    for i in np.flatnonzero(on):
        if spans and i - spans[-1][1] <= int(bridge / STEP):
            spans[-1][1] = i + 1
        else:
            spans.append([i, i + 1])
    return [(a * STEP, b * STEP) for a, b in spans if b - a >= 5]


def voice_clips(eval_dir: Path) -> dict[str, list[str]]:
    """Each single-speaker voice's items (paths under ``eval_dir``), sorted; only items the
    manifest lists as real single-speaker speech with a spoken reference."""
    manifest = json.loads((eval_dir / "manifest.json").read_text())
    spoken = {i["path"] for i in manifest["items"]
              if i["kind"] == "real" and i.get("speakers") == 1 and i.get("reference_text")
              and not i["reference_text"].lstrip().startswith(("(", "<", "["))}
    out = {}
    for voice, patterns in VOICES.items():
        paths = sorted({str(p.relative_to(eval_dir)) for pat in patterns
                        for p in eval_dir.glob(pat)} & spoken)
        if paths:
            out[voice] = paths
    return out


def build_conversation(eval_dir: Path, seconds: float, pcm: Path, seed: int = 0,
                       voices: list[str] | None = None, stems: list[str] | None = None,
                       cast: int = 4, turnover: float = 0.1, overlap: float = 0.15,
                       item_every: int = 10
                       ) -> list[tuple[str, float, float]]:
    """A many-voice conversation of ``seconds`` written to the 16 kHz int16 file ``pcm``;
    returns its reference turns labelled by voice.

    Turns of the single-speaker ``voices`` (default: all of ``VOICES``; each turn
    consecutive clips of one voice, 0.2-0.6 s apart, brought to ``LEVEL`` within ±6 dB
    (a level drawn once per voice), until it holds
    2-8 s of speech or five clips) alternate among a ``cast`` of voices (the next speaker
    drawn from the others with weights 1 / (5 s + their speech so far), so that voices
    heard little catch up), one of whom is replaced by the voice outside it heard least
    (seconds of speech so far)
    with probability ``turnover`` after each turn, so voices leave and return. Every
    ``item_every``-th turn is instead a whole multi-speaker item of ``stems`` (default:
    the scored items, in turn) with its own reference turns. Turns follow each other after
    0.3-1.5 s of silence, or, with probability ``overlap`` between two single-voice turns,
    start 0.3-1.0 s (at most 40 % of either turn) before the previous one ends, the two
    voices mixed. Single-voice reference turns are the clips' speech by energy
    (``speech_spans``). Deterministic for a ``seed``.
    """
    rng = np.random.default_rng(seed)
    clips = voice_clips(eval_dir)
    names = [v for v in (voices if voices is not None else list(clips)) if v in clips]
    items = list(SCORED if stems is None else stems)
    cache: dict[str, tuple[np.ndarray, list[tuple[str, float, float]]]] = {}

    def clip(path: str, voice: str) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
        if path not in cache:
            audio = load_audio(eval_dir / path)
            spans = speech_spans(audio)
            hop = int(STEP * SAMPLE_RATE)
            voiced = np.concatenate([audio[int(s * SAMPLE_RATE):int(e * SAMPLE_RATE)]
                                     for s, e in spans]) if spans else audio[:hop]
            rms = float(np.sqrt(np.mean(voiced.astype(np.float64) ** 2))) or 1.0
            level = LEVEL * 10 ** (gains[voice] / 20)
            gain = min(level / rms, 0.95 / max(float(np.abs(audio).max()), 1e-6))
            cache[path] = (audio * gain, [(voice, s, e) for s, e in spans])
        return cache[path]

    def item(stem: str) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
        if stem not in cache:
            cache[stem] = (load_audio(eval_dir / f"{stem}.wav"), voice_turns(eval_dir, stem))
        return cache[stem]

    gains = {v: float(rng.uniform(-6.0, 6.0)) for v in names}  # dB: some talk louder
    order = {v: list(rng.permutation(len(clips[v]))) for v in names}
    heard = dict.fromkeys(names, 0)  # clips played
    spoken = dict.fromkeys(names, 0.0)  # seconds of speech
    on_stage = list(rng.choice(names, size=min(cast, len(names)), replace=False))
    total = int(seconds * SAMPLE_RATE)
    mix = np.zeros(total, np.float32)
    ref: list[tuple[str, float, float]] = []
    at, last, last_len, n_item, turn = 0.0, None, 0.0, 0, 0
    while at < seconds:
        turn += 1
        if items and (not names or turn % item_every == 0):
            audio, turns = item(items[n_item % len(items)])
            n_item += 1
            speaker, start = None, at + rng.uniform(0.3, 1.5)
        else:
            others = [v for v in on_stage if v != last] or on_stage
            weight = np.array([1.0 / (5.0 + spoken[v]) for v in others])
            speaker = str(others[int(rng.choice(len(others), p=weight / weight.sum()))])
            parts, turns, length = [], [], 0.0
            want = rng.uniform(2.0, 8.0)
            # until it holds ``want`` s of speech, at most five clips (and four pauses)
            while not parts or sum(e - s for _, s, e in turns) < want and len(parts) < 9:
                pick = order[speaker]
                path = clips[speaker][pick[heard[speaker] % len(pick)]]
                heard[speaker] += 1
                audio, spans = clip(path, speaker)
                spoken[speaker] += sum(e - s for _, s, e in spans)
                if parts:
                    pause = np.zeros(int(rng.uniform(0.2, 0.6) * SAMPLE_RATE), np.float32)
                    parts.append(pause)
                    length += len(pause) / SAMPLE_RATE
                turns += [(v, length + s, length + e) for v, s, e in spans]
                parts.append(audio)
                length += len(audio) / SAMPLE_RATE
            audio = np.concatenate(parts)
            speaker_len = max((e for _, _, e in turns), default=0.0) - \
                min((s for _, s, _ in turns), default=0.0)
            if last is not None and rng.random() < overlap:
                back = min(rng.uniform(0.3, 1.0), 0.4 * speaker_len, 0.4 * last_len)
                start = max(0.0, at - back)
            else:
                start = at + rng.uniform(0.3, 1.5)
            last_len = speaker_len
            if rng.random() < turnover and len(names) > len(on_stage):
                out = int(rng.integers(len(on_stage)))
                waiting = [v for v in names if v not in on_stage]
                on_stage[out] = min(waiting, key=lambda v: (spoken[v], names.index(v)))
        begin = int(round(start * SAMPLE_RATE))
        if begin >= total:
            break
        piece = audio[:total - begin]
        mix[begin:begin + len(piece)] += piece
        ref += [(v, start + s, min(start + e, seconds)) for v, s, e in turns
                if start + s < seconds]
        # the speech's end: a turn's trailing silence is not a turn
        at = start + max((e for _, _, e in turns), default=len(audio) / SAMPLE_RATE)
        if speaker is None:
            at = start + len(audio) / SAMPLE_RATE
            last, last_len = None, 0.0
        else:
            last = speaker
    with open(pcm, "wb") as out:
        out.write((np.clip(mix, -1, 1) * 32767).astype(PCM_DTYPE).tobytes())
    return sorted(ref, key=lambda t: (t[1], t[2]))
