"""Paths into the eval set and WER scoring, shared by the engine tests."""

from __future__ import annotations

import re
from pathlib import Path

import jiwer

from pipeline.types import TimedWord

__all__ = ["EVAL", "JFK", "SIGNAL", "words_of", "wer"]

EVAL = Path(__file__).parents[3].parent / "shared" / "eval"
"""``../shared/eval`` beside the repository."""
JFK = EVAL / "real" / "whisper" / "jfk.flac"
SIGNAL = EVAL / "bad" / "signal"

_PUNCT = re.compile(r"[^a-z0-9' ]+")


def words_of(text: str) -> str:
    """Lowercase, hyphens as spaces, other punctuation removed: the scoring form."""
    return " ".join(_PUNCT.sub(" ", text.lower().replace("-", " ")).split())


def wer(reference: str, words: list[TimedWord]) -> float:
    """Word error rate of recognised words against a reference text."""
    return jiwer.wer(words_of(reference), words_of(" ".join(w.text for w in words)) or "<empty>")
