"""PII detection over recognised words, on a labelled set written the ways the recogniser
writes speech (digits, number words, hyphen groups, split written addresses), and the
redacted audio."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import av
import numpy as np
import pytest

from pipeline.redaction import (AUDIO_PAD_S, POLICIES, PiiSpan, audio_regions, find_pii,
                                luhn_valid, redact_words, ssn_valid, write_redacted_audio)
from pipeline.text import normalise_words
from pipeline.types import SAMPLE_RATE, Region, TimedWord


def words_of(text: str) -> list[TimedWord]:
    """Recogniser words as Whisper writes them (0.3 s each, each its own probability),
    through batch normalisation: "john@example.com." becomes three words of one span."""
    raw = [TimedWord(w, i * 0.35, i * 0.35 + 0.3, round(0.9 + i * 0.0013, 4))
           for i, w in enumerate(text.split())]
    return normalise_words(raw)


# (recogniser text, the PII in it as (policy, the words it covers))
LABELLED: list[tuple[str, list[tuple[str, str]]]] = [
    ("my card number is 4111 1111 1111 1111 thanks",
     [("credit_card_number", "4111 1111 1111 1111")]),
    ("card four two four two four two four two four two four two four two four two",
     [("credit_card_number", "four two four two four two four two four two four two four two "
                             "four two")]),
    ("it is 4242-4242-4242-4242 ok", [("credit_card_number", "4242-4242-4242-4242")]),
    ("amex 3782 822463 10005 expires soon", [("credit_card_number", "3782 822463 10005")]),
    ("call me on 415 555 0132 tomorrow", [("phone_number", "415 555 0132")]),
    ("call me back on four one five five five five zero one three two",
     [("phone_number", "four one five five five five zero one three two")]),
    ("the number is 415-555-0132", [("phone_number", "415-555-0132")]),
    ("or 415.555.0132 at work", [("phone_number", "415.555.0132")]),
    ("pi is 3.14159 roughly", []),
    ("dial one eight hundred five five five one two one two",
     [("phone_number", "one eight hundred five five five one two one two")]),
    ("ring double five five one two three four later",
     [("phone_number", "double five five one two three four")]),
    ("you can reach me on plus forty four twenty seven nine four six zero one two three",
     [("phone_number", "plus forty four twenty seven nine four six zero one two three")]),
    ("reach me at macon4155550132 please", [("phone_number", "macon4155550132")]),
    ("my social is 123 45 6789", [("us_social_security_number", "123 45 6789")]),
    ("ssn one two three four five six seven eight nine done",
     [("us_social_security_number", "one two three four five six seven eight nine")]),
    ("email john at example dot com please", [("email_address", "john at example dot com")]),
    ("email me john@example.com.", [("email_address", "john@example.com.")]),
    ("write to jane.doe@mail.example.org today",
     [("email_address", "jane.doe@mail.example.org")]),
    ("it is jane dot doe at gmail dot co dot uk",
     [("email_address", "jane dot doe at gmail dot co dot uk")]),
    ("my email is john at www.example.com", [("email_address", "john at www.example.com")]),
    ("account number 7730 2291 8841", [("number_sequence", "7730 2291 8841")]),
    ("the code is four two four two", [("number_sequence", "four two four two")]),
    ("order 88123 shipped", [("number_sequence", "88123")]),
    # nothing to find
    ("in 2024 we had 3 cats and 12 dogs", []),
    ("it costs $20 or 50% of 3.5 at 10:30", []),
    ("one or two people at the dot com boom", []),
    ("meet me at home dot com is a website", []),
    ("i have twenty one apples and thirty pears", []),
    ("oh i see", []),
    ("card 4111 1111 1111 1112 was declined", [("number_sequence", "4111 1111 1111 1112")]),
    ("her number is 000 12 3456", [("number_sequence", "000 12 3456")]),
    ("the year nineteen ninety", []),
    ("ssn 123-45-6789 on file", [("us_social_security_number", "123-45-6789")]),
    ("call 555 0132 now", [("phone_number", "555 0132")]),
    ("the pin is 4 2 4 2", [("number_sequence", "4 2 4 2")]),
    ("my zip is 94110", [("number_sequence", "94110")]),
    ("the flight was 1,000 miles", []),
    ("room two oh five", []),
    ("i was born in nineteen eighty five", []),
    # a known miss, kept so the figures stay honest: a local part of two spoken words
    ("my email is john smith at yahoo dot com",
     [("email_address", "john smith at yahoo dot com")]),
]


def _spans_as_text(words: list[TimedWord], spans: list[PiiSpan]) -> set[tuple[str, int, int]]:
    return {(s.policy, s.first, s.last) for s in spans}


def _gold(words: list[TimedWord], text: str,
          labels: list[tuple[str, str]]) -> set[tuple[str, int, int]]:
    """The labels as word index spans of the normalised words."""
    out = set()
    for policy, covered in labels:
        start = text.index(covered)
        first_raw = len(text[:start].split())
        last_raw = first_raw + len(covered.split()) - 1
        raw_starts = [round(i * 0.35, 6) for i in range(len(text.split()))]
        idx = [i for i, w in enumerate(words)
               if raw_starts[first_raw] - 1e-9 <= w.start < raw_starts[last_raw] + 0.3 - 1e-9]
        out.add((policy, idx[0], idx[-1]))
    return out


def test_precision_and_recall_on_the_labelled_set() -> None:
    tp = fp = fn = 0
    misses = []
    for text, labels in LABELLED:
        words = words_of(text)
        found = _spans_as_text(words, find_pii(words, POLICIES))
        gold = _gold(words, text, labels)
        tp += len(found & gold)
        fp += len(found - gold)
        fn += len(gold - found)
        if found != gold:
            misses.append((text, sorted(found), sorted(gold)))
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    print(f"\nPII detection on {len(LABELLED)} labelled utterances ({tp + fn} items): "
          f"precision {precision:.3f}, recall {recall:.3f}; differing: {misses}")
    assert [text for text, _, _ in misses] == ["my email is john smith at yahoo dot com"]
    assert precision >= 0.9 and recall >= 0.9


@pytest.mark.parametrize("digits,valid", [("4111111111111111", True), ("4242424242424242", True),
                                          ("378282246310005", True), ("4111111111111112", False)])
def test_luhn(digits: str, valid: bool) -> None:
    assert luhn_valid(digits) is valid


def test_ssn_rules() -> None:
    assert ssn_valid("123456789")
    assert not any(ssn_valid(d) for d in ("000456789", "666456789", "923456789", "123006789",
                                          "123450000"))


def test_a_number_takes_the_first_asked_for_policy_it_matches() -> None:
    words = words_of("card 4111 1111 1111 1111 and 415 555 0132")
    assert [s.policy for s in find_pii(words, ["number_sequence"])] == ["number_sequence"] * 2
    assert [s.policy for s in find_pii(words, ["phone_number"])] == ["phone_number"]
    assert find_pii(words, ["email_address"]) == []


def test_every_text_field_of_a_redacted_word_is_substituted() -> None:
    words = words_of("card 4111 1111 1111 1111 and john at example dot com")
    spans = find_pii(words, POLICIES)
    hashed = redact_words(words, spans, "hash")
    assert " ".join(w.text for w in hashed) == \
        "card #### #### #### #### and #### ## ####### ### ###"
    named = redact_words(words, spans, "entity_name")
    assert {w.text for w in named[1:5]} == {"[CREDIT_CARD_NUMBER]"}
    assert {w.text for w in named[6:]} == {"[EMAIL_ADDRESS]"}
    assert [(w.start, w.end, w.probability) for w in named] == \
        [(w.start, w.end, w.probability) for w in words]


def test_audio_regions_are_padded_and_merged() -> None:
    words = [TimedWord("1234", 1.0, 1.4), TimedWord("5678", 1.45, 2.0), TimedWord("x", 3.0, 3.2)]
    spans = [PiiSpan("number_sequence", 0, 0), PiiSpan("number_sequence", 1, 1)]
    assert audio_regions(words, spans) == [Region(1.0 - AUDIO_PAD_S, 2.0 + AUDIO_PAD_S)]


def _decoded(data: bytes) -> np.ndarray:
    with av.open(io.BytesIO(data)) as container:
        return np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])


@pytest.mark.parametrize("fmt", ["wav", "mp3"])
def test_redacted_audio_silences_or_beeps_the_regions(tmp_path: Path, fmt: str) -> None:
    pcm = tmp_path / "a.pcm"
    t = np.arange(3 * SAMPLE_RATE) / SAMPLE_RATE
    pcm.write_bytes((np.sin(2 * np.pi * 300 * t) * 8000).astype("<i2").tobytes())
    for method in ("silence", "beep"):
        out = io.BytesIO()
        write_redacted_audio(pcm, [Region(1.0, 2.0)], out, method, fmt)  # type: ignore[arg-type]
        samples = _decoded(out.getvalue()).astype(np.float64)
        scale = 32768.0 if fmt == "wav" else 1.0
        inside = samples[int(1.1 * SAMPLE_RATE):int(1.9 * SAMPLE_RATE)] / scale
        outside = samples[int(0.1 * SAMPLE_RATE):int(0.9 * SAMPLE_RATE)] / scale
        assert len(samples) >= 3 * SAMPLE_RATE
        assert np.sqrt(np.mean(outside ** 2)) > 0.1
        if method == "silence":
            assert np.abs(inside).max() < 1e-3
        else:  # the beep's 1 kHz, not the speech's 300 Hz
            spectrum = np.abs(np.fft.rfft(inside))
            assert abs(np.argmax(spectrum) * SAMPLE_RATE / len(inside) - 1000) < 5
    if fmt == "wav":
        with wave.open(io.BytesIO(out.getvalue())) as wav:
            assert (wav.getframerate(), wav.getnchannels(), wav.getnframes()) == \
                (SAMPLE_RATE, 1, 3 * SAMPLE_RATE)


def test_a_multichannel_jobs_channels_are_read_each_on_its_own() -> None:
    """Channel 1 ends with digits and channel 2 starts with some: not one number."""
    one = [TimedWord(t, i, i + 0.5, 0.9, channel=1) for i, t in enumerate("call 415 555".split())]
    two = [TimedWord(t, i, i + 0.5, 0.8, channel=2)
           for i, t in enumerate("0132 ok and 415 555 0132".split())]
    assert find_pii(one + two, ["phone_number"]) == [PiiSpan("phone_number", 6, 8)]
