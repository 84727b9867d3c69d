"""Whisper's punctuated, cased words to the batch form."""

from __future__ import annotations

import pytest

from pipeline.text import collapse_repeats, normalise_text, normalise_words
from pipeline.types import TimedWord


@pytest.mark.parametrize(("raw", "expected"), [
    (" Hello,", ["hello"]),
    (" don\u2019t.", ["don't"]),
    (" 'cause", ["cause"]),
    (" dogs'", ["dogs"]),
    (" well-known", ["well-known"]),
    (" -known", ["known"]),
    (" U.S.", ["us"]),
    (" Mr.", ["mr"]),
    (" 1,000,000.", ["1000000"]),
    (" 3.5", ["3.5"]),
    (" 10:30", ["10:30"]),
    (" $20.", ["$20"]),
    (" 50%", ["50%"]),
    (" 90s", ["90s"]),
    (" café", ["café"]),
    (' "Quote"', ["quote"]),
    (" and/or", ["and", "or"]),
    (" hello\u2014world", ["hello", "world"]),
    (" --", []),
    (" ...", []),
    (" ?", []),
])
def test_normalise_text(raw: str, expected: list[str]) -> None:
    assert normalise_text(raw) == expected


def test_normalise_words_keeps_times_and_drops_empties() -> None:
    words = [TimedWord(" And", 0.0, 0.5, 0.9), TimedWord(" -", 0.5, 0.6, 0.2),
             TimedWord(" so,", 0.6, 1.0, 0.8), TimedWord(" and/or", 1.0, 2.0, 0.7)]
    out = normalise_words(words)
    assert [w.text for w in out] == ["and", "so", "and", "or"]
    assert out[0] == TimedWord("and", 0.0, 0.5, 0.9)
    assert out[2].start == 1.0 and out[3].end == 2.0
    assert out[2].end == pytest.approx(1 + 3 / 5) and out[3].start == out[2].end


def test_collapse_repeats_cuts_loops_only() -> None:
    def words(text: str) -> list[TimedWord]:
        return [TimedWord(t, i, i + 1) for i, t in enumerate(text.split())]

    def texts(ws: list[TimedWord]) -> str:
        return " ".join(w.text for w in ws)

    assert texts(collapse_repeats(words("no no no"), 4)) == "no no no"
    loop = "hi " + "thank you " * 6 + "bye"
    assert texts(collapse_repeats(words(loop), 4)) == "hi thank you bye"
    assert texts(collapse_repeats(words("a " * 9), 4)) == "a"
    kept = collapse_repeats(words(loop), 4)
    assert kept[-1].start == 13  # the word after the loop keeps its own time
