"""The written form of each word, kept beside the batch form."""

from __future__ import annotations

import pytest

from pipeline.diarization import assemble
from pipeline.text import normalise_words, written_parts
from pipeline.types import SpeakerTurn, TimedWord


@pytest.mark.parametrize(("raw", "parts", "expected"), [
    (" Hello,", ["hello"], ["Hello,"]),
    (" U.S.", ["us"], ["U.S."]),
    (" and/or,", ["and", "or"], ["and/", "or,"]),
    (" Hello\u2014World.", ["hello", "world"], ["Hello\u2014", "World."]),
    (" rock'n'roll/Jazz", ["rock'n'roll", "jazz"], ["rock'n'roll/", "Jazz"]),
    (" a/\uff22", ["a", "b"], ["a", "b"]),  # NFKC changed a letter: the batch form stays
])
def test_written_parts_join_back_to_the_word(raw: str, parts: list[str],
                                             expected: list[str]) -> None:
    assert written_parts(raw, parts) == expected


def test_normalise_words_keeps_the_written_form_only_when_asked() -> None:
    words = [TimedWord(" Well,", 0.0, 0.4), TimedWord(" I", 0.4, 0.5),
             TimedWord(" don\u2019t", 0.5, 0.9), TimedWord(" know", 0.9, 1.2),
             TimedWord(" ...", 1.2, 1.3), TimedWord(" -", 1.3, 1.4),
             TimedWord(" and/or", 1.4, 2.0)]
    kept = normalise_words(words, formatted=True)
    assert [w.text for w in kept] == ["well", "i", "don't", "know", "and", "or"]
    assert [w.formatted for w in kept] == ["Well,", "I", "don\u2019t", "know...", "and/",
                                           "or"]
    assert {w.formatted for w in normalise_words(words)} == {None}


def test_assembled_words_carry_both_forms_and_v1_sees_only_the_verbatim() -> None:
    words = normalise_words([TimedWord(" Hello,", 0.0, 0.5), TimedWord(" Mr.", 0.6, 0.8),
                             TimedWord(" Smith.", 0.8, 1.2)], formatted=True)
    result = assemble(words, [SpeakerTurn(0, 0.0, 1.2)])
    assert [w.text for w in result.words] == ["hello", "mr", "smith"]
    assert [w.text_formatted for w in result.words] == ["Hello,", "Mr.", "Smith."]
    assert result.text == "hello mr smith"
    public = result.public()
    assert all("text_formatted" not in w for w in public["words"])
    assert all("text_formatted" not in w for u in public["utterances"] for w in u["words"])
    assert result.in_form(True, True).text == "Hello, Mr. Smith."
    assert result.in_form(True, True).utterances[0].text == "Hello, Mr. Smith."
    # stored as JSON and read back, the written form survives
    back = type(result).model_validate_json(result.model_dump_json())
    assert back.words[2].text_formatted == "Smith."


def test_redaction_hides_the_written_form_too() -> None:
    from pipeline.redaction import find_pii, redact_words
    words = normalise_words([TimedWord(" Call", 0.0, 0.3), TimedWord(" 415-555-0132.", 0.3, 1.5)],
                            formatted=True)
    [span] = find_pii(words, ["phone_number"])
    redacted = redact_words(words, [span], "entity_name")
    assert redacted[0].formatted == "Call"
    assert "415" not in (redacted[1].formatted or "") and "415" not in redacted[1].text
