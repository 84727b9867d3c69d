"""Speech detection with Silero VAD, and the plan of chunks Whisper decodes.

Silero's "sequence" ONNX export (shipped in the ``silero-vad`` wheel) scores a
block of 32 ms frames in one call, carrying the LSTM state between blocks; it is
bit-exact with the frame-by-frame model but spends its time in ONNX Runtime
rather than a Python loop. The PCM file is read block by block through a memory
map and the probabilities go straight into an incremental segmenter, so memory
stays fixed whatever the length of the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import numpy as np
import onnxruntime as ort
from pydantic import BaseModel, ConfigDict, Field

from .audio import PCM_DTYPE
from .types import SAMPLE_RATE, Region

__all__ = ["VadOptions", "SileroVad", "speech_regions", "plan_chunks"]

_FRAME = 512
"""Samples per Silero frame at 16 kHz (32 ms)."""

_CONTEXT = 64
"""Samples of the previous frame that the model sees in front of each frame."""

_FRAME_S = _FRAME / SAMPLE_RATE


class VadOptions(BaseModel):
    """How speech is detected and grouped into chunks for recognition."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold: float = Field(0.5, gt=0, lt=1)
    """Speech probability at or above which a frame starts speech."""
    neg_threshold: float | None = Field(None, gt=0, lt=1)
    """Probability below which a frame counts as silence; ``None``: threshold - 0.15."""
    min_speech_ms: int = Field(250, ge=0)
    """Speech shorter than this (milliseconds) is dropped as a click or breath."""
    min_silence_ms: int = Field(500, ge=0)
    """Silence must last this long (milliseconds) to end a speech region."""
    speech_pad_ms: int = Field(300, ge=0)
    """Added to both sides of each region (milliseconds) so word edges are not cut."""
    max_speech_s: float = Field(28.0, gt=1)
    """Longer regions are split (seconds), at their longest pause where there is one."""
    min_split_silence_ms: int = Field(98, ge=0)
    """Shortest pause (milliseconds) that may serve as a split point for a long region."""
    max_chunk_s: float = Field(30.0, gt=1, le=30)
    """Longest chunk handed to the recogniser (seconds); Whisper sees 30 s at a time."""
    max_merge_gap_s: float = Field(3.0, ge=0)
    """Regions separated by a longer pause (seconds) go to different chunks."""
    block_frames: int = Field(512, ge=1)
    """Frames scored per model call (512 frames = 16.4 s); bounds the memory used."""


class SileroVad:
    """The Silero VAD sequence model, loaded once and reused across files.

    Safe to share between threads: ONNX Runtime sessions are, and the LSTM
    state of a file lives in each :meth:`probabilities` call.
    """

    def __init__(self, model_path: str | Path | None = None) -> None:
        path = model_path or files("silero_vad") / "data" / "silero_vad_16k_sequence.onnx"
        options = ort.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = 1
        options.log_severity_level = 3  # the export has unused initialisers: no warning
        self._session = ort.InferenceSession(str(path), sess_options=options,
                                             providers=["CPUExecutionProvider"])

    def probabilities(self, samples: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        """Per-frame speech probabilities for consecutive blocks of float32 16 kHz audio.

        Blocks must hold a whole number of frames except the last, which is zero-padded.
        """
        h = np.zeros((1, 1, 128), dtype=np.float32)
        c = np.zeros((1, 1, 128), dtype=np.float32)
        context = np.zeros(_CONTEXT, dtype=np.float32)
        for block in samples:
            n_frames = -(-block.size // _FRAME)
            if n_frames == 0:
                continue
            frames = np.zeros((n_frames, _FRAME), dtype=np.float32)
            frames.reshape(-1)[: block.size] = block
            contexts = np.empty((n_frames, _CONTEXT), dtype=np.float32)
            contexts[0] = context
            contexts[1:] = frames[:-1, -_CONTEXT:]
            context = frames[-1, -_CONTEXT:].copy()
            probs, h, c = self._session.run(["speech_probs", "hn", "cn"], {
                "input": np.concatenate((contexts, frames), axis=1), "h": h, "c": c})
            yield probs.reshape(-1)


class _Segmenter:
    """Turns frame probabilities into raw speech spans (frame indices), one frame at a time.

    Follows Silero's own ``get_speech_timestamps`` rules: hysteresis between the
    two thresholds, a minimum silence to close a region, and splitting a region
    at its longest pause once it reaches the maximum length.
    """

    def __init__(self, opts: VadOptions) -> None:
        self.opts = opts
        self.spans: list[tuple[int, int]] = []
        self._start: int | None = None
        self._silence_from: int | None = None
        self._pauses: list[tuple[int, int]] = []  # (silence start, speech resumes)
        self._neg = (opts.neg_threshold if opts.neg_threshold is not None
                     else max(opts.threshold - 0.15, 0.01))
        self._min_silence = opts.min_silence_ms / 1000 / _FRAME_S
        self._min_split_silence = opts.min_split_silence_ms / 1000 / _FRAME_S
        pad = opts.speech_pad_ms / 1000
        self._max_speech = max(1.0, (opts.max_speech_s - 2 * pad) / _FRAME_S - 1)

    def feed(self, first: int, probs: np.ndarray) -> None:
        thr, neg = self.opts.threshold, self._neg
        for i, p in enumerate(probs.tolist(), start=first):
            if p >= thr and self._silence_from is not None:
                if i - self._silence_from > self._min_split_silence:
                    self._pauses.append((self._silence_from, i))
                self._silence_from = None
            if self._start is None:
                if p >= thr:
                    self._start = i
                continue
            if i - self._start > self._max_speech:
                self._split(i)
            if p < neg:
                if self._silence_from is None:
                    self._silence_from = i
                if i - self._silence_from >= self._min_silence:
                    self._close(self._start, self._silence_from)
                    self._start = self._silence_from = None
                    self._pauses = []

    def _split(self, i: int) -> None:
        if self._pauses:
            end, resume = max(self._pauses, key=lambda s: s[1] - s[0])
            self._close(self._start, end)
            self._start = resume
        else:  # no pause to cut at: cut here, or where the current silence began
            self._close(self._start, self._silence_from if self._silence_from is not None else i)
            self._start = i
        self._pauses = [s for s in self._pauses if s[0] >= self._start]

    def finish(self, n_frames: int) -> None:
        if self._start is not None:
            self._close(self._start, n_frames)
            self._start = None

    def _close(self, start: int, end: int) -> None:
        if end > start:  # a hard cut inside a silence can leave nothing after it
            self.spans.append((start, end))


def _pcm_blocks(pcm_path: Path, block_samples: int) -> Iterator[np.ndarray]:
    n = pcm_path.stat().st_size // PCM_DTYPE.itemsize
    if n == 0:
        return
    pcm = np.memmap(pcm_path, dtype=PCM_DTYPE, mode="r", shape=(n,))
    try:
        for start in range(0, n, block_samples):
            yield pcm[start:start + block_samples].astype(np.float32) / np.float32(32768.0)
    finally:
        del pcm


def speech_regions(pcm_path: str | Path, opts: VadOptions,
                   model: SileroVad | None = None) -> list[Region]:
    """Find speech in a raw PCM file (16 kHz mono int16, as written by ``decode_to_pcm``).

    Args:
        pcm_path: the PCM file; read block by block, never whole.
        opts: detection settings.
        model: a loaded model to reuse; one is loaded for this call if omitted.

    Returns:
        Padded speech regions in seconds, in order and not overlapping.
    """
    pcm_path = Path(pcm_path)
    duration = pcm_path.stat().st_size // PCM_DTYPE.itemsize / SAMPLE_RATE
    model = model or SileroVad()
    segmenter = _Segmenter(opts)
    frames = 0
    for probs in model.probabilities(_pcm_blocks(pcm_path, opts.block_frames * _FRAME)):
        segmenter.feed(frames, probs)
        frames += probs.size
    segmenter.finish(frames)
    return _pad(segmenter.spans, opts, duration)


def _pad(spans: list[tuple[int, int]], opts: VadOptions, duration: float) -> list[Region]:
    """Drop short spans, then pad; where pads would overlap the gap is shared."""
    pad = opts.speech_pad_ms / 1000
    kept = [(s * _FRAME_S, min(e * _FRAME_S, duration)) for s, e in spans
            if (e - s) * _FRAME_S * 1000 >= opts.min_speech_ms]
    regions: list[Region] = []
    for k, (start, end) in enumerate(kept):
        if k == 0:
            start = max(0.0, start - pad)
        else:
            gap = start - kept[k - 1][1]
            start -= min(pad, gap / 2)
        if k + 1 < len(kept):
            end += min(pad, (kept[k + 1][0] - end) / 2)
        else:
            end = min(duration, end + pad)
        if end > start:
            regions.append(Region(round(start, 3), round(end, 3)))
    return regions


def plan_chunks(regions: list[Region], opts: VadOptions) -> list[Region]:
    """Group speech regions into chunks of at most ``opts.max_chunk_s`` for the recogniser.

    Whisper always encodes a 30 s window, so a few long chunks cost far less
    than many short ones; regions are joined while the chunk stays within the
    limit and the pause between them is at most ``opts.max_merge_gap_s`` (long
    silences inside a chunk invite hallucinated text). A region longer than the
    limit is cut into equal pieces.

    Returns:
        Chunks in seconds, in order; each covers one or more whole regions.
    """
    chunks: list[Region] = []
    for region in (piece for r in regions for piece in _split_long(r, opts.max_chunk_s)):
        last = chunks[-1] if chunks else None
        if (last is not None and region.end - last.start <= opts.max_chunk_s
                and region.start - last.end <= opts.max_merge_gap_s):
            chunks[-1] = Region(last.start, region.end)
        else:
            chunks.append(region)
    return chunks


def _split_long(region: Region, limit: float) -> list[Region]:
    if region.duration <= limit:
        return [region]
    n = int(np.ceil(region.duration / limit))
    step = region.duration / n
    return [Region(round(region.start + k * step, 3),
                   round(region.end if k == n - 1 else region.start + (k + 1) * step, 3))
            for k in range(n)]
