"""PII redaction of recognised words, and of the audio under them.

The recogniser writes numbers as digits or as words, and an e-mail address as spoken
("john at example dot com") or as written, which batch normalisation splits into its
parts ("john@example.com" -> ``john`` ``example`` ``com``, one span shared by length, one
probability). So detection runs over the word sequence, not over a text:

* **numbers**: a run of consecutive number words and digit groups ("four one one one",
  "4111", "415-555-0132", "415.555.0132", "twenty one", "eight hundred", "double five";
  ``oh`` is a zero inside a run; a word of letters with at least 4 digits counts as its
  digits) is read as one digit string, and classified whole:

  - ``credit_card_number``: 13 to 19 digits passing the Luhn check (also a token-aligned
    part of a longer run);
  - ``us_social_security_number``: 9 digits with a valid area, group and serial (area
    not 000, 666 or 9xx; group not 00; serial not 0000);
  - ``phone_number``: 10 digits, 11 starting with 1, 7 digits, or 8 to 15 after "plus";
  - ``number_sequence``: any other run of at least 5 digits, or of 4 said one by one
    (not "2024" or "nineteen ninety": a year).

  A run takes the first of these that matches and that the job asked for, so a card
  number is still hidden when only ``number_sequence`` is asked for.
* **e-mail addresses**: a top-level domain word (``com``, ``org``, ...) after a domain
  word, joined to it by "dot" or by being split from one written word, after "at" (or a
  split "@") and a local part (words joined by "dot", "underscore", "dash" or a split).

A redacted word keeps its times; each text field of it is replaced (``hash``: as many
``#`` as it has characters; ``entity_name``: ``[POLICY_NAME]``), so every text form a word
carries is redacted alike. The audio under the redacted words is silenced or beeped.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import wave
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, TypeVar, get_args

import numpy as np

from schemas.records import PiiPolicy

from .audio import PCM_DTYPE
from .types import SAMPLE_RATE, Region, TimedWord

__all__ = ["POLICIES", "PiiSpan", "find_pii", "redact_words", "substitute", "luhn_valid",
           "ssn_valid", "audio_regions", "write_redacted_audio", "AUDIO_PAD_S", "BEEP_HZ"]

POLICIES: tuple[str, ...] = get_args(PiiPolicy)
AUDIO_PAD_S = 0.08
"""Audio silenced or beeped either side of a redacted word: word edges are estimates."""
BEEP_HZ = 1000.0
_BEEP_LEVEL = 0.2
_BLOCK = 1 << 20
"""Samples rendered at once, so a long file is never held whole."""

_UNITS = {"zero": 0, "oh": 0, "o": 0, "nought": 0, "one": 1, "two": 2, "three": 3,
          "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
_TEENS = {"ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
          "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19}
_TENS = {"twenty": 2, "thirty": 3, "forty": 4, "fifty": 5, "sixty": 6, "seventy": 7,
         "eighty": 8, "ninety": 9}
_REPEAT = {"double": 2, "triple": 3}
_MIXED_DIGITS = 4
"""A word of letters and digits counts as its digits when it has this many: the recogniser
runs a number into the word before it ("back on 415..." -> "macon4155550132")."""
_DIGIT_GROUPS = re.compile(r"\d+(?:[-.]\d+)*")
"""Digits as written: "4111", "415-555-0132", "415.555.0132"."""
_RUN_JOINERS = {"dash", "hyphen"}
_EMAIL_JOINERS = {"dot", "underscore", "dash", "hyphen"}
_NOT_NAMES = {"at", "dot", "the", "a", "an", "my", "your", "our", "their", "his", "her", "its",
              "this", "that", "me", "you", "him", "us", "them", "it", "is", "and", "or", "to",
              "of", "in", "on", "for", "with", "i", "we", "they", "he", "she"}
"""Words no e-mail local part or domain label is taken to be ("meet me at home dot com")."""
_TLDS = {"com", "org", "net", "edu", "gov", "io", "co", "uk", "us", "de", "fr", "ca", "au",
         "info", "biz", "me", "ai", "app", "dev", "mil", "int", "eu", "nl", "in"}


@dataclass(frozen=True, slots=True)
class PiiSpan:
    """Words ``first`` to ``last`` (inclusive) hold one item of ``policy``."""

    policy: str
    first: int
    last: int


# --- numbers ------------------------------------------------------------------------------------

def luhn_valid(digits: str) -> bool:
    """The Luhn check of a card number."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def ssn_valid(digits: str) -> bool:
    """Whether 9 digits can be a US social security number (SSA's rules since 2011)."""
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    return (len(digits) == 9 and area not in ("000", "666") and area[0] != "9"
            and group != "00" and serial != "0000")


@dataclass
class _Group:
    """The digits one word added to a run; ``open`` trailing zeros a later word may fill
    ("twenty" then "one": 21; "four hundred" then "fifteen": 415)."""

    index: int
    digits: str
    open: int = 0


def _read(word: str, run: list[_Group], index: int) -> bool:
    """Add one word to a number run; False when it is no number word."""
    last = run[-1] if run else None
    parts = word.split("-")
    if _DIGIT_GROUPS.fullmatch(word) and word.count(".") != 1:  # not a decimal, "3.14159"
        run.append(_Group(index, re.sub(r"\D", "", word)))
        return True
    digits = "".join(ch for ch in word if ch.isdigit())
    if len(digits) >= _MIXED_DIGITS and word.isalnum():  # "macon4155550132": words run together
        run.append(_Group(index, digits))
        return True
    if len(parts) == 2 and parts[0] in _TENS and parts[1] in _UNITS:  # "twenty-one"
        run.append(_Group(index, f"{_TENS[parts[0]]}{_UNITS[parts[1]]}"))
        return True
    if word in ("oh", "o") and not run:
        return False  # "oh" opening a run is an interjection, not a zero
    if word in _UNITS:
        if last is not None and last.open:  # "twenty" "one", "four hundred" "five"
            last.digits = last.digits[:-1] + str(_UNITS[word])
            last.open = 0
        else:
            run.append(_Group(index, str(_UNITS[word])))
        return True
    if word in _TEENS:
        if last is not None and last.open == 2:
            last.digits, last.open = last.digits[:-2] + str(_TEENS[word]), 0
        else:
            run.append(_Group(index, str(_TEENS[word])))
        return True
    if word in _TENS:
        if last is not None and last.open == 2:
            last.digits, last.open = last.digits[:-2] + f"{_TENS[word]}0", 1
        else:
            run.append(_Group(index, f"{_TENS[word]}0", open=1))
        return True
    if word == "hundred" and last is not None and len(last.digits) == 1 and not last.open:
        last.digits, last.open = last.digits + "00", 2
        return True
    return False


def _runs(texts: Sequence[str]) -> list[list[_Group]]:
    """Maximal runs of number words; "double"/"triple" repeat the next digit, and "dash"
    between two numbers does not end a run."""
    runs: list[list[_Group]] = []
    run: list[_Group] = []
    repeat = 1
    i = 0
    while i < len(texts):
        word = texts[i]
        if word in _REPEAT and i + 1 < len(texts) and texts[i + 1] in _UNITS:
            repeat, i = _REPEAT[word], i + 1
            continue
        before = len(run)
        if _read(texts[i], run, i):
            if repeat > 1 and len(run) > before:
                run[-1].digits *= repeat
            repeat = 1
            i += 1
            continue
        repeat = 1
        if word in _RUN_JOINERS and run and i + 1 < len(texts) and _read(texts[i + 1], [], 0):
            i += 1
            continue
        if run:
            runs.append(run)
            run = []
        i += 1
    if run:
        runs.append(run)
    return runs


def _classes(run: list[_Group], plus: bool) -> list[str]:
    """The policies a whole run matches, most specific first."""
    digits = "".join(g.digits for g in run)
    n = len(digits)
    out = []
    if 13 <= n <= 19 and luhn_valid(digits):
        out.append("credit_card_number")
    if n == 9 and ssn_valid(digits):
        out.append("us_social_security_number")
    if n in (7, 10) or (n == 11 and digits[0] == "1") or (plus and 8 <= n <= 15):
        out.append("phone_number")
    if n >= 5 or (n == 4 and all(len(g.digits) == 1 for g in run)):
        out.append("number_sequence")
    return out


def _card_inside(run: list[_Group]) -> tuple[int, int] | None:
    """The longest token-aligned part of a run that is a Luhn-valid card number."""
    best: tuple[int, int] | None = None
    for a in range(len(run)):
        digits = ""
        for b in range(a, len(run)):
            digits += run[b].digits
            if len(digits) > 19:
                break
            if 13 <= len(digits) and luhn_valid(digits) and (
                    best is None or b - a > best[1] - best[0]):
                best = (a, b)
    return best


def _number_spans(texts: Sequence[str], wanted: set[str]) -> list[PiiSpan]:
    spans: list[PiiSpan] = []
    for run in _runs(texts):
        first, last = _run_start(texts, run), run[-1].index
        plus = first > 0 and texts[first - 1] == "plus"
        policy = next((p for p in _classes(run, plus) if p in wanted), None)
        if policy is not None:
            if policy == "phone_number" and plus:
                first -= 1
            spans.append(PiiSpan(policy, first, last))
            continue
        if "credit_card_number" in wanted and (part := _card_inside(run)) is not None:
            spans.append(PiiSpan("credit_card_number", _run_start(texts, run[part[0]:]),
                                 run[part[1]].index))
    return spans


def _run_start(texts: Sequence[str], run: list[_Group]) -> int:
    """The first word of a run, reaching back over a "double"/"triple" before it."""
    first = run[0].index
    return first - 1 if first > 0 and texts[first - 1] in _REPEAT else first


# --- e-mail addresses ---------------------------------------------------------------------------

def _joined(words: Sequence[TimedWord], a: int, b: int) -> bool:
    """Words ``a`` and ``b`` are parts of one written word split by normalisation: they
    touch and share the written word's probability."""
    return (0 <= a < b < len(words) and words[a].end == words[b].start
            and words[a].probability == words[b].probability)


def _name(text: str) -> bool:
    return text.isalnum() and text not in _NOT_NAMES


def _label_start(words: Sequence[TimedWord], j: int) -> int:
    """Back from word ``j`` over "dot"/"underscore"/"dash" and split-word joints."""
    while True:
        if j >= 2 and words[j - 1].text in _EMAIL_JOINERS and _name(words[j - 2].text):
            j -= 2
        elif _joined(words, j - 1, j) and _name(words[j - 1].text):
            j -= 1
        else:
            return j


def _email_spans(words: Sequence[TimedWord]) -> list[PiiSpan]:
    spans: list[PiiSpan] = []
    for k, word in enumerate(words):
        if word.text not in _TLDS or k < 2:
            continue
        if words[k - 1].text == "dot" and _name(words[k - 2].text):
            domain = _label_start(words, k - 2)
        elif _joined(words, k - 1, k) and _name(words[k - 1].text):
            domain = _label_start(words, k - 1)
        else:
            continue
        if domain >= 2 and words[domain - 1].text == "at" and _name(words[domain - 2].text):
            spans.append(PiiSpan("email_address", _label_start(words, domain - 2), k))
        elif k - domain >= 2 and all(_joined(words, i, i + 1) for i in range(domain, k)):
            spans.append(PiiSpan("email_address", domain, k))  # written: "a@b.com", split
    return spans


# --- the whole ----------------------------------------------------------------------------------

def find_pii(words: Sequence[TimedWord], policies: Sequence[str]) -> list[PiiSpan]:
    """The PII items of ``policies`` among ``words``, in order, not overlapping (an e-mail
    address wins over a number inside it). A multichannel job's words come a channel after
    another: each channel's are read on their own."""
    spans: list[PiiSpan] = []
    start = 0
    for _, group in itertools.groupby(words, key=lambda w: w.channel):
        part = list(group)
        spans += [PiiSpan(s.policy, s.first + start, s.last + start)
                  for s in _find(part, set(policies))]
        start += len(part)
    return spans


def _find(words: Sequence[TimedWord], wanted: set[str]) -> list[PiiSpan]:
    found: list[PiiSpan] = []
    for span in _email_spans(words) if "email_address" in wanted else []:
        if found and span.first <= found[-1].last:  # "co dot uk": one address, two domains
            found[-1] = PiiSpan(span.policy, min(span.first, found[-1].first), span.last)
        else:
            found.append(span)
    taken = {i for s in found for i in range(s.first, s.last + 1)}
    for span in _number_spans([w.text for w in words], wanted):
        if not taken.intersection(range(span.first, span.last + 1)):
            found.append(span)
    return sorted(found, key=lambda s: s.first)


def substitute(text: str, policy: str, how: Literal["hash", "entity_name"]) -> str:
    """What a redacted text becomes, as AssemblyAI writes it."""
    return "#" * len(text) if how == "hash" else f"[{policy.upper()}]"


_W = TypeVar("_W")


def redact_words(words: Sequence[_W], spans: Sequence[PiiSpan],
                 how: Literal["hash", "entity_name"]) -> list[_W]:
    """``words`` with every text field of each word in ``spans`` substituted.

    Works on any dataclass word (``TimedWord`` and whatever text forms it gains): its
    ``str`` fields are the word's text forms.
    """
    out = list(words)
    for span in spans:
        for i in range(span.first, span.last + 1):
            word = out[i]
            update = {f.name: substitute(value, span.policy, how)
                      for f in dataclasses.fields(word)  # type: ignore[arg-type]
                      if isinstance(value := getattr(word, f.name), str) and value}
            out[i] = dataclasses.replace(word, **update)  # type: ignore[type-var]
    return out


def audio_regions(words: Sequence[TimedWord], spans: Sequence[PiiSpan],
                  pad: float = AUDIO_PAD_S) -> list[Region]:
    """The stretches of audio to hide: each span's words, padded, overlaps merged."""
    out: list[Region] = []
    for span in sorted(spans, key=lambda s: words[s.first].start):
        start = max(0.0, words[span.first].start - pad)
        end = words[span.last].end + pad
        if out and start <= out[-1].end:
            out[-1] = Region(out[-1].start, max(out[-1].end, end))
        else:
            out.append(Region(start, end))
    return out


def _redacted_blocks(pcm: Path, regions: Sequence[Region],
                     method: Literal["beep", "silence"]) -> Iterator[np.ndarray]:
    """The samples of ``pcm`` (s16le) in blocks, ``regions`` silenced or beeped."""
    if not pcm.stat().st_size:
        return
    samples = np.memmap(pcm, dtype=PCM_DTYPE, mode="r")
    bounds = [(max(0, round(r.start * SAMPLE_RATE)), round(r.end * SAMPLE_RATE))
              for r in regions]
    for at in range(0, len(samples), _BLOCK):
        block = np.array(samples[at:at + _BLOCK])
        for a, b in bounds:
            lo, hi = max(a, at) - at, min(b, at + len(block)) - at
            if lo >= hi:
                continue
            if method == "silence":
                block[lo:hi] = 0
            else:
                t = np.arange(at + lo, at + hi) / SAMPLE_RATE
                block[lo:hi] = np.rint(np.sin(2 * np.pi * BEEP_HZ * t) * _BEEP_LEVEL
                                       * 32767).astype(PCM_DTYPE)
        yield block


def write_redacted_audio(pcm: Path, regions: Sequence[Region], out: IO[bytes],
                         method: Literal["beep", "silence"] = "beep",
                         fmt: Literal["mp3", "wav"] = "mp3") -> None:
    """``pcm`` (16 kHz mono s16le) with ``regions`` silenced or beeped, as 16-bit WAV or
    MP3 (LAME's default bit rate), written to ``out`` a block at a time."""
    blocks = _redacted_blocks(pcm, regions, method)
    if fmt == "wav":
        with wave.open(out, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(PCM_DTYPE.itemsize)
            wav.setframerate(SAMPLE_RATE)
            wav.setnframes(pcm.stat().st_size // PCM_DTYPE.itemsize)
            for block in blocks:
                wav.writeframes(block.tobytes())
        return
    import av
    with av.open(out, "w", format="mp3") as container:
        stream = container.add_stream("libmp3lame", rate=SAMPLE_RATE, layout="mono")
        at = 0
        for block in blocks:
            frame = av.AudioFrame.from_ndarray(block.reshape(1, -1), format="s16",
                                               layout="mono")
            frame.sample_rate, frame.pts = SAMPLE_RATE, at
            at += len(block)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
