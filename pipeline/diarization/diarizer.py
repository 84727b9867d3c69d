"""Who spoke when: sliding-window CAM++ embeddings over VAD speech, clustered."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..types import SAMPLE_RATE, Region, SpeakerTurn
from .clustering import cluster_embeddings
from .embedding import FRAME_SHIFT, SpeakerEmbedder
from .options import DiarizationOptions

__all__ = ["Diarizer"]

_PIECE = 60.0
"""Speech is featurised in pieces of at most this many seconds, bounding feature memory."""


@dataclass(frozen=True, slots=True)
class _Window:
    start: float
    end: float
    piece: int


def _pieces(speech: list[Region], duration: float) -> list[Region]:
    """Speech clipped to the audio, overlaps merged, long regions cut into pieces."""
    spans: list[list[float]] = []
    for region in sorted(speech, key=lambda r: r.start):
        start, end = max(0.0, region.start), min(duration, region.end)
        if end - start <= 1e-6:
            continue
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    out: list[Region] = []
    for start, end in spans:
        while end - start > 1e-6:
            stop = min(end, start + _PIECE)
            if end - stop < _PIECE / 4:
                stop = end
            out.append(Region(start, stop))
            start = stop
    return out


class Diarizer:
    """Diarizes one file at a time; the embedder is a shared, preloaded resource.

    The number of speakers is found automatically, unless the job gives one
    (``speakers_expected`` of AssemblyAI's API). Turns never overlap: each instant of
    speech gets the one speaker whose window is nearest in time.
    """

    def __init__(self, embedder: SpeakerEmbedder, opts: DiarizationOptions | None = None) -> None:
        self._embedder = embedder
        self._opts = opts or DiarizationOptions()

    @property
    def options(self) -> DiarizationOptions:
        return self._opts

    def diarize(self, audio: np.ndarray, speech: list[Region],
                speakers: int | None = None) -> list[SpeakerTurn]:
        """Speaker turns over the speech regions, in time order.

        Args:
          audio: 16 kHz mono float32 samples of the whole file.
          speech: VAD speech regions in seconds (any order; clipped to the audio).
          speakers: the number of speakers the client expects, or None to estimate it.

        Returns:
          Turns with speakers numbered 0, 1, … in order of first speech.
        """
        pieces = _pieces(speech, len(audio) / SAMPLE_RATE)
        if not pieces:
            return []
        if speakers == 1 or (speakers is None and
                             sum(p.duration for p in pieces) < 2 * self._opts.min_speaker):
            # A speaker needs min_speaker seconds of speech: this little is one voice, and
            # short prompts (most of a call-centre backlog) skip the embedding model.
            return [SpeakerTurn(0, p.start, p.end) for p in pieces]
        windows, emb = self._embed(audio, pieces)
        if not windows:
            # All speech is shorter than min_window: one speaker is all that can be said.
            return [SpeakerTurn(0, p.start, p.end) for p in pieces]
        seconds = np.array([w.end - w.start for w in windows]) * min(
            1.0, self._opts.hop / self._opts.window)
        labels = cluster_embeddings(emb, seconds, self._opts, speakers)
        return _turns(pieces, windows, labels)

    def _embed(self, audio: np.ndarray, pieces: list[Region]) -> tuple[list[_Window], np.ndarray]:
        opts = self._opts
        size = max(1, round(opts.window / FRAME_SHIFT))
        step = max(1, round(opts.hop / FRAME_SHIFT))
        windows: list[_Window] = []
        vectors: list[np.ndarray] = []
        batch: list[np.ndarray] = []

        def flush() -> None:
            if batch:
                vectors.append(self._embedder.embed_fbank(batch))
                batch.clear()

        for index, piece in enumerate(pieces):
            if piece.duration < opts.min_window:
                continue
            a = audio[int(piece.start * SAMPLE_RATE):int(piece.end * SAMPLE_RATE)]
            feats = self._embedder.fbank(a)
            n = len(feats)
            if n == 0:
                continue
            if n <= size:
                # A short region is its own window; odd lengths cannot share a batch.
                flush()  # keep embeddings in window order
                windows.append(_Window(piece.start, piece.end, index))
                vectors.append(self._embedder.embed_fbank([feats]))
                continue
            starts = list(range(0, n - size + 1, step))
            if starts[-1] + size < n:
                starts.append(n - size)
            for s in starts:
                windows.append(_Window(piece.start + s * FRAME_SHIFT,
                                       piece.start + (s + size) * FRAME_SHIFT, index))
                batch.append(feats[s:s + size])
                if len(batch) >= opts.batch_size:
                    flush()
        flush()
        emb = np.concatenate(vectors) if vectors else np.zeros((0, SpeakerEmbedder.dim))
        return windows, emb


def _turns(pieces: list[Region], windows: list[_Window], labels: np.ndarray) -> list[SpeakerTurn]:
    centers = np.array([(w.start + w.end) / 2 for w in windows])
    by_piece: dict[int, list[int]] = {}
    for i, w in enumerate(windows):
        by_piece.setdefault(w.piece, []).append(i)
    spans: list[tuple[int, float, float]] = []
    for index, piece in enumerate(pieces):
        members = by_piece.get(index)
        if not members:
            # Too short to embed: the speaker of the nearest window in time.
            mid = (piece.start + piece.end) / 2
            spans.append((int(labels[np.argmin(np.abs(centers - mid))]), piece.start, piece.end))
            continue
        start = piece.start
        for a, b in zip(members, members[1:]):
            if labels[a] != labels[b]:
                cut = (centers[a] + centers[b]) / 2
                spans.append((int(labels[a]), start, cut))
                start = cut
        spans.append((int(labels[members[-1]]), start, piece.end))
    # Join touching spans of one speaker (piece boundaries inside a region).
    merged: list[list] = []
    for spk, s, e in spans:
        if merged and merged[-1][0] == spk and s - merged[-1][2] < 1e-6:
            merged[-1][2] = e
        else:
            merged.append([spk, s, e])
    order: dict[int, int] = {}
    for spk, _, _ in merged:
        order.setdefault(spk, len(order))
    return [SpeakerTurn(order[spk], s, e) for spk, s, e in merged]
