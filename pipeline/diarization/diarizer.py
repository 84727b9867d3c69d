"""Who spoke when: overlap-aware local segmentation, per-speaker embeddings, global clustering.

The way pyannote's own pipeline works, with bounded cost for long files:

1. The segmentation model judges 10 s windows every ``step`` seconds over the stretches
   around the VAD's speech: up to three *local* speakers per window, two at once.
2. In every ``embed_every``-th window, each local speaker's clean (non-overlapped) speech
   is embedded with CAM++.
3. Those embeddings are clustered into global speakers (agglomerative on a bounded
   sample, then nearest centroid); within a window, local speakers go to distinct
   speakers (Hungarian assignment: a cannot-link between them).
4. Local speakers of the other windows, and those too brief to embed, take the global
   speaker they coincide with frame by frame in the nearest embedded windows.
5. Per frame, the windows' votes give how many speakers talk (the rounded mean of their
   local counts) and which (the most active global speakers): turns may overlap.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.optimize import linear_sum_assignment

from schemas.records import SpeakerCount

from ..types import SAMPLE_RATE, Region, SpeakerTurn
from .clustering import cluster_embeddings, l2_centroids
from .embedding import FRAME_SHIFT, SpeakerEmbedder
from .options import DiarizationOptions
from .segmentation import Segmenter

__all__ = ["Diarizer"]

_LENGTHS = (50, 100, 200, 300)
"""Embedded feature blocks are cut to one of these lengths (frames) and always embedded in
full batches: a handful of tensor shapes keeps the native libraries' caches and the heap
from growing with the length of the file."""

_PIECES = (50, 100)
"""Lengths (frames) a local speaker's last, shorter piece is cut to."""

_TRIM_EVERY = 16
"""Model batches between two heap trims (see ``_trim_heap``)."""


def _merge(speech: list[Region], duration: float, pad: float = 0.0,
           gap: float = 0.0) -> list[Region]:
    """Regions padded, clipped to the audio, and joined where closer than ``gap``."""
    spans: list[list[float]] = []
    for region in sorted(speech, key=lambda r: r.start):
        start, end = max(0.0, region.start - pad), min(duration, region.end + pad)
        if end - start <= 1e-6:
            continue
        if spans and start <= spans[-1][1] + gap:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    return [Region(s, e) for s, e in spans]


@dataclass
class _Chunks:
    """The segmentation windows of one file and what is learnt about their local speakers."""

    starts: list[float] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # first global frame
    stretch: list[int] = field(default_factory=list)  # index of the stretch it covers
    embedded: list[bool] = field(default_factory=list)
    activity: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 3), np.uint8))
    labels: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    # per window and frame, in 1/255: each local speaker's probability of talking, and
    # the probability that two talk at once (the model's soft output behind ``activity``)
    talk: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 3), np.uint8))
    overlap: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.uint8))
    # (window, speaker) of a local speaker whose pieces held different voices -> the
    # (first, last) segmentation frame of each piece and the embedding row it went to
    parts: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # (window, speaker) -> global speaker per frame (-1 where silent), where it changes
    frame_labels: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    # edges of the VAD's speech regions inside the file, s: where Silero heard pauses
    pauses: np.ndarray = field(default_factory=lambda: np.zeros(0))


class Diarizer:
    """Diarizes one file at a time; the models are shared, preloaded resources.

    The number of speakers is found automatically, then clipped into the job's bounds
    (``speaker_options`` of AssemblyAI's API; ``speakers_expected`` is equal bounds).
    Turns of different speakers overlap where the segmentation hears two voices at once.
    """

    def __init__(self, embedder: SpeakerEmbedder, opts: DiarizationOptions | None = None,
                 segmenter: Segmenter | None = None) -> None:
        self._embedder = embedder
        self._opts = opts or DiarizationOptions()
        self._seg = segmenter or Segmenter()

    @property
    def options(self) -> DiarizationOptions:
        return self._opts

    def diarize(self, audio: np.ndarray, speech: list[Region],
                speakers: SpeakerCount | None = None) -> list[SpeakerTurn]:
        """Speaker turns in time order.

        Args:
          audio: 16 kHz mono float32 samples of the whole file (anything that has ``len``
            and gives float32 arrays for slices; only the speech stretches are read).
          speech: VAD speech regions in seconds (any order; clipped to the audio).
          speakers: bounds on the number of speakers (an exact count when equal); None:
            estimated without bounds. A file with too little speech to embed two voices is
            one speaker unless the bounds ask for more.

        Returns:
          Turns with speakers numbered 0, 1, … in order of first speech; turns of
          different speakers may overlap.
        """
        opts = self._opts
        duration = len(audio) / SAMPLE_RATE
        pieces = _merge(speech, duration)
        if not pieces:
            return []
        short = sum(p.duration for p in pieces) < 2 * opts.min_speaker
        count = speakers or SpeakerCount()
        if count.at_most == 1 or (count.at_least == 1 and short):
            # A speaker needs min_speaker seconds of speech: this little is one voice, and
            # short prompts (most of a call-centre backlog) skip the embeddings. The VAD's
            # padding around so little speech is mostly false alarm: the segmentation model
            # (a few windows) keeps the turns to what it hears, given a window of context.
            regions = _widen(pieces, duration, min(opts.speech_margin, 0.0))
            if short and opts.short_onset > 0 and duration >= self._seg.window:
                regions = self._heard(audio, regions, duration)
            return [SpeakerTurn(0, r.start, r.end) for r in regions]
        stretches = _merge(pieces, duration, pad=opts.pad, gap=opts.join_gap)
        try:
            chunks = self._segment(audio, stretches)
            chunks.pauses = _edges(speech, duration)
            emb, owners, weights = self._embed(audio, chunks)
            self._assign(chunks, emb, owners, weights, sum(p.duration for p in pieces),
                         speakers)
            return self._turns(chunks, stretches,
                               _widen(pieces, duration, opts.speech_margin))
        finally:
            _trim_heap()

    def _heard(self, audio, regions: list[Region], duration: float) -> list[Region]:
        """The parts of the VAD's regions where the segmentation model's speech probability
        (anyone speaking; averaged over the windows of ``step`` that cover a frame) reaches
        ``short_onset``, each region judged with up to half a window of real audio either
        side; a region the model hears nothing of stays whole (a short prompt's only turn
        is never dropped)."""
        seg, opts = self._seg, self._opts
        width = seg.window_samples
        heard = cover = np.zeros(0, np.float32)
        try:
            for s in _merge(regions, duration, pad=seg.window / 2, gap=opts.join_gap):
                starts = _window_starts(s, seg.window, opts.step)
                batch = [_window(audio, start, s.end, width) for start in starts]
                prob = np.concatenate([seg.speech(batch[i:i + opts.batch_size])
                                       for i in range(0, len(batch), opts.batch_size)])
                frames = prob.shape[1]
                for start, p in zip(starts, prob):
                    o = int(round(start / seg.frame_step))
                    n = min(frames, max(0, int(np.ceil((s.end - start) / seg.frame_step))))
                    if len(heard) < o + n:
                        heard = np.pad(heard, (0, o + n - len(heard)))
                        cover = np.pad(cover, (0, o + n - len(cover)))
                    heard[o:o + n] += p[:n]
                    cover[o:o + n] += 1
        finally:
            _trim_heap()
        active = (cover > 0) & (heard >= opts.short_onset * np.maximum(cover, 1))
        shift = seg.frame_duration / 2 - seg.frame_step / 2
        turns = _to_turns(active[:, None], seg.frame_step, shift, opts.min_gap)
        out = []
        for r in regions:
            out += [Region(float(t.start), float(t.end)) for t in _clip(turns, [r])] or [r]
        return out

    # --- 1. segmentation ----------------------------------------------------------------------

    def _segment(self, audio, stretches: list[Region]) -> _Chunks:
        opts, seg = self._opts, self._seg
        width = seg.window_samples
        chunks = _Chunks()
        for index, s in enumerate(stretches):
            starts = _window_starts(s, seg.window, opts.step)
            for i, start in enumerate(starts):
                chunks.starts.append(start)
                chunks.stretch.append(index)
                chunks.offsets.append(int(round(start / seg.frame_step)))
                chunks.embedded.append(i % opts.embed_every == 0 or i == len(starts) - 1)
        parts: list[np.ndarray] = []
        talk: list[np.ndarray] = []
        overlap: list[np.ndarray] = []
        for b in range(0, len(chunks.starts), opts.batch_size):
            batch = []
            for c in range(b, min(b + opts.batch_size, len(chunks.starts))):
                batch.append(_window(audio, chunks.starts[c], stretches[chunks.stretch[c]].end,
                                     width))
            hard, prob, two = seg.soft(batch)
            parts.append(hard.astype(np.uint8))
            talk.append(np.round(prob * 255).astype(np.uint8))
            overlap.append(np.round(two * 255).astype(np.uint8))
            if len(parts) % _TRIM_EVERY == 0:
                _trim_heap()
        chunks.activity = np.concatenate(parts)
        chunks.talk = np.concatenate(talk)
        chunks.overlap = np.concatenate(overlap)
        # Frames past a stretch's end were zeros, not silence heard: nobody speaks there.
        for c, start in enumerate(chunks.starts):
            end = stretches[chunks.stretch[c]].end
            keep = int(np.ceil((end - start) / seg.frame_step))
            chunks.activity[c, max(0, keep):] = 0
            chunks.talk[c, max(0, keep):] = 0
            chunks.overlap[c, max(0, keep):] = 0
        chunks.labels = np.full(chunks.activity.shape[::2], -1, np.int64)
        return chunks

    # --- 2. embeddings ------------------------------------------------------------------------

    def _embed(self, audio, chunks: _Chunks) -> tuple[np.ndarray, list[tuple[int, int]],
                                                      np.ndarray]:
        """Embeddings of the local speakers of embedded windows, their (window, speaker), and
        the clean seconds behind each.

        A local speaker whose pieces (``piece`` s of clean speech each, in the part of the
        window nearest its centre) fall into groups of different voices gives one embedding
        per group instead, all with the same (window, speaker); ``chunks.parts`` records
        which frames each group covers.
        """
        opts, seg = self._opts, self._seg
        width = seg.window_samples
        most = int(round(opts.embed_max / FRAME_SHIFT))
        least = max(_LENGTHS[0], int(np.ceil(opts.embed_min / FRAME_SHIFT)))
        piece = int(round(opts.piece / FRAME_SHIFT))
        tracks: list[tuple[int, int, int]] = []  # (window, speaker, vector id)
        cuts: dict[tuple[int, int], list[tuple[int, int, int]]] = {}  # seg frames, vector id
        frames_of: dict[int, int] = {}
        vectors: dict[int, np.ndarray] = {}
        buckets: dict[int, list[tuple[int, np.ndarray]]] = {}
        to_seg: np.ndarray | None = None
        flushes = [0]

        def flush(length: int) -> None:
            items = buckets.pop(length, [])
            if items:
                blocks = [block for _, block in items]
                blocks += blocks[:1] * (opts.batch_size - len(blocks))  # full batches only
                out = self._embedder.embed_fbank(blocks)
                flushes[0] += 1
                if flushes[0] % _TRIM_EVERY == 0:
                    _trim_heap()
                for (index, _), vector in zip(items, out):
                    vectors[index] = vector

        def add(block: np.ndarray) -> int:
            index = len(frames_of)
            frames_of[index] = len(block)
            bucket = buckets.setdefault(len(block), [])
            bucket.append((index, block))
            if len(bucket) >= opts.batch_size:
                flush(len(block))
            return index

        spans = self._regions(chunks)
        for c, start in enumerate(chunks.starts):
            act = chunks.activity[c]
            if not chunks.embedded[c] or not act.any():
                continue
            first = int(round(start * SAMPLE_RATE))
            feats = self._embedder.fbank(audio[first:min(first + width, len(audio))])
            if to_seg is None or len(to_seg) < len(feats):
                # fbank frame m is centred at m * 10 ms + 12.5 ms; the segmentation frame
                # nearest that instant decides whether it is clean speech.
                m = np.arange(max(len(feats), int(seg.window / FRAME_SHIFT) + 1))
                centre = m * FRAME_SHIFT + 0.0125 - seg.frame_duration / 2
                to_seg = np.clip(np.round(centre / seg.frame_step).astype(int), 0,
                                 act.shape[0] - 1)
            clean = act[to_seg[:len(feats)]] * (act.sum(1) == 1)[to_seg[:len(feats)], None]
            mid = len(feats) / 2
            lo, hi = ((t - start) / FRAME_SHIFT for t in spans[c])
            for j in range(act.shape[1]):
                frames = np.flatnonzero(clean[:, j])
                if len(frames) < least:
                    continue
                near = frames[(frames >= lo) & (frames < hi)]
                parts = [near[i:i + piece] for i in range(0, len(near), piece)]
                if parts and len(parts[-1]) < piece:
                    rest = parts.pop()
                    keep = max([n for n in _PIECES if n <= len(rest)], default=0)
                    if keep:
                        parts.append(rest[:keep])
                if len(parts) >= 2:
                    cuts[(c, j)] = [(int(to_seg[p[0]]), int(to_seg[p[-1]]), add(feats[p]))
                                    for p in parts]
                keep = max([n for n in _LENGTHS if n <= min(most, len(frames))],
                           default=_LENGTHS[0])
                if keep < len(frames):
                    frames = np.sort(frames[np.argsort(np.abs(frames - mid), kind="stable")[:keep]])
                tracks.append((c, j, add(feats[frames])))
        for length in list(buckets):
            flush(length)
        return self._split(chunks, tracks, cuts, vectors, frames_of)

    def _regions(self, chunks: _Chunks) -> list[tuple[float, float]]:
        """The part of each embedded window nearer its centre than any other embedded
        window's of its stretch (to the stretch's ends for the first and last): together
        they cover every instant once."""
        half = self._seg.window / 2
        out = [(0.0, 0.0)] * len(chunks.starts)
        embedded = [c for c, e in enumerate(chunks.embedded) if e]
        for i, c in enumerate(embedded):
            centre = chunks.starts[c] + half
            prev = embedded[i - 1] if i and chunks.stretch[embedded[i - 1]] == chunks.stretch[c] \
                else None
            nxt = embedded[i + 1] if i + 1 < len(embedded) and \
                chunks.stretch[embedded[i + 1]] == chunks.stretch[c] else None
            lo = -np.inf if prev is None else (chunks.starts[prev] + half + centre) / 2
            hi = np.inf if nxt is None else (chunks.starts[nxt] + half + centre) / 2
            out[c] = (lo, hi)
        return out

    def _split(self, chunks: _Chunks, tracks: list[tuple[int, int, int]],
               cuts: dict[tuple[int, int], list[tuple[int, int, int]]],
               vectors: dict[int, np.ndarray], frames_of: dict[int, int]
               ) -> tuple[np.ndarray, list[tuple[int, int]], np.ndarray]:
        """One embedding per local speaker, or one per group of its pieces where they hold
        different voices."""
        opts = self._opts
        owners: list[tuple[int, int]] = []
        weights: list[float] = []
        rows: list[np.ndarray] = []
        chunks.parts = {}
        for c, j, index in tracks:
            found = cuts.get((c, j))
            if found:
                emb = np.stack([vectors[v] for _, _, v in found]).astype(np.float64)
                tree = linkage(emb, method="average", metric="cosine")
                group = fcluster(tree, t=1.0 - opts.change_similarity,
                                 criterion="distance") - 1
                if group.max() > 0:
                    items = []
                    for g in range(int(group.max()) + 1):
                        mine = np.flatnonzero(group == g)
                        items.append(len(owners))
                        owners.append((c, j))
                        rows.append(l2_centroids(emb[mine], np.zeros(len(mine), np.int64), 1)[0])
                        weights.append(sum(frames_of[found[m][2]] for m in mine) * FRAME_SHIFT)
                    edges = np.array([(a, b) for a, b, _ in found])
                    chunks.parts[(c, j)] = (edges, np.array(items)[group])
                    continue
            owners.append((c, j))
            rows.append(vectors[index])
            weights.append(frames_of[index] * FRAME_SHIFT)
        emb = np.stack(rows).astype(np.float32) if rows else \
            np.zeros((0, SpeakerEmbedder.dim), np.float32)
        return emb, owners, np.asarray(weights, dtype=np.float64)

    # --- 3./4. global speakers ----------------------------------------------------------------

    def _assign(self, chunks: _Chunks, emb: np.ndarray, owners: list[tuple[int, int]],
                weights: np.ndarray, speech: float,
                speakers: SpeakerCount | None = None) -> None:
        opts = self._opts
        if len(owners) == 0:
            # Nobody embeddable (all speech brief or overlapped): one speaker.
            chunks.labels[chunks.activity.any(axis=1)] = 0
            return
        train = np.flatnonzero(weights >= opts.cluster_min)
        if len(train) < 2:
            train = np.arange(len(owners))
        groups = np.array([c for c, _ in owners])
        tracks = np.array([j for _, j in owners])
        # Each embedding stands for its share of the file's speech (only some windows are
        # embedded, each from a capped sample), so small-cluster pruning sees seconds.
        seconds = weights * (speech / weights.sum())
        labels = cluster_embeddings(emb[train], seconds[train], opts, groups[train], speakers,
                                    tracks[train])
        cents = l2_centroids(emb[train], labels, int(labels.max()) + 1)
        sim = emb @ cents.T
        by_chunk: dict[int, list[int]] = {}
        for i, (c, _) in enumerate(owners):
            by_chunk.setdefault(c, []).append(i)
        label = np.full(len(owners), -1, np.int64)
        for c, members in by_chunk.items():
            whole = [i for i in members if owners[i] not in chunks.parts]
            rows, cols = linear_sum_assignment(-sim[whole]) if whole else ([], [])
            for r, k in zip(rows, cols):
                label[whole[r]] = k
            for r in set(range(len(whole))) - set(np.asarray(rows).tolist()):
                # More local speakers than global ones: the extra joins its nearest.
                label[whole[r]] = int(np.argmax(sim[whole[r]]))
            for i in members:
                if label[i] < 0:  # a group of pieces: not another local speaker's speaker
                    other = sim[i].copy()
                    other[[label[m] for m in whole if owners[m][1] != owners[i][1]]] = -np.inf
                    label[i] = int(np.argmax(other if np.isfinite(other).any() else sim[i]))
        for i, (c, j) in enumerate(owners):
            if (c, j) not in chunks.parts:
                chunks.labels[c, j] = label[i]
        for (c, j), (edges, rows_) in chunks.parts.items():
            active = np.flatnonzero(chunks.activity[c, :, j])
            # Each active frame takes the group of the nearest piece.
            dist = np.maximum(np.maximum(edges[None, :, 0] - active[:, None], 0),
                              active[:, None] - edges[None, :, 1])
            per_frame = np.full(chunks.activity.shape[1], -1, np.int64)
            per_frame[active] = label[rows_][np.argmin(dist, axis=1)]
            chunks.frame_labels[(c, j)] = per_frame
            chunks.labels[c, j] = int(np.bincount(per_frame[active]).argmax())
        self._propagate(chunks, len(cents))
        if opts.follow_regions:
            _follow_regions(chunks, self._regions(chunks), self._seg.frame_step)

    def _propagate(self, chunks: _Chunks, k: int) -> None:
        """Local speakers without an embedding take the global speaker they coincide with
        in the nearest embedded windows of the same stretch; where those change speaker
        within a local speaker, frame by frame."""
        embedded = [c for c, e in enumerate(chunks.embedded) if e]
        known = chunks.labels.copy()
        pos = 0
        frames = chunks.activity.shape[1]
        for c in range(len(chunks.starts)):
            while pos < len(embedded) and embedded[pos] < c:
                pos += 1
            act = chunks.activity[c]
            todo = [j for j in range(act.shape[1]) if known[c, j] < 0 and act[:, j].any()]
            if not todo:
                continue
            votes = np.zeros((len(todo), k))
            per_frame: np.ndarray | None = None
            near = {embedded[i] for i in (pos - 1, pos, pos + 1) if 0 <= i < len(embedded)}
            for e in near:
                if chunks.stretch[e] != chunks.stretch[c]:
                    continue
                shift = chunks.offsets[c] - chunks.offsets[e]
                lo, hi = max(0, shift), min(frames, frames + shift)  # frames of e shared
                if hi <= lo:
                    continue
                mine = act[lo - shift:hi - shift, todo].astype(np.float64)
                theirs = np.zeros((hi - lo, k))
                changes = False
                for j2 in range(act.shape[1]):
                    on = chunks.activity[e, lo:hi, j2].astype(np.float64)
                    if (e, j2) in chunks.frame_labels:
                        lab = chunks.frame_labels[(e, j2)][lo:hi]
                        theirs[np.flatnonzero(lab >= 0), lab[lab >= 0]] += on[lab >= 0]
                        changes = True
                    elif known[e, j2] >= 0:
                        theirs[:, known[e, j2]] += on
                votes += mine.T @ theirs  # (todo, k) frames active together
                if changes:
                    if per_frame is None:
                        per_frame = np.zeros((len(todo), frames, k))
                    per_frame[:, lo - shift:hi - shift] += mine.T[:, :, None] * theirs[None]
            taken = {int(known[c, j]) for j in range(act.shape[1]) if known[c, j] >= 0}
            for k2 in taken:
                votes[:, k2] = 0  # local speakers of one window stay distinct
            rows, cols = linear_sum_assignment(-votes)
            for r, k2 in zip(rows, cols):
                if votes[r, k2] > 0:
                    chunks.labels[c, todo[r]] = k2
                    if per_frame is not None:
                        self._follow(chunks, c, todo[r], per_frame[r], taken, k2)

    @staticmethod
    def _follow(chunks: _Chunks, c: int, j: int, votes: np.ndarray, taken: set[int],
                fallback: int) -> None:
        """Frame labels of local speaker ``j`` of window ``c`` from its frame votes."""
        votes = votes.copy()
        votes[:, sorted(taken)] = 0
        per_frame = np.where(votes.max(1) > 0, votes.argmax(1), fallback)
        active = chunks.activity[c, :, j] > 0
        per_frame[~active] = -1
        if np.any(per_frame[active] != fallback):
            chunks.frame_labels[(c, j)] = per_frame

    # --- 5. turns -----------------------------------------------------------------------------

    def _turns(self, chunks: _Chunks, stretches: list[Region],
               speech: list[Region] | None = None) -> list[SpeakerTurn]:
        seg, opts = self._seg, self._opts
        if not chunks.starts:
            return []
        # a speaker may hold only frames of local speakers whose voice changes
        k = max([int(chunks.labels.max())]
                + [int(f.max()) for f in chunks.frame_labels.values()]) + 1
        if k <= 0:
            return []
        frames = chunks.activity.shape[1]
        total = max(chunks.offsets) + frames
        votes = np.zeros((total, k), np.float32)
        soft = np.zeros((total, k), np.float32)  # the same votes from soft activity
        two = np.zeros(total, np.float32)
        talkers = np.zeros(total, np.float32)
        cover = np.zeros(total, np.float32)
        for c, o in enumerate(chunks.offsets):
            act = chunks.activity[c]
            end = stretches[chunks.stretch[c]].end
            n = min(frames, max(0, int(np.ceil((end - chunks.starts[c]) / seg.frame_step))))
            talkers[o:o + n] += act[:n].sum(1)
            cover[o:o + n] += 1
            two[o:o + n] += chunks.overlap[c, :n] / np.float32(255)
            talk = chunks.talk[c, :n] / np.float32(255)
            mine = np.zeros((n, k), np.float32)
            smine = np.zeros((n, k), np.float32)
            for j in range(act.shape[1]):
                if (c, j) in chunks.frame_labels:
                    lab = chunks.frame_labels[(c, j)][:n]
                    on = np.flatnonzero(lab >= 0)
                    mine[on, lab[on]] = np.maximum(mine[on, lab[on]], act[on, j])
                    smine[on, lab[on]] = np.maximum(smine[on, lab[on]], talk[on, j])
                elif chunks.labels[c, j] >= 0:
                    g = chunks.labels[c, j]
                    mine[:, g] = np.maximum(mine[:, g], act[:n, j])
                    smine[:, g] = np.maximum(smine[:, g], talk[:, j])
            votes[o:o + n] += mine
            soft[o:o + n] += smine
        count = np.floor(talkers / np.maximum(cover, 1) + 0.5).astype(np.int64)
        shift = seg.frame_duration / 2 - seg.frame_step / 2
        if speech is not None:  # only frames centred inside the VAD's (widened) speech
            keep = np.zeros(total, bool)
            for r in speech:
                lo = int(np.ceil((r.start - shift) / seg.frame_step))
                hi = int(np.floor((r.end - shift) / seg.frame_step)) + 1
                keep[max(0, lo):max(0, hi)] = True
            count[~keep] = 0
        # Where the windows' hard labels mostly hear one voice but the model's probability
        # of two at once, averaged over them, reaches overlap_onset, two talk: the argmax
        # hears an overlap only where the pair is the single most likely class.
        extra = (count == 1) & (two >= opts.overlap_onset * np.maximum(cover, 1)) \
            if opts.overlap_onset > 0 else np.zeros(total, bool)
        extra = _lasting(extra, int(np.ceil(opts.min_gap / seg.frame_step)))
        count[extra] = 2
        active = np.zeros((total, k), bool)
        for lo in range(0, total, 65536):  # bounded temporaries on long files
            v, n = votes[lo:lo + 65536], count[lo:lo + 65536]
            rank = np.argsort(np.argsort(-v, axis=1, kind="stable"), axis=1, kind="stable")
            active[lo:lo + 65536] = (rank < n[:, None]) & (v > 0)
        _second_voice(active, extra, soft)
        # A change of voice is known only to about a piece or a window step: where Silero
        # heard a pause that near it, the change goes there.
        _snap(active, np.round((chunks.pauses - shift) / seg.frame_step).astype(np.int64),
              int(round(opts.pause_reach / seg.frame_step)))
        turns = _to_turns(active, seg.frame_step, shift, opts.min_gap)
        return turns if speech is None else _clip(turns, speech)


def _window(audio, start: float, end: float, width: int) -> np.ndarray:
    """A model window's samples from ``start`` s: zeros past the stretch's ``end`` (or the
    audio's), so no window hears speech outside its stretch."""
    first = int(round(start * SAMPLE_RATE))
    last = min(first + width, int(round(end * SAMPLE_RATE)), len(audio))
    x = np.zeros(width, np.float32)
    x[:max(0, last - first)] = audio[first:last]
    return x


def _window_starts(stretch: Region, window: float, step: float) -> list[float]:
    """Starts of the windows over a stretch: every ``step`` s, the last one ending at the
    stretch's end; one window for a stretch shorter than a window."""
    starts = [stretch.start]
    if stretch.duration > window:
        n = int(np.floor((stretch.duration - window) / step + 1e-9)) + 1
        starts = [stretch.start + i * step for i in range(n)]
        if starts[-1] + window < stretch.end - 1e-6:
            starts.append(stretch.end - window)
    return starts


def _follow_regions(chunks: _Chunks, spans: list[tuple[float, float]],
                    frame_step: float) -> None:
    """Local speakers of windows without embeddings take, frame by frame, the speaker of the
    local speaker they coincide with in the embedded window whose region (``spans``: the
    part of each embedded window nearest its centre, s) holds the frame; in place.

    ``_propagate`` gives such a local speaker the speaker it shares most frames with in
    the nearest embedded windows, for the whole window: where the segmentation hears two
    alternating voices as one local speaker over several windows, windows embedded seconds
    away then outvote the embeddings made at that instant. Here each instant follows the
    embeddings made there; the local speakers of two windows are matched by the frames
    they are active together (one-to-one). Frames no embedded window's match covers keep
    the speaker ``_propagate`` gave.
    """
    embedded = [c for c, e in enumerate(chunks.embedded) if e]
    frames = chunks.activity.shape[1]
    first = np.array([chunks.offsets[e] for e in embedded])  # sorted, as the windows are

    def labels_of(e: int, j: int) -> np.ndarray:
        if (e, j) in chunks.frame_labels:
            return chunks.frame_labels[(e, j)]
        return np.full(frames, chunks.labels[e, j], np.int64)

    for c in range(len(chunks.starts)):
        if chunks.embedded[c]:
            continue
        act = chunks.activity[c]
        mine = {j: labels_of(c, j).copy() for j in range(act.shape[1])
                if act[:, j].any() and chunks.labels[c, j] >= 0}
        if not mine:
            continue
        o = chunks.offsets[c]
        at = (o + np.arange(frames) + 0.5) * frame_step  # frame centres, s
        near = slice(int(np.searchsorted(first, o - frames, side="right")),
                     int(np.searchsorted(first, o + frames, side="left")))
        for e in embedded[near]:  # the embedded windows that share frames with c
            if chunks.stretch[e] != chunks.stretch[c]:
                continue
            inside = (at >= spans[e][0]) & (at < spans[e][1])
            shift = o - chunks.offsets[e]
            lo, hi = max(0, shift), min(frames, frames + shift)  # frames of e shared
            if hi <= lo or not inside.any():
                continue
            together = act[lo - shift:hi - shift].T.astype(np.float64) \
                @ chunks.activity[e, lo:hi].astype(np.float64)
            for j, j2 in zip(*linear_sum_assignment(-together)):
                if j not in mine or together[j, j2] <= 0:
                    continue
                theirs = np.full(frames, -1, np.int64)
                theirs[lo - shift:hi - shift] = labels_of(e, int(j2))[lo:hi]
                take = inside & (theirs >= 0)
                mine[j][take] = theirs[take]
        for j, lab in mine.items():  # only embedded windows are read: safe to write now
            on = act[:, j] > 0
            lab[~on] = -1
            lab[on & (lab < 0)] = chunks.labels[c, j]  # no match there: as before
            heard = lab[on]
            if (heard < 0).any():
                continue
            chunks.labels[c, j] = int(np.bincount(heard).argmax())
            if np.all(heard == heard[0]):
                chunks.frame_labels.pop((c, j), None)
            else:  # int16: one per frame of most windows' local speakers on long files
                chunks.frame_labels[(c, j)] = lab.astype(np.int16)


def _clip(turns: list[SpeakerTurn], speech: list[Region]) -> list[SpeakerTurn]:
    """Turns cut to the speech regions (a bridged pause or a frame's width may reach past
    one); speakers keep their numbers, as the first speech of each stays inside."""
    spans = sorted((r.start, r.end) for r in speech)
    starts = np.array([a for a, _ in spans])
    out = []
    for t in turns:
        first = max(0, int(np.searchsorted(starts, t.start, side="right")) - 1)
        for a, b in spans[first:]:
            if a >= t.end:
                break
            lo, hi = max(a, t.start), min(b, t.end)
            if hi - lo > 1e-3:
                out.append(SpeakerTurn(t.speaker, round(lo, 4), round(hi, 4)))
    out.sort(key=lambda t: (t.start, t.speaker))
    return out


def _snap(active: np.ndarray, pauses: np.ndarray, reach: int) -> None:
    """Moves each direct change from one speaker to another to the nearest pause within
    ``reach`` frames, in place.

    ``active`` is (frames, speakers); ``pauses`` are frame boundaries (boundary ``t`` lies
    between frames ``t - 1`` and ``t``). Only frames of the two speakers of the change move;
    where another speaker, overlap or silence lies between, the change stays.
    """
    one = active.sum(1) == 1
    who = np.where(one, active.argmax(1), -1)
    at = np.flatnonzero(one[1:] & one[:-1] & (who[1:] != who[:-1])) + 1
    for t in at:
        i = int(np.searchsorted(pauses, t))
        near = pauses[max(0, i - 1):i + 1]
        if not len(near) or np.abs(near - t).min() > reach:
            continue
        e = int(near[np.argmin(np.abs(near - t))])
        a, b = who[t - 1], who[t]
        lo, hi = min(t, e), max(t, e)
        if lo < 1 or hi > len(who) or not np.all(np.isin(who[lo:hi], (a, b))):
            continue
        active[lo:hi] = False
        active[lo:hi, a if e > t else b] = True
        who[lo:hi] = a if e > t else b


def _runs(mask: np.ndarray) -> Iterator[tuple[int, int]]:
    """(first, past last) frame of each run of ``mask``'s true frames, in order."""
    edges = np.flatnonzero(np.diff(np.concatenate([[False], mask, [False]]).astype(np.int8)))
    return zip(edges[::2], edges[1::2])


def _lasting(mask: np.ndarray, frames: int) -> np.ndarray:
    """``mask`` without its runs shorter than ``frames``."""
    out = mask.copy()
    for a, b in _runs(mask):
        if b - a < frames:
            out[a:b] = False
    return out


def _second_voice(active: np.ndarray, extra: np.ndarray, soft: np.ndarray) -> None:
    """Frames ``extra`` (two talk) where ``active`` holds one speaker take as the second the
    speaker with the most ``soft`` votes besides the first (the windows' probabilities that
    its local speakers talk), if any has some; in place.

    Where the model's hard labels hear one voice, the second voice's local speaker was
    mostly not its single most likely class, so its hard votes are few or none; its soft
    probability still says who it is."""
    lone = np.flatnonzero(extra & (active.sum(1) == 1))
    if not len(lone):
        return
    other = np.where(active[lone], 0, soft[lone])
    best = other.argmax(1)
    ok = other[np.arange(len(lone)), best] > 0
    active[lone[ok], best[ok]] = True


def _edges(speech: list[Region], duration: float) -> np.ndarray:
    """The regions' starts and ends inside the audio, s, sorted."""
    out = [t for r in speech for t in (r.start, r.end) if 1e-6 < t < duration - 1e-6]
    return np.unique(np.asarray(out, dtype=np.float64))


def _widen(speech: list[Region], duration: float, margin: float) -> list[Region]:
    """Regions moved out by ``margin`` at each edge (in where negative), except at the audio's
    ends; a region too short to narrow stays as it is."""
    if not margin:
        return speech
    out = []
    for r in speech:
        start = r.start if r.start <= 1e-6 else max(0.0, r.start - margin)
        end = r.end if r.end >= duration - 1e-6 else min(duration, r.end + margin)
        out.append(Region(round(start, 4), round(end, 4)) if end - start > 0.1 else r)
    return out


def _trim_heap() -> None:
    """Hand freed heap back to the system: glibc keeps what the models' many short-lived
    buffers freed, and a worker's memory would only ever grow."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _to_turns(active: np.ndarray, step: float, shift: float, min_gap: float) -> list[SpeakerTurn]:
    """Runs of each speaker's active frames as turns, short pauses bridged, numbered in
    order of first speech."""
    spans: list[tuple[float, int, float]] = []
    for k in range(active.shape[1]):
        runs: list[list[float]] = []
        for a, b in _runs(active[:, k]):
            start, end = max(0.0, a * step + shift), b * step + shift
            if runs and start - runs[-1][1] < min_gap:
                runs[-1][1] = end
            else:
                runs.append([start, end])
        spans += [(s, k, e) for s, e in runs]
    spans.sort()
    order: dict[int, int] = {}
    for _, k, _ in spans:
        order.setdefault(k, len(order))
    return [SpeakerTurn(order[k], round(s, 4), round(e, 4)) for s, k, e in spans]
