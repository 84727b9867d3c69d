"""Recogniser output to the batch transcript's word form.

The batch model returns verbatim, lowercase text without punctuation (spec
section 1), while Whisper writes cased, punctuated words (" Hello," or
" don't."). Normalising keeps what belongs to a word and drops the rest:

* letters and digits, lowercased;
* apostrophes inside a word ("don't", "o'clock"), as a straight quote;
* hyphens inside a word ("well-known", "twenty-one"): one word, as spoken;
* numbers as written: a decimal point or time colon between digits stays
  ("3.5", "10:30"), a thousands separator goes ("1,000" -> "1000"), and a
  currency sign before or a percent sign after digits stays ("$20", "50%")
  because it is said aloud;
* dotted abbreviations lose their dots ("U.S." -> "us").

Other characters separate words ("and/or" -> "and", "or"); a word left empty
(a lone dash, "...") is dropped, and a word that splits in two shares its time
span by length.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from .types import TimedWord

__all__ = ["normalise_text", "normalise_words", "collapse_repeats"]

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'",
                              "\u2010": "-", "\u2011": "-"})
_ABBREVIATION = re.compile(r"^(?:[^\W\d_]\.){2,}(?:[^\W\d_]\.?)?$")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?:\D|$))")
_TOKEN = re.compile(
    r"(?:[$£€¥](?=\d))?"                    # a currency sign before digits
    r"[^\W_]+"                              # letters and digits
    r"(?:(?:[-']|(?<=\d)[.:](?=\d))[^\W_]+)*"  # inner hyphens, apostrophes, "3.5", "10:30"
    r"(?:(?<=\d)%)?"                        # a percent sign after digits
)


def normalise_text(text: str) -> list[str]:
    """The batch-form words of one piece of recogniser text (usually one word).

    Returns:
        Zero or more lowercase words without punctuation.
    """
    text = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES).lower().strip()
    if _ABBREVIATION.match(text):
        return [text.replace(".", "")]
    return _TOKEN.findall(_THOUSANDS.sub("", text))


def normalise_words(words: Iterable[TimedWord]) -> list[TimedWord]:
    """Normalise recogniser words, keeping their times and probabilities.

    Args:
        words: words as the recogniser wrote them (any case, punctuated).

    Returns:
        Words in batch form; empty ones dropped, and a word that held several
        (``"and/or"``) split with its span shared in proportion to length.
    """
    out: list[TimedWord] = []
    for word in words:
        parts = normalise_text(word.text)
        if len(parts) == 1:
            out.append(TimedWord(parts[0], word.start, word.end, word.probability))
            continue
        total = sum(len(p) for p in parts)
        start, span = word.start, word.end - word.start
        for part in parts:
            end = start + span * len(part) / total
            out.append(TimedWord(part, start, end, word.probability))
            start = end
    return out


def collapse_repeats(words: list[TimedWord], max_repeats: int,
                     max_ngram: int = 6) -> list[TimedWord]:
    """Cut runaway repetition loops down to one copy.

    A decoder stuck in a loop writes the same word or phrase many times over
    ("thank you thank you ..."). A run of one phrase (up to ``max_ngram`` words)
    repeated more than ``max_repeats`` times in a row is kept once; shorter runs
    ("no no no") are left alone, since people do repeat themselves.
    """
    texts = [w.text for w in words]
    out: list[TimedWord] = []
    i = 0
    while i < len(words):
        size, count = _longest_loop(texts, i, max_repeats, max_ngram)
        if count:
            out.extend(words[i:i + size])
            i += size * count
        else:
            out.append(words[i])
            i += 1
    return out


def _longest_loop(texts: list[str], i: int, max_repeats: int, max_ngram: int) -> tuple[int, int]:
    """(phrase length, repeat count) of a loop starting at ``i``, or (1, 0) if none."""
    for size in range(1, max_ngram + 1):
        phrase = texts[i:i + size]
        if len(phrase) < size:
            break
        count = 1
        while texts[i + count * size:i + (count + 1) * size] == phrase:
            count += 1
        if count > max_repeats:
            return size, count
    return 1, 0
