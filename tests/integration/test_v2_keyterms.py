"""Key terms through the official ``assemblyai`` SDK: a name Whisper base mishears without
them ("Waldo's" heard as "while those") is written right with them, the options come back
on the transcript, and terms past the limits reach the SDK as its error."""

from __future__ import annotations

from collections.abc import Iterator

import assemblyai as aai
import httpx
import pytest

from ops.stack import EVAL, Stack

pytestmark = pytest.mark.stack

IVR = EVAL / "real" / "asterisk_16k" / "basic-pbx-ivr-main.wav"  # 25 s, "Waldo's premier ..."


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.new_account()[1]


@pytest.fixture(scope="module")
def transcriber(stack: Stack, key: str) -> Iterator[aai.Transcriber]:
    yield aai.Transcriber(client=aai.Client(settings=aai.Settings(
        api_key=key, base_url=stack.url(""), http_timeout=60.0, polling_interval=1.0)))


def test_word_boost_writes_the_name_and_keyterms_come_back(stack: Stack,
                                                          transcriber: aai.Transcriber) -> None:
    with stack.no_uncaught_errors():  # an upload serves one transcript: the file each time
        plain = transcriber.transcribe(str(IVR))
        boosted = transcriber.transcribe(str(IVR), config=aai.TranscriptionConfig(
            word_boost=["Waldo's", "Super Awesome Company"], boost_param="high"))
        prompted = transcriber.transcribe(str(IVR), config=aai.TranscriptionConfig(
            keyterms_prompt=["Waldo's"]))
    for t in (plain, boosted, prompted):
        assert t.status == aai.TranscriptStatus.completed, t.error
    assert "Waldo's" not in plain.text, plain.text  # what the bench measures, in one item
    assert "Waldo's" in boosted.text and "Waldo's" in prompted.text, (boosted.text,
                                                                       prompted.text)
    assert boosted.config.word_boost == ["Waldo's", "Super Awesome Company"]
    assert boosted.config.boost_param == aai.WordBoost.high
    assert prompted.config.keyterms_prompt == ["Waldo's"]


def test_terms_past_the_limits_are_the_sdks_errors(stack: Stack, key: str,
                                                   transcriber: aai.Transcriber) -> None:
    refused = {
        "keyterms_prompt": aai.TranscriptionConfig(keyterms_prompt=["term"] * 101),
        "word_boost": aai.TranscriptionConfig(word_boost=["a"], keyterms_prompt=["b"]),
    }
    for name, config in refused.items():
        with pytest.raises(aai.types.TranscriptError) as error:
            transcriber.submit("https://a.example/x.wav", config=config)
        assert error.value.status_code == 400 and name in str(error.value), str(error.value)
    # boost_param alone: the SDK leaves it out, so sent bare
    resp = httpx.post(stack.url("/v2/transcript"), headers={"Authorization": key},
                      json={"audio_url": "https://a.example/x.wav", "boost_param": "high"})
    assert resp.status_code == 400 and "boost_param needs word_boost" in resp.json()["error"]
