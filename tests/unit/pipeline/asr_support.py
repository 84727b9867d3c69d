"""Paths into the eval set and WER scoring, shared by the engine tests."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

import jiwer

from pipeline.types import TimedWord

__all__ = ["EVAL", "JFK", "SIGNAL", "words_of", "wer", "matched", "start_errors",
           "reference_words", "JFK_ASK_ONSET"]

EVAL = Path(__file__).parents[3].parent / "shared" / "eval"
"""``../shared/eval`` beside the repository."""
JFK = EVAL / "real" / "whisper" / "jfk.flac"
SIGNAL = EVAL / "bad" / "signal"

JFK_ASK_ONSET = 3.25
"""Where the first "ask" of jfk.flac starts, read from the signal: after a 1.1 s pause
(-41 dBFS) the level rises to -29 dBFS in the 10 ms frame at 3.25 s and -15 at 3.30 s."""

_PUNCT = re.compile(r"[^a-z0-9' ]+")


def words_of(text: str) -> str:
    """Lowercase, hyphens as spaces, other punctuation removed: the scoring form."""
    return " ".join(_PUNCT.sub(" ", text.lower().replace("-", " ")).split())


def wer(reference: str, words: list[TimedWord]) -> float:
    """Word error rate of recognised words against a reference text."""
    return jiwer.wer(words_of(reference), words_of(" ".join(w.text for w in words)) or "<empty>")


def matched(a: list[TimedWord], b: list[TimedWord]) -> list[tuple[TimedWord, TimedWord]]:
    """Pairs of the same word, in order, from two recognitions (or a reference)."""
    ta, tb = [words_of(w.text) for w in a], [words_of(w.text) for w in b]
    return [(a[i + k], b[j + k]) for i, j, n in
            difflib.SequenceMatcher(a=ta, b=tb, autojunk=False).get_matching_blocks()
            for k in range(n)]


def start_errors(a: list[TimedWord], b: list[TimedWord]) -> list[float]:
    """|start difference| of every matched word pair, seconds."""
    return [abs(x.start - y.start) for x, y in matched(a, b)]


def reference_words(name: str) -> list[TimedWord]:
    """The forced-alignment word times of a synthetic eval conversation."""
    doc = json.loads((EVAL / "synthetic" / f"{name}.json").read_text())
    return [TimedWord(w["word"], w["start"], w["end"]) for t in doc["turns"] for w in t["words"]]
