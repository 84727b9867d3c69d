"""Key terms through the official ``assemblyai`` SDK: a name Whisper base mishears without
them ("Waldo's" heard as "while those") is written right with them, the options come back
on the transcript, and terms past the limits reach the SDK as its error."""

from __future__ import annotations

import assemblyai as aai
import httpx
import pytest

from ops.stack import EVAL, Stack

pytestmark = pytest.mark.stack

IVR = EVAL / "real" / "asterisk_16k" / "basic-pbx-ivr-main.wav"  # 25 s, "Waldo's premier ..."


def test_word_boost_writes_the_name_and_keyterms_come_back(
        stack: Stack, aai_transcriber: aai.Transcriber) -> None:
    transcriber = aai_transcriber
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


def test_terms_past_the_limits_are_the_sdks_errors(stack: Stack, aai_key: str,
                                                   aai_transcriber: aai.Transcriber) -> None:
    refused = {
        "keyterms_prompt": aai.TranscriptionConfig(keyterms_prompt=["term"] * 101),
        "word_boost": aai.TranscriptionConfig(word_boost=["a"], keyterms_prompt=["b"]),
    }
    for name, config in refused.items():
        with pytest.raises(aai.types.TranscriptError) as error:
            aai_transcriber.submit("https://a.example/x.wav", config=config)
        assert error.value.status_code == 400 and name in str(error.value), str(error.value)
    # boost_param alone: the SDK leaves it out, so sent bare
    resp = httpx.post(stack.url("/v2/transcript"), headers={"Authorization": aai_key},
                      json={"audio_url": "https://a.example/x.wav", "boost_param": "high"})
    assert resp.status_code == 400 and "boost_param needs word_boost" in resp.json()["error"]
