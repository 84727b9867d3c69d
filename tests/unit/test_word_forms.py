"""punctuate and format_text, word by word, and results stored before the written form."""

from __future__ import annotations

import pytest

from schemas.records import TranscriptResult
from schemas.word_forms import cased, word_form


@pytest.mark.parametrize(("punctuate", "format_text", "expected"), [
    (True, True, "U.S.,"), (True, False, "u.s.,"), (False, True, "US"), (False, False, "us"),
])
def test_the_four_forms_of_a_word(punctuate: bool, format_text: bool, expected: str) -> None:
    assert word_form("us", "U.S.,", punctuate, format_text) == expected


@pytest.mark.parametrize(("verbatim", "written", "expected"), [
    ("don't", "Don\u2019t.", "Don't"), ("hello", "Hello,", "Hello"), ("$20", "$20.", "$20"),
    ("1000", "1,000", "1000"), ("iphone", "iPhone", "iPhone"), ("or", "or,", "or"),
])
def test_cased_keeps_the_verbatim_letters(verbatim: str, written: str, expected: str) -> None:
    assert cased(verbatim, written) == expected


def test_a_word_without_a_written_form_is_verbatim_in_every_form() -> None:
    for p in (True, False):
        for f in (True, False):
            assert word_form("hello", None, p, f) == "hello"


def test_a_result_stored_before_the_written_form_reads_back_verbatim() -> None:
    old = ('{"text": "hello there", "speakers": [{"id": "speaker_1", "speaking_time": 1.0}], '
           '"utterances": [{"speaker": "speaker_1", "start": 0.0, "end": 1.0, '
           '"text": "hello there", "words": [{"text": "hello", "start": 0.0, "end": 0.4, '
           '"speaker": "speaker_1"}, {"text": "there", "start": 0.5, "end": 1.0, '
           '"speaker": "speaker_1"}]}], "words": [{"text": "hello", "start": 0.0, "end": 0.4, '
           '"speaker": "speaker_1"}, {"text": "there", "start": 0.5, "end": 1.0, '
           '"speaker": "speaker_1"}]}')
    result = TranscriptResult.model_validate_json(old)
    shown = result.in_form(True, True)
    assert shown.text == "hello there" and shown.utterances[0].text == "hello there"
    assert [w.text for w in shown.words] == ["hello", "there"]
