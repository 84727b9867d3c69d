"""The forms of a transcript word: verbatim, and as the recogniser wrote it.

The batch model's words are verbatim (lowercase, no punctuation: ``/v1``'s contract); where
the recogniser writes cased, punctuated words (Whisper), each word also keeps that written
form (``text_formatted``). AssemblyAI's two switches pick what a ``/v2`` or OpenAI client
sees, word by word:

=========  ===========  ==========================================  ================
punctuate  format_text  form                                        ``"U.S.,"``
=========  ===========  ==========================================  ================
true       true         as written (AssemblyAI's default)           ``U.S.,``
true       false        as written, lowercase                       ``u.s.,``
false      true         verbatim letters with the written casing    ``US``
false      false        verbatim                                    ``us``
=========  ===========  ==========================================  ================

A word without a written form (stored before it was kept, or from a recogniser that
writes none) shows its verbatim form whatever the switches.
"""

from __future__ import annotations

__all__ = ["word_form", "cased"]

_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})


def cased(verbatim: str, written: str) -> str:
    """``verbatim`` with each letter cased as it is in ``written`` (``"us"`` and ``"U.S."``
    give ``"US"``); letters not found in ``written`` keep their case."""
    folded = written.translate(_QUOTES).lower()
    out, j = [], 0
    for ch in verbatim:
        at = folded.find(ch, j)
        if at < 0:
            out.append(ch)
            continue
        out.append(written[at] if written[at].lower() == ch else ch)
        j = at + 1
    return "".join(out)


def word_form(text: str, formatted: str | None, punctuate: bool, format_text: bool) -> str:
    """The form of one word that the two switches ask for (see the module's table)."""
    if formatted is None or not formatted:
        return text
    if punctuate:
        return formatted if format_text else formatted.lower()
    return cased(text, formatted) if format_text else text
