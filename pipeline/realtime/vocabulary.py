"""Custom vocabulary: bias Whisper toward the client's terms, then fix near misses.

Two mechanisms, both scaled by a term's strength (0-12, spec section 6):

* the terms go into Whisper's previous-text prompt (the ``hotwords`` trick of
  faster-whisper), strongest first, so the decoder prefers their spelling;
* after decoding, a word span that is a close spelling of a term (``Cuber Netties`` for
  ``Kubernetes``) is replaced by the term. The similarity needed falls as strength rises,
  so a strength-12 term is forced harder than a strength-2 term.

Strength 0 only restores the term's casing when it is recognised exactly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from difflib import SequenceMatcher

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["VocabularyTerm", "Vocabulary"]

_WORD = re.compile(r"[A-Za-z0-9']+")


class VocabularyTerm(BaseModel):
    """One ``custom_vocabulary`` entry of the streaming ``start`` message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(min_length=1, max_length=100)
    strength: int = Field(6, ge=0, le=12)


def _key(words: Sequence[str]) -> str:
    return "".join(w.lower().replace("'", "") for w in words)


class Vocabulary:
    """A session's terms, prepared once when the session opens.

    Args:
        terms: up to 64 terms (the spec limit; more are ignored, weakest first).
        max_terms: how many terms are kept.
    """

    def __init__(self, terms: Sequence[VocabularyTerm] = (), max_terms: int = 64) -> None:
        ordered = sorted(terms, key=lambda t: -t.strength)[:max_terms]
        self.terms: tuple[VocabularyTerm, ...] = tuple(ordered)
        self._entries = [(t, _WORD.findall(t.text)) for t in ordered]
        self._entries = [(t, w, _key(w)) for t, w in self._entries if w]

    def __bool__(self) -> bool:
        return bool(self.terms)

    @property
    def prompt_text(self) -> str:
        """Terms for the decoder prompt, strongest first ('' when none is boosted).

        Written as a cased sentence: Whisper copies the style of its previous text, and a
        bare lowercase list makes it drop casing and punctuation.
        """
        text = ", ".join(t.text for t in self.terms if t.strength > 0)
        return f"{text[0].upper()}{text[1:]}." if text else ""

    @staticmethod
    def threshold(strength: int) -> float:
        """Spelling similarity (difflib ratio, 0-1) a span needs to become the term."""
        return 0.95 - 0.025 * strength

    def correct(self, text: str) -> str:
        """Replace near-miss spellings of the terms in ``text`` by the terms.

        Punctuation around a replaced span is kept; each word is replaced at most once.
        """
        if not self._entries or not text:
            return text
        words = list(_WORD.finditer(text))
        candidates: list[tuple[float, int, int, str]] = []
        for term, term_words, term_key in self._entries:
            fuzzy = term.strength > 0 and len(term_key) >= 4
            need = self.threshold(term.strength)
            n = len(term_words)
            for k in {max(1, n - 1), n, n + 1} if fuzzy else {n}:
                for i in range(len(words) - k + 1):
                    span = [m.group() for m in words[i:i + k]]
                    key = _key(span)
                    if key == term_key:
                        score = 2.0  # exact (maybe differently cased): always wins
                    elif not fuzzy or abs(len(key) - len(term_key)) > len(term_key) // 2:
                        continue
                    else:
                        score = SequenceMatcher(None, key, term_key).ratio()
                        if score < need:
                            continue
                    candidates.append((score, i, i + k, term.text))
        taken = [False] * len(words)
        chosen: list[tuple[int, int, str]] = []
        for score, i, j, replacement in sorted(candidates, key=lambda c: -c[0]):
            if any(taken[i:j]):
                continue
            taken[i:j] = [True] * (j - i)
            chosen.append((i, j, replacement))
        out = text
        for i, j, replacement in sorted(chosen, reverse=True):
            out = out[:words[i].start()] + replacement + out[words[j - 1].end():]
        return out
