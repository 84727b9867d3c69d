"""Formatted text through the official SDKs: ``/v2`` and the OpenAI route answer punctuated,
cased words (as Whisper wrote them), ``/v2`` the verbatim form on request, and ``/v1`` stays
verbatim lowercase. One real recording (JFK, 11 s) transcribed once per form."""

from __future__ import annotations

import re

import assemblyai as aai
import pytest
from openai import OpenAI

from ops.stack import EVAL, Stack

pytestmark = pytest.mark.stack

JFK = EVAL / "real" / "whisper" / "jfk.flac"
_PUNCTUATION = re.compile(r"[.,!?;:]")


def _transcribe(transcriber: aai.Transcriber,
                config: aai.TranscriptionConfig) -> aai.Transcript:
    transcript = transcriber.transcribe(str(JFK), config=config)
    assert transcript.status == aai.TranscriptStatus.completed, transcript.error
    return transcript


def test_v2_punctuates_and_cases_by_default_and_v1_stays_verbatim(
        stack: Stack, aai_key: str, aai_transcriber: aai.Transcriber) -> None:
    with stack.no_uncaught_errors():
        t = _transcribe(aai_transcriber, aai.TranscriptionConfig(speaker_labels=True))
    assert t.config.punctuate is True and t.config.format_text is True
    assert "Americans" in t.text and _PUNCTUATION.search(t.text), t.text
    assert t.text[0].isupper() and t.text.rstrip()[-1] in ".!?", t.text
    assert t.utterances and t.utterances[0].text[0].isupper()
    assert " ".join(u.text for u in t.utterances) == t.text

    with stack.client(aai_key) as c:
        v1 = c.get(f"/v1/transcripts/{t.id}").json()
    assert v1["text"] == v1["text"].lower() and not _PUNCTUATION.search(v1["text"])
    assert "americans" in v1["text"]
    assert all(set(w) == {"text", "start", "end", "speaker"} for w in v1["words"])
    # the same words, times and count in both forms: only the text differs
    assert [(w.start, w.end) for w in t.words] == \
        [(round(w["start"] * 1000), round(w["end"] * 1000)) for w in v1["words"]]
    for shown, plain in zip(t.words, v1["words"]):
        assert re.sub(r"\W", "", shown.text).lower() == re.sub(r"\W", "", plain["text"]), \
            (shown.text, plain["text"])

    srt = t.export_subtitles_srt()
    assert "Americans" in srt and _PUNCTUATION.search(srt)
    with stack.client(aai_key) as c:
        v1_srt = c.get(f"/v1/transcripts/{t.id}/subtitles").text
    assert "americans" in v1_srt and "Americans" not in v1_srt


def test_v2_verbatim_and_the_two_switches_alone(stack: Stack, aai_key: str,
                                                aai_transcriber: aai.Transcriber) -> None:
    plain = _transcribe(aai_transcriber,
                        aai.TranscriptionConfig(punctuate=False, format_text=False))
    assert plain.config.punctuate is False and plain.config.format_text is False
    with stack.client(aai_key) as c:
        v1 = c.get(f"/v1/transcripts/{plain.id}").json()
    assert plain.text == v1["text"] and [w.text for w in plain.words] == \
        [w["text"] for w in v1["words"]]

    cased = _transcribe(aai_transcriber, aai.TranscriptionConfig(punctuate=False))
    assert "Americans" in cased.text and not _PUNCTUATION.search(cased.text), cased.text
    lower = _transcribe(aai_transcriber, aai.TranscriptionConfig(format_text=False))
    assert lower.text == lower.text.lower() and _PUNCTUATION.search(lower.text), lower.text
    assert cased.text.lower() == plain.text


def test_openai_route_answers_formatted(stack: Stack, aai_key: str) -> None:
    oai = OpenAI(base_url=stack.url("/v1"), api_key=aai_key, max_retries=0, timeout=300)
    with open(JFK, "rb") as fh:
        result = oai.audio.transcriptions.create(
            model="whisper-1", file=fh, response_format="verbose_json",
            timestamp_granularities=["word", "segment"])
    assert "Americans" in result.text and _PUNCTUATION.search(result.text), result.text
    assert result.words and result.words[0].word[0].isupper()
    assert " ".join(w.word for w in result.words) == result.text
    assert result.segments and result.segments[0].text[0].isupper()
