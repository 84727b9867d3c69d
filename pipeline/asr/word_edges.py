"""Word edges that Whisper's alignment leaves inside a pause, moved to where the sound is.

Whisper's word times come from cross-attention and dynamic time warping over the
encoder frames. Inside a pause the warping path has no acoustic evidence, so the edge
of the word after (or before) the pause lands anywhere in it, and where it lands moves
with anything that changes the numerics slightly: the encoder window's length, batch
shapes, the CPU's instruction set. Measured on ``real/whisper/jfk.flac``, whose
"ask" follows a 1.1 s pause and starts at 3.25 s: 2.77 s with a window fitted to the
chunk, 3.17 s with the 30 s window, 3.29 s with a window 2 s shorter. Snapping such
edges to the signal makes every path report the time a listener hears.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..types import TimedWord

__all__ = ["snap_to_sound", "FRAME_S"]

FRAME_S = 0.01
"""Energy frames, seconds."""
MIN_PAUSE_S = 0.1
"""A quiet stretch at a word's edge shorter than this is part of the word (stops, breaths)."""
MARGIN_S = 0.03
"""Kept before the first and after the last loud frame: onsets rise below the threshold."""
LOUD_FRACTION = 0.3
"""Loud: above the chunk's noise floor by this fraction of its floor-to-speech range."""
MIN_RANGE_DB = 15.0
"""Below this floor-to-speech range the chunk has no clear pause; nothing moves."""


def loud_frames(audio: np.ndarray, sample_rate: int) -> np.ndarray | None:
    """Per 10 ms frame: louder than the pauses; ``None`` when the chunk has no clear pause."""
    hop = int(sample_rate * FRAME_S)
    n = audio.size // hop
    if n < 10:
        return None
    frames = audio[: n * hop].astype(np.float64).reshape(n, hop)
    db = 10 * np.log10(np.mean(frames * frames, axis=1) + 1e-12)
    floor, speech = np.percentile(db, 10), np.percentile(db, 95)
    if speech - floor < MIN_RANGE_DB:
        return None
    return db > floor + LOUD_FRACTION * (speech - floor)


def snap_to_sound(words: Sequence[TimedWord], audio: np.ndarray, offset: float,
                  sample_rate: int) -> list[TimedWord]:
    """``words`` (times from ``offset``, the chunk's start) with edges in pauses moved.

    A start in a quiet stretch of at least :data:`MIN_PAUSE_S` moves forward to the first
    loud frame inside the word; an end in one moves back to the last. A word with no
    loud frame (a whisper, a word the model heard in noise) keeps its times.
    """
    loud = loud_frames(audio, sample_rate)
    if loud is None:
        return list(words)
    out = []
    for w in words:
        a = max(0, int(round((w.start - offset) / FRAME_S)))
        b = min(loud.size, int(round((w.end - offset) / FRAME_S)))
        hits = np.flatnonzero(loud[a:b])
        start, end = w.start, w.end
        if hits.size:
            first, last = a + int(hits[0]), a + int(hits[-1]) + 1
            if (first - a) * FRAME_S >= MIN_PAUSE_S:
                start = round(max(w.start, offset + first * FRAME_S - MARGIN_S), 3)
            if (b - last) * FRAME_S >= MIN_PAUSE_S:
                end = round(min(w.end, offset + last * FRAME_S + MARGIN_S), 3)
        out.append(w if (start, end) == (w.start, w.end) else
                   TimedWord(w.text, start, max(start, end), w.probability))
    return out
