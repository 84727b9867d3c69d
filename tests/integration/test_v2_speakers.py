"""``/v2`` speaker options through the official ``assemblyai`` SDK against the embedded stack:
``speaker_options`` bounds respected on a real three-voice meeting and on one voice, a job
without ``speaker_labels`` never reaches the diarize stage, and the bad combinations are
AssemblyAI-like 400s."""

from __future__ import annotations

import time
from pathlib import Path

import assemblyai as aai
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ops.stack import EVAL, Stack

pytestmark = pytest.mark.stack

MEETING = EVAL / "synthetic" / "conv02_team_meeting.wav"  # 97 s, three voices
ONE_VOICE = EVAL / "real" / "asterisk_16k" / "priv-callee-options.wav"  # 31 s, one voice


def _stage_records(stack: Stack, stage: str) -> float:
    """Records the worker's stage has handled (``a5s_stage_duration_seconds_count``)."""
    text = httpx.get(stack.url("/metrics")).text
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples
               if s.name == "a5s_stage_duration_seconds_count" and s.labels["stage"] == stage)


def _await_idle(stack: Stack, timeout_s: float = 120) -> None:
    """Wait, for a while, until no batch job of an earlier test is queued or running (the
    session's stack is shared), so that the stage counters move for this test's job alone."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = httpx.get(stack.url("/metrics")).text
        busy = sum(s.value for family in text_string_to_metric_families(text)
                   for s in family.samples if s.name == "a5s_jobs_in_state")
        if busy == 0:
            return
        time.sleep(1)


def _letters(transcript: aai.Transcript) -> set[str]:
    return {u.speaker for u in transcript.utterances or []}


def test_without_speaker_labels_the_diarize_stage_does_not_run(
        stack: Stack, aai_key: str, aai_transcriber: aai.Transcriber) -> None:
    _await_idle(stack)
    diarized, transcribed = _stage_records(stack, "diarize"), _stage_records(stack, "transcribe")
    with stack.no_uncaught_errors():
        transcript = aai_transcriber.transcribe(str(ONE_VOICE))
    assert transcript.status == aai.TranscriptStatus.completed, transcript.error
    assert transcript.json_response["speaker_labels"] is False
    assert transcript.utterances is None and transcript.words
    assert {w.speaker for w in transcript.words} == {None}
    assert _stage_records(stack, "transcribe") == transcribed + 1
    assert _stage_records(stack, "diarize") == diarized  # no record reached it
    with stack.client(aai_key) as c:  # /v1 reads it as one speaker's transcript
        v1 = c.get(f"/v1/transcripts/{transcript.id}").json()
    assert [s["id"] for s in v1["speakers"]] == ["speaker_1"]
    assert {w["speaker"] for w in v1["words"]} == {"speaker_1"}
    assert " ".join(w["text"] for w in v1["words"]) == v1["text"]
    assert len(v1["words"]) == len(transcript.words)  # /v2 shows them formatted, /v1 verbatim


def test_speaker_options_bound_the_count(aai_transcriber: aai.Transcriber) -> None:
    """conv02 has three voices: at most two gives two, at least four gives four; one voice
    with room for three stays one."""
    transcriber = aai_transcriber

    def bounded(path: Path, **bounds: int) -> aai.Transcript:  # an upload serves one job
        config = aai.TranscriptionConfig(speaker_labels=True,
                                         speaker_options=aai.SpeakerOptions(**bounds))
        return transcriber.submit(transcriber.upload_file(str(path)), config=config)

    jobs = {"at most 2": bounded(MEETING, max_speakers_expected=2),
            "at least 4": bounded(MEETING, min_speakers_expected=4, max_speakers_expected=6),
            "one voice": bounded(ONE_VOICE, min_speakers_expected=1, max_speakers_expected=3)}
    done = {name: t.wait_for_completion() for name, t in jobs.items()}  # they run together
    for name, t in done.items():
        assert t.status == aai.TranscriptStatus.completed, (name, t.error)
    assert _letters(done["at most 2"]) == {"A", "B"}
    assert _letters(done["at least 4"]) == {"A", "B", "C", "D"}
    assert _letters(done["one voice"]) == {"A"}
    answered = done["at least 4"].json_response["speaker_options"]  # the server's answer
    assert (answered["min_speakers_expected"], answered["max_speakers_expected"]) == (4, 6)
    assert {w.speaker for w in done["at most 2"].words or []} == {"A", "B"}


def test_bad_speaker_options_are_400s(stack: Stack, aai_key: str,
                                      aai_transcriber: aai.Transcriber) -> None:
    transcriber = aai_transcriber
    url = transcriber.upload_file(str(ONE_VOICE))
    refused = {
        "needs speaker_labels": aai.TranscriptionConfig(
            speaker_options=aai.SpeakerOptions(max_speakers_expected=3)),
        "not both": aai.TranscriptionConfig(
            speaker_labels=True, speakers_expected=2,
            speaker_options=aai.SpeakerOptions(min_speakers_expected=2)),
        "less than or equal to 20": aai.TranscriptionConfig(
            speaker_labels=True, speaker_options=aai.SpeakerOptions(max_speakers_expected=30)),
        "one diarization method": aai.TranscriptionConfig(
            speaker_labels=True, speaker_options=aai.SpeakerOptions(
                max_speakers_expected=3, use_two_stage_clustering=True)),
    }
    for words, config in refused.items():
        with pytest.raises(aai.types.TranscriptError) as error:
            transcriber.submit(url, config=config)
        assert error.value.status_code == 400 and words in str(error.value), str(error.value)
    # what the SDK itself will not send: the same {"error": "..."} body
    for options, words in (({"min_speakers_expected": 3, "max_speakers_expected": 2},
                            "(3) is more than max_speakers_expected (2)"),
                           ({"min_speakers_expected": "two"}, "valid integer"),
                           ("2-4", "an object with min_speakers_expected")):
        resp = httpx.post(stack.url("/v2/transcript"), headers={"Authorization": aai_key}, json={
            "audio_url": url, "speaker_labels": True, "speaker_options": options})
        assert resp.status_code == 400 and words in resp.json()["error"], resp.text
