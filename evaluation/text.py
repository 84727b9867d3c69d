"""The two WER text conventions: plain words, and Whisper's English normaliser."""

from __future__ import annotations

import re

__all__ = ["plain_words", "normalized"]

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
