"""Diarization benchmark: DER, speaker counts and real-time factor on the shared eval set.

``python -m ops.bench_diarization [--eval DIR] [--set field=value ...] [--long SECONDS ...]``

DER is frame-based at 10 ms with no collar and overlapped speech scored:
(missed + false alarm + confusion) / reference speech, where the hypothesis speakers
are mapped one-to-one onto reference speakers to maximise agreement (Hungarian
assignment). Overall DER pools the frames of all files. RTF is wall time over audio
duration on this machine; VAD (Silero, ONNX) is reported separately from diarization.

``--long SECONDS`` builds recordings of that length by cycling the scored items with
their reference turns (a voice that returns keeps its label: the synthetic items' voice
names, AMI's speaker ids), writes them as the service's 16 kHz PCM, finds speech with the
service's VAD and diarizes through the same memory map the service uses; it prints DER,
the speaker count against the truth, RTF and the peak resident memory while diarizing.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
from scipy.optimize import linear_sum_assignment

from pipeline.diarization import DiarizationOptions, Diarizer, SpeakerEmbedder
from pipeline.types import SAMPLE_RATE, Region, SpeakerTurn

__all__ = ["main", "build_long", "der_counts", "read_rttm", "load_audio", "voice_turns"]

STEP = 0.01
"""Scoring frame, s."""

SCORED = [
    "synthetic/conv01_support_call", "synthetic/conv02_team_meeting", "synthetic/conv03_overlap",
    "real/pyannote_ami/dev00", "real/pyannote_ami/dev01", "real/pyannote_ami/trn02",
]
SINGLE = [
    "real/whisper/jfk.flac",
    "real/pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0870.wav",
    "real/asterisk_16k/demo-congrats.wav", "real/asterisk_16k/priv-callee-options.wav",
    "real/asterisk_16k/basic-pbx-ivr-main.wav", "real/speechbrain/LJ050-0131.wav",
    "real/pocketsphinx/goforward.wav",
]


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


def unmatched_voices(ref: list[tuple[str, float, float]], hyp: list[SpeakerTurn],
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


def der_counts(ref: list[tuple[str, float, float]], hyp: list[SpeakerTurn],
               duration: float) -> dict[str, float]:
    """Seconds of reference speech, miss, false alarm and confusion for one file."""
    frames = int(np.ceil(max([duration] + [e for _, _, e in ref]
                             + [t.end for t in hyp]) / STEP)) + 1
    r = _grid(ref, frames)
    h = _grid([(t.speaker, t.start, t.end) for t in hyp], frames)
    nr, nh = r.sum(1), h.sum(1)
    correct = 0
    if r.shape[1] and h.shape[1]:
        agree = r.T.astype(np.int64) @ h.astype(np.int64)
        rows, cols = linear_sum_assignment(-agree)
        correct = int(agree[rows, cols].sum())
    both = np.minimum(nr, nh).sum()
    return {"ref": nr.sum() * STEP, "miss": np.maximum(nr - nh, 0).sum() * STEP,
            "fa": np.maximum(nh - nr, 0).sum() * STEP, "conf": (both - correct) * STEP}


@dataclass
class _Vad:
    model: object

    def __call__(self, audio: np.ndarray) -> list[Region]:
        import torch
        from silero_vad import get_speech_timestamps
        stamps = get_speech_timestamps(torch.from_numpy(audio), self.model,
                                       sampling_rate=SAMPLE_RATE, return_seconds=True)
        return [Region(float(s["start"]), float(s["end"])) for s in stamps]


def _parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key] = value
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


class _PeakRss:
    """Samples this process' resident memory every 20 ms while running."""

    def __init__(self) -> None:
        self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> "_PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())


def build_long(eval_dir: Path, seconds: float, pcm: Path, stems: list[str] | None = None,
               gap: float = 1.0) -> list[tuple[str, float, float]]:
    """Cycle ``stems`` (default: the scored items), ``gap`` s of silence between them, into
    the 16 kHz int16 file ``pcm`` up to ``seconds``; returns the reference turns labelled by
    voice, cut at the end."""
    from pipeline.audio import PCM_DTYPE
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


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_long(diarizer: Diarizer, eval_dir: Path, seconds: float) -> None:
    """Build, diarize and score one cycled recording of ``seconds``."""
    from pipeline.engines import PcmSamples
    from pipeline.vad import SileroVad, VadOptions, speech_regions
    with tempfile.TemporaryDirectory() as tmp:
        pcm = Path(tmp) / "long.pcm"
        ref = build_long(eval_dir, seconds, pcm)
        t0 = time.perf_counter()
        speech = speech_regions(pcm, VadOptions(), SileroVad())
        t1 = time.perf_counter()
        with PcmSamples(pcm) as samples, _PeakRss() as rss:
            duration = len(samples) / SAMPLE_RATE
            before = _PeakRss.now()
            cpu = time.process_time()
            turns = diarizer.diarize(samples, speech)  # type: ignore[arg-type]
            cpu = time.process_time() - cpu
        t2 = time.perf_counter()
    c = der_counts(ref, turns, duration)
    der = (c["miss"] + c["fa"] + c["conf"]) / c["ref"] * 100
    truth = len({s for s, _, _ in ref})
    found = len({t.speaker for t in turns})
    print(f"long {seconds:7.0f} s: DER {der:5.1f}% (miss {c['miss'] / c['ref'] * 100:.1f}%,"
          f" fa {c['fa'] / c['ref'] * 100:.1f}%, conf {c['conf'] / c['ref'] * 100:.1f}%)"
          f" speakers {found} (truth {truth}); RTF diarization {(t2 - t1) / duration:.4f}"
          f" (CPU {cpu / duration:.4f}), VAD {(t1 - t0) / duration:.4f};"
          f" peak RSS while diarizing {rss.peak / 2**20:.0f} MiB"
          f" ({(rss.peak - before) / 2**20:+.0f} MiB over the loaded models); {_load()}",
          flush=True)
    speech = {}
    for spk, s, e in ref:
        speech[spk] = speech.get(spk, 0.0) + e - s
    lost = unmatched_voices(ref, turns, duration)
    print("  voices without a speaker of their own: "
          + (", ".join(f"{v} ({speech[v]:.0f} s)" for v in lost) or "none"), flush=True)


def run_cluster_scale(diarizer: Diarizer, hours: float, voices: int = 12) -> None:
    """Clustering and turn building alone on synthetic model output for ``hours`` of speech
    (every window busy, two local speakers, embeddings of ``voices`` random voices): the
    part of the cost that is not linear in the models' work."""
    from pipeline.diarization.diarizer import _Chunks
    rng = np.random.default_rng(0)
    opts = diarizer.options
    seg = diarizer._seg  # noqa: SLF001 - the bench measures the stage's own internals
    n = int(hours * 3600 / opts.step)
    frames = seg.frames_per_window
    chunks = _Chunks(starts=[i * opts.step for i in range(n)],
                     offsets=[int(round(i * opts.step / seg.frame_step)) for i in range(n)],
                     stretch=[0] * n, embedded=[i % opts.embed_every == 0 for i in range(n)])
    chunks.activity = np.zeros((n, frames, 3), np.uint8)
    chunks.activity[:, : frames // 2, 0] = 1
    chunks.activity[:, frames // 2:, 1] = 1
    chunks.labels = np.full((n, 3), -1, np.int64)
    means = rng.normal(size=(voices, SpeakerEmbedder.dim))
    owners = [(c, j) for c in range(0, n, opts.embed_every) for j in (0, 1)]
    who = rng.integers(0, voices, len(owners))
    emb = means[who] + rng.normal(size=(len(owners), SpeakerEmbedder.dim)) * 0.5
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    weights = np.full(len(owners), 3.0)
    stretch = Region(0.0, chunks.starts[-1] + seg.window)
    with _PeakRss() as rss:
        before = _PeakRss.now()
        t0 = time.perf_counter()
        diarizer._assign(chunks, emb, owners, weights, stretch.duration)  # noqa: SLF001
        t1 = time.perf_counter()
        turns = diarizer._turns(chunks, [stretch])  # noqa: SLF001
        t2 = time.perf_counter()
    print(f"clustering at {hours:g} h ({n} windows, {len(owners)} embeddings, {voices} voices):"
          f" clustering {t1 - t0:.1f} s, turns {t2 - t1:.1f} s, peak RSS {rss.peak / 2**20:.0f} MiB"
          f" ({(rss.peak - before) / 2**20:+.0f} MiB), {len({t.speaker for t in turns})} speakers;"
          f" {_load()}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", type=Path, default=Path(__file__).resolve().parents[2]
                        / "shared" / "eval", help="evaluation audio folder")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a DiarizationOptions field")
    parser.add_argument("--long", type=float, nargs="+", default=[], metavar="SECONDS",
                        help="also score cycled recordings of these lengths")
    parser.add_argument("--cluster-scale", type=float, nargs="+", default=[], metavar="HOURS",
                        help="time clustering and turn building alone at these lengths")
    parser.add_argument("--only-long", action="store_true",
                        help="skip the per-item table (with --long)")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch CPU threads (the service gives the models thread the "
                             "cores the ASR leaves)")
    args = parser.parse_args(argv)
    import torch
    from silero_vad import load_silero_vad

    torch.set_num_threads(args.threads)
    print("command: python -m ops.bench_diarization " + shlex.join(sys.argv[1:] if argv is None
                                                                      else argv))
    print(f"start: {_load()}, {args.threads} torch thread(s)", flush=True)
    opts = DiarizationOptions(**_parse_sets(args.set))
    diarizer = Diarizer(SpeakerEmbedder(), opts)
    vad = _Vad(load_silero_vad(onnx=True))
    # Warm up once: a worker keeps its models loaded, so first-call set-up is not counted.
    diarizer.diarize(np.zeros(12 * SAMPLE_RATE, np.float32), [Region(0.0, 12.0)])
    print(f"options: {opts.model_dump()}")
    if not args.only_long:
        _items(args.eval, diarizer, vad)
    for seconds in args.long:
        run_long(diarizer, args.eval, seconds)
    for hours in args.cluster_scale:
        run_cluster_scale(diarizer, hours)


def _items(eval_dir: Path, diarizer: Diarizer, vad: _Vad) -> None:
    print(f"{'file':42} {'dur':>6} {'DER%':>6} {'miss%':>6} {'fa%':>6} {'conf%':>6}"
          f" {'spk':>3} {'ref':>3}")
    totals = dict.fromkeys(("ref", "miss", "fa", "conf"), 0.0)
    audio_s = vad_s = diar_s = 0.0
    right = count = multi_right = multi = 0
    rows: list[tuple[str, Path, list | None, int]] = []
    for stem in SCORED:
        ref = read_rttm(eval_dir / f"{stem}.rttm")
        rows.append((stem, eval_dir / f"{stem}.wav", ref, len({s for s, _, _ in ref})))
    rows += [(name, eval_dir / name, None, 1) for name in SINGLE]
    for name, path, ref, ref_count in rows:
        audio = load_audio(path)
        duration = len(audio) / SAMPLE_RATE
        t0 = time.perf_counter()
        speech = vad(audio)
        t1 = time.perf_counter()
        turns = diarizer.diarize(audio, speech)
        t2 = time.perf_counter()
        audio_s, vad_s, diar_s = audio_s + duration, vad_s + t1 - t0, diar_s + t2 - t1
        found = len({t.speaker for t in turns})
        right += found == ref_count
        count += 1
        if ref_count > 1:
            multi_right += found == ref_count
            multi += 1
        label = Path(name).stem if ref is None else name.split("/")[-1]
        if ref is None:
            print(f"{label:42} {duration:6.1f} {'':>6} {'':>6} {'':>6} {'':>6} {found:3d}"
                  f" {ref_count:3d}")
            continue
        c = der_counts(ref, turns, duration)
        for key in totals:
            totals[key] += c[key]
        der = (c["miss"] + c["fa"] + c["conf"]) / c["ref"] * 100
        print(f"{label:42} {duration:6.1f} {der:6.1f} {c['miss'] / c['ref'] * 100:6.1f}"
              f" {c['fa'] / c['ref'] * 100:6.1f} {c['conf'] / c['ref'] * 100:6.1f}"
              f" {found:3d} {ref_count:3d}")
    ref_s = totals["ref"]
    print(f"overall DER {(totals['miss'] + totals['fa'] + totals['conf']) / ref_s * 100:.1f}%"
          f" (miss {totals['miss'] / ref_s * 100:.1f}%,"
          f" false alarm {totals['fa'] / ref_s * 100:.1f}%,"
          f" confusion {totals['conf'] / ref_s * 100:.1f}%) over {ref_s:.1f} s of reference speech")
    print(f"speaker count exact: {right}/{count} (multi-speaker {multi_right}/{multi})")
    print(f"RTF over {audio_s:.1f} s: diarization {diar_s / audio_s:.4f},"
          f" VAD {vad_s / audio_s:.4f}, together {(diar_s + vad_s) / audio_s:.4f}; {_load()}",
          flush=True)


if __name__ == "__main__":
    main()
