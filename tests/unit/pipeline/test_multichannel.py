"""Multichannel jobs without a stack: real audio split into channels, the stages on
in-memory ports (each channel's files, chunks and words), the result with the channel as
speaker, and the ledger counting a job's duration once per channel, never twice."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from memory_ports import T0, Harness
from pipeline.accounts import AccountState, apply, billed_seconds
from pipeline.audio import audio_channels, decode_channels_to_pcm, decode_to_pcm
from pipeline.diarization import assemble_channels
from pipeline.engines import Engines
from pipeline.stages import chunk, decode, diarize, finalize, transcribe
from pipeline.types import Region, TimedWord
from schemas.errors import JobErrorCode, JobFailed
from schemas.records import (AccountLimits, Admission, ChunkPlan, Dispatch, DurationKnown,
                             Finished, JobOutcome, Submitted, Transcribed, TranscriptResult)
from schemas.rows import TranscriptRow
from topologies.objects import JobFiles, upload_key

FILES = JobFiles("tr_1")
VOICE = Path(__file__).resolve().parents[3].parent / "shared" / "eval" / "real" / \
    "pocketsphinx" / "goforward.wav"


# --- decoding ---------------------------------------------------------------------------------

def test_each_channel_is_decoded_to_its_own_file(tmp_path: Path) -> None:
    voice, rate = sf.read(VOICE, dtype="float32")
    stereo = tmp_path / "stereo.wav"
    # the voice on the left; on the right the same voice, inverted and a second later
    right = np.zeros_like(voice)
    right[rate:] = -voice[:-rate]
    sf.write(stereo, np.stack([voice, right], axis=1), rate, subtype="PCM_16")
    assert audio_channels(stereo) == 2
    dsts = [io.BytesIO(), io.BytesIO()]
    duration = decode_channels_to_pcm(stereo, dsts)
    mixed = io.BytesIO()
    assert duration == decode_to_pcm(stereo, mixed) == pytest.approx(len(voice) / rate, abs=1e-3)
    left, right_out = (np.frombuffer(d.getvalue(), "<i2").astype(np.float32) / 32768
                       for d in dsts)
    assert len(left) == len(right_out) == len(mixed.getvalue()) // 2
    # each file is its own channel: the left is the voice, the right its inverted echo
    n = len(voice) - rate
    assert np.corrcoef(left[:n], voice[:n])[0, 1] > 0.98  # the DC filter aside
    assert np.corrcoef(right_out[rate:], voice[:n])[0, 1] < -0.98
    assert np.abs(right_out[:rate // 2]).max() < 1e-3


def test_a_mono_file_is_one_channel(tmp_path: Path) -> None:
    assert audio_channels(VOICE) == 1
    dst = io.BytesIO()
    decode_channels_to_pcm(VOICE, [dst])
    mono = io.BytesIO()
    decode_to_pcm(VOICE, mono)
    assert dst.getvalue() == mono.getvalue()


def test_a_file_without_audio_is_invalid(tmp_path: Path) -> None:
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"not audio at all" * 10)
    with pytest.raises(JobFailed) as err:
        audio_channels(junk)
    assert err.value.code == JobErrorCode.invalid_audio


# --- stages -----------------------------------------------------------------------------------

RECORD = Dispatch(account_id="acct", transcript_id="tr_1", started_at=T0)


async def test_decode_writes_a_file_a_channel_and_reports_their_number(tmp_path: Path) -> None:
    h = Harness.for_node("decode", tmp_path)
    await h.job(file_id="file_1", multichannel=True)
    await h.objects.put_bytes(upload_key("file_1"), b"RIFF")
    await decode.run(h.ports, RECORD)
    assert await h.objects.get_bytes(FILES.channel_audio(1)) == b"RIFF\x01"
    assert await h.objects.get_bytes(FILES.channel_audio(2)) == b"RIFF\x02"
    assert not await h.objects.exists(FILES.audio)
    [event] = h.sink.of("account-events")
    assert event == DurationKnown(account_id="acct", transcript_id="tr_1", duration=2.5,
                                  channels=2)
    # a replay reports the same without decoding again
    await h.objects.delete(upload_key("file_1"))
    await decode.run(h.ports, RECORD)
    assert h.models.calls["decode_channels"] == 1 and h.models.calls["decode"] == 0
    assert h.sink.of("account-events") == [event, event]


async def test_decode_refuses_more_channels_than_the_limit(tmp_path: Path) -> None:
    h = Harness.for_node("decode", tmp_path)
    await h.job(file_id="file_1", multichannel=True)
    await h.objects.put_bytes(upload_key("file_1"), b"RIFF")
    h.models.audio_channels = decode.MAX_CHANNELS + 1
    with pytest.raises(JobFailed) as err:
        await decode.run(h.ports, RECORD)
    assert err.value.code == JobErrorCode.invalid_audio
    assert f"{decode.MAX_CHANNELS + 1} channels" in err.value.message
    assert f"at most {decode.MAX_CHANNELS}" in err.value.message
    assert h.models.calls["decode_channels"] == 0 and h.sink.records == []


async def test_chunk_transcribe_diarize_keep_each_channel_apart(tmp_path: Path) -> None:
    admitted = Admission(account_id="acct", transcript_id="tr_1", admitted=True, duration=2.5,
                         channels=2)
    h = Harness.for_node("chunk", tmp_path)
    await h.job(multichannel=True)
    for n in (1, 2):
        await h.objects.put_bytes(FILES.channel_audio(n), bytes([n]) * 100)
    await chunk.run(h.ports, admitted)
    [plan] = h.sink.of("chunks")
    assert isinstance(plan, ChunkPlan) and plan.channels == 2
    assert [(c.start, c.end, c.channel) for c in plan.chunks] == [(0.1, 2.4, 1), (0.1, 2.4, 2)]
    for n in (1, 2):
        speech = Engines.load_regions(await h.objects.get_bytes(FILES.channel_speech(n)))
        assert speech == [Region(0.1, 1.0), Region(1.2, 2.4)]
    assert not await h.objects.exists(FILES.speech)
    # a replay reads the stored chunks back, channels included
    await chunk.run(h.ports, admitted)
    assert h.models.calls["speech"] == 2 and h.sink.of("chunks") == [plan, plan]

    h = Harness.for_node("transcribe", tmp_path)
    read: list[bytes] = []
    real = h.models.transcribe

    async def heard(pcm: Path, chunks: list[Region], hotwords: str | None = None,
                    ) -> list[TimedWord]:
        read.append(pcm.read_bytes()[:1])
        return await real(pcm, chunks)
    h.models.transcribe = heard  # type: ignore[method-assign]
    await transcribe.run(h.ports, plan)
    assert sorted(read) == [b"\x01", b"\x02"], "each channel's chunks read from its own audio"
    words = Engines.load_words(await h.objects.get_bytes(FILES.words))
    assert sorted((w.text, w.channel) for w in words) == [
        ("hello", 1), ("hello", 2), ("world", 1), ("world", 2)]
    [done] = h.sink.of("transcribed")
    assert done == Transcribed(account_id="acct", transcript_id="tr_1", duration=2.5,
                               result_key=FILES.words, channels=2)

    h = Harness.for_node("diarize", tmp_path)
    await diarize.run(h.ports, done)
    assert h.models.calls["diarize"] == 0 and h.models.calls["channel_result"] == 1
    speech, given = h.models.channel_inputs
    assert set(speech) == {1, 2} and given == words
    stored = TranscriptResult.model_validate_json(await h.objects.get_bytes(FILES.result))
    assert stored.audio_channels == 2
    [outcome] = h.sink.of("outcomes")
    assert outcome == JobOutcome(account_id="acct", transcript_id="tr_1", status="completed",
                                 duration=2.5, result_key=FILES.result, channels=2)


async def test_a_silent_channel_still_counts(tmp_path: Path) -> None:
    """A channel without speech has no chunks; the job still has (and bills) both."""
    plan = ChunkPlan(account_id="acct", transcript_id="tr_1", duration=2.5, chunks=[],
                     channels=2)
    h = Harness.for_node("transcribe", tmp_path)
    await h.job(multichannel=True)
    await transcribe.run(h.ports, plan)
    [done] = h.sink.of("transcribed")
    assert done.channels == 2 and h.models.calls["transcribe"] == 0


async def test_finalize_counts_each_channel_in_the_usage_event(tmp_path: Path) -> None:
    h = Harness.for_node("finalize", tmp_path)
    row = await h.job(multichannel=True)
    await h.objects.put_bytes(FILES.result, TranscriptResult(audio_channels=3).model_dump_json()
                              .encode())
    outcome = JobOutcome(account_id="acct", transcript_id="tr_1", status="completed",
                         duration=2.5, result_key=FILES.result, channels=3)
    await finalize.run(h.ports, outcome)
    [event] = h.transcripts.usage.values()
    assert event.audio_seconds == 7.5
    [finished] = h.sink.of("account-events")
    assert finished.channels == 3 and finished.duration == 2.5
    assert finalize.usage_event(row, outcome.model_copy(update={"channels": None}),
                                datetime.now(UTC)).audio_seconds == 2.5


# --- the ledger -------------------------------------------------------------------------------

def test_the_ledger_reserves_and_counts_each_channel_once() -> None:
    limits = AccountLimits(usage_limit_seconds=100, max_concurrent_jobs=2)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    state = AccountState()
    for tid in ("t0", "t1"):
        state, _ = apply(state, Submitted(account_id="a", transcript_id=tid, at=now,
                                          limits=limits), now)
    state, fx = apply(state, DurationKnown(account_id="a", transcript_id="t0", duration=30,
                                           channels=2), now)
    assert fx.admissions[0].admitted and fx.admissions[0].channels == 2
    assert state.reserved == 60
    # 30 s on 2 channels does not fit in the 40 s left
    state, fx = apply(state, DurationKnown(account_id="a", transcript_id="t1", duration=30,
                                           channels=2), now)
    assert not fx.admissions[0].admitted
    assert "on 2 channels (60.0 s of usage)" in fx.admissions[0].reason
    done = Finished(account_id="a", transcript_id="t0", status="completed", duration=30,
                    channels=2)
    state, fx = apply(state, done, now)
    assert state.used == 60 and fx.usage_seconds == 60 and fx.settled[0].channels == 2
    state, fx = apply(state, done, now)
    assert state.used == 60 and fx.usage_seconds == 0, "a replay never counts twice"


def test_an_outcome_announced_again_without_channels_counts_the_ledgers_own() -> None:
    """finalize announces a recorded outcome from the transcript row, which keeps no channel
    count: the ledger counts the channels the job's DurationKnown gave."""
    limits = AccountLimits(usage_limit_seconds=100)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    state, _ = apply(AccountState(), Submitted(account_id="a", transcript_id="t0", at=now,
                                               limits=limits), now)
    state, _ = apply(state, DurationKnown(account_id="a", transcript_id="t0", duration=10,
                                          channels=4), now)
    row = TranscriptRow(id="t0", account_id="a", key_id="k", created_at=now,
                        status="completed", audio_duration=10)
    state, fx = apply(state, finalize.recorded(row), now)
    assert state.used == 40 and fx.usage_seconds == 40
    assert billed_seconds(10, None) == 10 and billed_seconds(10, 4) == 40


# --- the result -------------------------------------------------------------------------------

def test_the_speaker_is_the_channel_and_utterances_follow_each_channels_speech() -> None:
    words = [  # channel 2 speaks first; channel 1 answers over its last word
        TimedWord("hello", 0.0, 0.4, 0.9, channel=2),
        TimedWord("there", 0.5, 0.9, 0.8, channel=2),
        TimedWord("friend", 1.2, 1.6, 0.7, channel=2),
        TimedWord("yes", 1.1, 1.3, 0.6, channel=1),
        TimedWord("hi", 2.0, 2.2, 0.5, channel=1),
    ]
    speech = {1: [Region(1.0, 2.3)], 2: [Region(0.0, 1.7)], 3: []}
    result = assemble_channels(words, speech)
    assert [(w.text, w.speaker) for w in result.words] == [
        ("hello", "speaker_2"), ("there", "speaker_2"), ("yes", "speaker_1"),
        ("friend", "speaker_2"), ("hi", "speaker_1")]
    assert result.word_confidence == [0.9, 0.8, 0.6, 0.7, 0.5]
    assert [(u.speaker, u.text) for u in result.utterances] == [
        ("speaker_2", "hello there friend"), ("speaker_1", "yes hi")]
    assert [(s.id, s.speaking_time) for s in result.speakers] == [
        ("speaker_1", 1.3), ("speaker_2", 1.7)]
    assert assemble_channels([], speech) == TranscriptResult()
