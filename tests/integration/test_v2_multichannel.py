"""``/v2`` ``multichannel``: the official ``assemblyai`` SDK against the embedded stack.

A stereo call is built from two real voices of the eval set, one per channel, the second
starting before the first has finished: each channel comes back transcribed on its own,
each word on the channel its reference says, the channel as speaker, ``audio_channels``
2, and the job counts its duration once per channel in the usage. A mono file is one
channel; a file of nine channels ends in ``error`` with a message that names the limit;
``speaker_labels`` with ``multichannel`` is refused at create.
"""

from __future__ import annotations

from pathlib import Path

import assemblyai as aai
import jiwer
import numpy as np
import pytest
import soundfile as sf

from evaluation.text import normalized
from ops.stack import EVAL, Stack

pytestmark = pytest.mark.stack

FIRST = (EVAL / "real" / "pocketsphinx" / "librivox"
         / "sense_and_sensibility_01_austen_64kb-0870.wav")
FIRST_TEXT = ("and mister john dashwood had then leisure to consider how much there might be "
              "prudently in his power to do for them")  # 7.1 s, a man reading
SECOND = EVAL / "real" / "asterisk_16k" / "agent-incorrect.wav"
SECOND_TEXT = ("login incorrect please enter your agent number followed by the pound key")
# 5.2 s, a woman's telephone prompt
SECOND_AT = 6.0
"""Where the second voice starts: 1.1 s before the first one ends."""
MONO = EVAL / "real" / "pocketsphinx" / "goforward.wav"  # 2.8 s, "go forward ten meters"


def _stereo(path: Path) -> float:
    """Writes the two voices as a 16 kHz stereo WAV; returns its length in seconds."""
    first, rate = sf.read(FIRST, dtype="float32")
    second, rate2 = sf.read(SECOND, dtype="float32")
    assert rate == rate2 == 16000 and first.ndim == second.ndim == 1
    at = int(SECOND_AT * rate)
    out = np.zeros((max(len(first), at + len(second)) + rate // 2, 2), dtype=np.float32)
    out[:len(first), 0] = first
    out[at:at + len(second), 1] = second
    sf.write(path, out, rate, subtype="PCM_16")
    return len(out) / rate


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    _, key = stack.new_account()
    aai.settings.base_url = stack.url("")
    aai.settings.api_key = key
    aai.settings.polling_interval = 1.0
    aai.settings.http_timeout = 60.0
    return key


def _words(text: str) -> list[str]:
    return normalized(text).split()


def test_each_channel_is_transcribed_on_its_own(stack: Stack, key: str, tmp_path: Path) -> None:
    call = tmp_path / "call.wav"
    length = _stereo(call)
    config = aai.TranscriptionConfig(multichannel=True)
    with stack.no_uncaught_errors():
        transcript = aai.Transcriber().transcribe(str(call), config=config)
        mono = aai.Transcriber().transcribe(str(MONO), config=config)
    assert transcript.status == aai.TranscriptStatus.completed, transcript.error
    answer = transcript.json_response
    assert answer["audio_channels"] == 2 and answer["multichannel"] is True

    words = transcript.words
    assert words and {w.channel for w in words} == {"1", "2"}
    assert all(w.speaker == w.channel for w in words)
    heard = {c: " ".join(w.text for w in words if w.channel == c) for c in ("1", "2")}
    # each channel holds its own voice: close to its reference, and no word that only the
    # other voice says
    assert jiwer.wer(normalized(FIRST_TEXT), normalized(heard["1"])) < 0.25, heard["1"]
    assert jiwer.wer(normalized(SECOND_TEXT), normalized(heard["2"])) < 0.25, heard["2"]
    only_first = set(_words(FIRST_TEXT)) - set(_words(SECOND_TEXT))
    only_second = set(_words(SECOND_TEXT)) - set(_words(FIRST_TEXT))
    for w in words:
        said = set(_words(w.text))
        assert not said & (only_second if w.channel == "1" else only_first), (w.channel, w.text)
    # the second voice starts while the first still speaks: the words interleave in time
    ends_first = max(w.end for w in words if w.channel == "1")
    starts_second = min(w.start for w in words if w.channel == "2")
    assert SECOND_AT * 1000 - 500 <= starts_second < ends_first
    assert [w.start for w in words] == sorted(w.start for w in words)

    utterances = transcript.utterances
    assert utterances and {u.channel for u in utterances} == {"1", "2"}
    for u in utterances:
        assert u.speaker == u.channel and {w.channel for w in u.words} == {u.channel}
    assert sorted(w.start for u in utterances for w in u.words) == [w.start for w in words]

    assert mono.status == aai.TranscriptStatus.completed, mono.error
    assert mono.json_response["audio_channels"] == 1
    assert mono.words and {w.channel for w in mono.words} == {"1"}
    assert "forward" in mono.text

    with stack.client(key) as c:
        # /v1 keeps its shape: speakers are speaker_<channel>, the duration is the file's
        v1 = c.get(f"/v1/transcripts/{transcript.id}").json()
        assert v1["audio_duration"] == pytest.approx(length, abs=0.05)
        assert {s["id"] for s in v1["speakers"]} == {"speaker_1", "speaker_2"}
        assert "audio_channels" not in v1 and "channel" not in v1["words"][0]
        mono_s = c.get(f"/v1/transcripts/{mono.id}").json()["audio_duration"]
        # usage counts each channel's duration: 2 x the call, 1 x the mono file
        usage = c.get("/v1/usage", params={"days": 1}).json()
        totals = usage["totals"]["a5s-async-v1"]
        assert totals["completed"] == 2
        assert totals["audio_seconds"] == pytest.approx(2 * v1["audio_duration"] + mono_s,
                                                        abs=0.01)
        # the ledger counts the same, and holds nothing back once the jobs are done
        stack.wait_settled(c, 2 * v1["audio_duration"] + mono_s)


def test_too_many_channels_end_the_job_with_a_message(stack: Stack, key: str,
                                                      tmp_path: Path) -> None:
    voice, rate = sf.read(MONO, dtype="float32")
    many = tmp_path / "nine.wav"
    sf.write(many, np.repeat(voice[:, None], 9, axis=1), rate, subtype="PCM_16")
    with stack.no_uncaught_errors():
        transcript = aai.Transcriber().transcribe(
            str(many), config=aai.TranscriptionConfig(multichannel=True))
    assert transcript.status == aai.TranscriptStatus.error
    assert "9 channels" in transcript.error and "at most 8" in transcript.error


def test_speaker_labels_with_multichannel_is_refused(stack: Stack, key: str) -> None:
    with stack.client(key) as c:
        r = c.post("/v2/transcript", json={"audio_url": "https://example.com/a.wav",
                                           "multichannel": True, "speaker_labels": True},
                   headers={"Authorization": key})
    assert r.status_code == 400
    assert "speaker_labels with multichannel" in r.json()["error"]
