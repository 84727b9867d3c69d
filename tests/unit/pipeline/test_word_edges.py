"""Word edges in pauses move to the sound (``pipeline.asr.word_edges``), on made-up signals."""

from __future__ import annotations

import numpy as np

from pipeline.asr.word_edges import snap_to_sound
from pipeline.types import SAMPLE_RATE, TimedWord


def _signal(loud: list[tuple[float, float]], seconds: float = 4.0) -> np.ndarray:
    """Noise at -60 dBFS with a 200 Hz tone at -12 dBFS over each (start, end)."""
    rng = np.random.default_rng(0)
    audio = rng.normal(0, 10 ** (-60 / 20), int(seconds * SAMPLE_RATE)).astype(np.float32)
    t = np.arange(audio.size) / SAMPLE_RATE
    for a, b in loud:
        on = (t >= a) & (t < b)
        audio[on] += 0.35 * np.sin(2 * np.pi * 200 * t[on]).astype(np.float32)
    return audio


def test_a_start_in_a_pause_moves_to_the_onset() -> None:
    audio = _signal([(0.2, 1.0), (2.0, 2.6)])
    words = [TimedWord("one", 10.2, 11.0), TimedWord("two", 11.3, 12.6)]  # "two" from 1.3
    out = snap_to_sound(words, audio, 10.0, SAMPLE_RATE)
    assert out[0] == words[0]
    assert abs(out[1].start - 11.97) <= 0.02 and out[1].end == 12.6


def test_an_end_in_a_pause_moves_back() -> None:
    audio = _signal([(0.2, 1.0), (2.0, 2.6)])
    out = snap_to_sound([TimedWord("one", 0.2, 1.8)], audio, 0.0, SAMPLE_RATE)
    assert abs(out[0].end - 1.03) <= 0.02 and out[0].start == 0.2


def test_short_gaps_quiet_words_and_flat_chunks_are_left_alone() -> None:
    audio = _signal([(0.2, 1.0), (1.05, 2.0)])
    short = [TimedWord("a", 1.0, 2.0)]  # a 50 ms gap at its start: part of the word
    assert snap_to_sound(short, audio, 0.0, SAMPLE_RATE) == short
    quiet = [TimedWord("b", 2.5, 3.5)]  # nothing loud inside: kept as the model said
    assert snap_to_sound(quiet, audio, 0.0, SAMPLE_RATE) == quiet
    flat = _signal([(0.0, 4.0)])  # no pause anywhere
    words = [TimedWord("c", 0.5, 1.5)]
    assert snap_to_sound(words, flat, 0.0, SAMPLE_RATE) == words
