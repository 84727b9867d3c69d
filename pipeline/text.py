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

With ``formatted``, each word also keeps the form the recogniser wrote
(``TimedWord.formatted``): a word that splits keeps the piece of it that each part
came from ("and/", "or,"), and a dropped word that is only closing punctuation ("...")
stays on the word before it.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Iterable

from .types import TimedWord

__all__ = ["normalise_text", "normalise_words", "written_parts", "collapse_repeats"]

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


def normalise_words(words: Iterable[TimedWord], formatted: bool = False) -> list[TimedWord]:
    """Normalise recogniser words, keeping their times and probabilities.

    Args:
        words: words as the recogniser wrote them (any case, punctuated).
        formatted: keep the written form of each word beside the batch form (Whisper's
            words are cased and punctuated; a transducer's are not worth keeping).

    Returns:
        Words in batch form; empty ones dropped, and a word that held several
        (``"and/or"``) split with its span shared in proportion to length.
    """
    out: list[TimedWord] = []
    for word in words:
        parts = normalise_text(word.text)
        forms = written_parts(word.text, parts) if formatted else [None] * len(parts)
        if not parts:
            trailing = word.text.strip()
            if formatted and out and out[-1].formatted and trailing \
                    and all(c in _CLOSING for c in trailing):
                last = out[-1]
                out[-1] = dataclasses.replace(last, formatted=last.formatted + trailing)
            continue
        if len(parts) == 1:
            out.append(TimedWord(parts[0], word.start, word.end, word.probability,
                                 formatted=forms[0]))
            continue
        total = sum(len(p) for p in parts)
        start, span = word.start, word.end - word.start
        for part, form in zip(parts, forms):
            end = start + span * len(part) / total
            out.append(TimedWord(part, start, end, word.probability, formatted=form))
            start = end
    return out


_CLOSING = frozenset(".,!?;:\u2026\"')]\u201d\u2019")
"""Punctuation that closes the word before it when the recogniser writes it alone."""


def written_parts(raw: str, parts: list[str]) -> list[str]:
    """The written form of each batch-form part of one recogniser word.

    A word that stays one keeps its whole written form (``" Hello,"`` -> ``"Hello,"``);
    one that splits is cut where each later part begins (``" and/or,"`` -> ``"and/"``,
    ``"or,"``), so the pieces joined give the word back. Where a part cannot be found in
    the written form (a character that normalising changed), the parts keep their batch
    form.
    """
    text = raw.strip()
    if len(parts) <= 1:
        return [text] * len(parts)
    folded = text.translate(_APOSTROPHES).lower()
    if len(folded) != len(text):
        return list(parts)
    cuts, pos = [0], len(parts[0])
    for part in parts[1:]:
        at = folded.find(part, pos)
        if at < 0:
            return list(parts)
        cuts.append(at)
        pos = at + len(part)
    cuts.append(len(text))
    return [text[a:b] for a, b in zip(cuts, cuts[1:])]


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
