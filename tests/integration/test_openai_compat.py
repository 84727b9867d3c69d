"""``POST /v1/audio/transcriptions`` through the official ``openai`` package."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from openai import OpenAI

from ops.stack import EVAL, Stack

pytestmark = pytest.mark.stack

JFK = EVAL / "real" / "whisper" / "jfk.flac"
SHORT = EVAL / "real" / "pocketsphinx" / "goforward.wav"  # 2.8 s


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.new_account()[1]


@pytest.fixture(scope="module")
def oai(stack: Stack, key: str) -> OpenAI:
    return OpenAI(base_url=stack.url("/v1"), api_key=key, max_retries=0, timeout=300)


def test_json_and_usage(stack: Stack, key: str, oai: OpenAI) -> None:
    with open(JFK, "rb") as fh:
        result = oai.audio.transcriptions.create(model="whisper-1", file=fh)
    assert "ask not what your country can do for you" in result.text
    with stack.client(key) as c:  # the same pipeline and usage ledger as the batch API
        listed = c.get("/v1/transcripts", params={"status": "completed"}).json()["data"]
        assert len(listed) == 1 and listed[0]["audio_duration"] > 10
        usage = c.get("/v1/usage", params={"days": 1}).json()
        assert usage["totals"]["a5s-async-v1"]["completed"] == 1


def test_verbose_json_words_and_segments(oai: OpenAI) -> None:
    with open(JFK, "rb") as fh:
        result = oai.audio.transcriptions.create(
            model="a5s-async-v1", file=fh, response_format="verbose_json",
            timestamp_granularities=["word", "segment"], language="en")
    assert result.task == "transcribe" and result.language == "english"
    assert 10 < result.duration < 12
    assert result.words and result.words[0].word == "And" and result.words[0].start < 1.0
    assert result.segments and result.segments[0].start <= result.words[0].start
    assert result.segments[0].model_extra["speaker"] == "speaker_1"


def test_text_and_captions(oai: OpenAI) -> None:
    """Three short jobs at once (an account runs five at a time)."""
    def run(fmt: str) -> str:
        with open(SHORT, "rb") as fh:
            return oai.audio.transcriptions.create(  # type: ignore[call-overload]
                model="whisper-1", file=fh, response_format=fmt)
    with ThreadPoolExecutor(3) as pool:
        text, srt, vtt = pool.map(run, ("text", "srt", "vtt"))
    assert text.startswith("Go forward") and text.rstrip("\n.").endswith("meters")
    assert srt.startswith("1\n00:00:0") and "[speaker_1] Go forward" in srt
    assert vtt.startswith("WEBVTT\n\n00:00:0") and "[speaker_1] Go forward" in vtt


def test_errors(stack: Stack, key: str, oai: OpenAI) -> None:
    with open(JFK, "rb") as fh, pytest.raises(openai.BadRequestError) as err:
        oai.audio.transcriptions.create(model="gpt-4o-transcribe", file=fh)
    assert err.value.code == "unsupported_model" and err.value.param == "model"
    with open(JFK, "rb") as fh, pytest.raises(openai.BadRequestError) as err:
        oai.audio.transcriptions.create(model="whisper-1", file=fh, language="de")
    assert err.value.code == "unsupported_language" and err.value.param == "language"
    with pytest.raises(openai.BadRequestError) as err:
        oai.audio.transcriptions.create(model="whisper-1", file=("x.wav", b"garbage"))
    assert err.value.code == "invalid_audio"
    bad = OpenAI(base_url=stack.url("/v1"), api_key="a5s_sk_wrong", max_retries=0)
    with open(JFK, "rb") as fh, pytest.raises(openai.AuthenticationError):
        bad.audio.transcriptions.create(model="whisper-1", file=fh)
    resp = httpx.post(stack.url("/v1/audio/transcriptions"), data={"model": "whisper-1"},
                      headers={"Authorization": f"Bearer {key}"})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "file"
