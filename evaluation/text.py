"""The WER text conventions: plain words, Whisper's English normaliser, and that normaliser
with numbers written apart joined (the coverage benchmark's)."""

from __future__ import annotations

import re

__all__ = ["plain_words", "normalized", "numbers_joined"]

_PUNCT = re.compile(r"[^a-z0-9' ]+")
_NORMALIZER = None


def plain_words(text: str) -> str:
    """Lowercase; hyphens as spaces; other punctuation removed (apostrophes kept)."""
    return " ".join(_PUNCT.sub(" ", text.lower().replace("-", " ")).split())


def normalized(text: str) -> str:
    """Whisper's ``EnglishTextNormalizer``: the WER convention of the Whisper paper.

    It spells contractions out, writes numbers as digits, standardises spellings
    and drops fillers, on both sides, so "twenty" and "20" or "I'm" and "I am"
    are one word. The model field notes measured with it.
    """
    global _NORMALIZER
    if _NORMALIZER is None:
        from whisper_normalizer.english import EnglishTextNormalizer
        _NORMALIZER = EnglishTextNormalizer()
    return " ".join(_NORMALIZER(text).split())


_APART = re.compile(r"\b\d+(?: \d+)+\b")
_NO_WORD = re.compile(r"(?<!\S)[^\w\s]+(?!\S)")


def numbers_joined(text: str) -> str:
    """:func:`normalized`, then a run of numbers written apart joined into one.

    Whisper's normaliser joins spoken digits ("five five" -> "55", "four five seven" ->
    "457") but keeps digits that are written apart apart ("5, 5" and "5 5" -> "5 5"), so a
    transcript that writes a spoken digit string as separate digits lost every word of it.
    Applied to reference and transcript alike, this makes the two forms one word; the
    number of digits still has to match. A token of punctuation alone is dropped: the
    normaliser leaves "." of an ellipsis ("Calling..." -> "calling ."), which counted as an
    inserted word.
    """
    joined = _APART.sub(lambda m: m.group(0).replace(" ", ""), normalized(text))
    return " ".join(_NO_WORD.sub(" ", joined).split())
