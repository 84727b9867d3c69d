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

__all__ = ["SCORED", "build_long", "der_counts", "load_audio", "read_rttm", "unmatched_voices",
           "voice_turns"]

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
