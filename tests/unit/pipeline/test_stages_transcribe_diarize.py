"""transcribe and diarize on in-memory ports: replays, cancels, and the object-key edges
(diarize reads the speech regions chunk stored and the words transcribe stored)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_ports import Harness
from pipeline.engines import Engines
from pipeline.stages import diarize, transcribe
from pipeline.types import Region, TimedWord
from schemas.errors import JobErrorCode, JobFailed
from schemas.records import (Chunk, ChunkPlan, JobOutcome, SpeakerCount, Transcribed,
                             TranscriptResult)
from topologies.objects import JobFiles

FILES = JobFiles("tr_1")
PLAN = ChunkPlan(account_id="acct", transcript_id="tr_1", duration=2.5,
                 chunks=[Chunk(start=0.1, end=2.4)])
DONE = Transcribed(account_id="acct", transcript_id="tr_1", duration=2.5,
                   result_key=FILES.words)


async def _chunked(h: Harness, speakers: int | None = None, **spec_fields: object) -> None:
    await h.job(speakers=speakers, **spec_fields)
    await h.objects.put_bytes(FILES.audio, b"\x00" * 100)
    await h.objects.put_bytes(FILES.speech, Engines.dump_regions([Region(0.1, 2.4)]))


async def test_transcribe_stores_words_and_points_at_them(tmp_path: Path) -> None:
    h = Harness.for_node("transcribe", tmp_path)
    await _chunked(h)
    await transcribe.run(h.ports, PLAN)
    words = Engines.load_words(await h.objects.get_bytes(FILES.words))
    assert [w.text for w in words] == ["hello", "world"]
    [record] = h.sink.of("transcribed")
    assert record == DONE


async def test_transcribe_replay_and_cancel(tmp_path: Path) -> None:
    h = Harness.for_node("transcribe", tmp_path)
    await _chunked(h)
    await transcribe.run(h.ports, PLAN)
    await transcribe.run(h.ports, PLAN)
    assert h.models.calls["transcribe"] == 1 and len(h.sink.of("transcribed")) == 2
    h.flags.canceled.add("tr_1")
    await transcribe.run(h.ports, PLAN)
    assert len(h.sink.records) == 2


async def test_transcribe_without_audio_fails_the_running_job(tmp_path: Path) -> None:
    h = Harness.for_node("transcribe", tmp_path)
    await h.job()
    with pytest.raises(JobFailed) as err:
        await transcribe.run(h.ports, PLAN)
    assert err.value.code == JobErrorCode.internal_error


async def test_diarize_assembles_the_result_from_what_earlier_stages_stored(
        tmp_path: Path) -> None:
    h = Harness.for_node("diarize", tmp_path)
    await _chunked(h, speakers=2)
    await h.objects.put_bytes(FILES.words, Engines.dump_words([TimedWord("hi", 0.1, 0.4)]))
    seen: list[tuple[object, ...]] = []
    real = h.models.diarize
    h.models.diarize = lambda pcm, speech, words, speakers: (  # type: ignore[method-assign]
        seen.append((speech, words, speakers)) or real(pcm, speech, words, speakers))
    await diarize.run(h.ports, DONE)
    assert seen == [([Region(0.1, 2.4)], [TimedWord("hi", 0.1, 0.4)], SpeakerCount.exactly(2))]
    stored = TranscriptResult.model_validate_json(await h.objects.get_bytes(FILES.result))
    assert stored.text == "hello world"
    [outcome] = h.sink.of("outcomes")
    assert outcome == JobOutcome(account_id="acct", transcript_id="tr_1", status="completed",
                                 duration=2.5, result_key=FILES.result)


async def test_diarize_passes_the_jobs_speaker_bounds(tmp_path: Path) -> None:
    h = Harness.for_node("diarize", tmp_path)
    await _chunked(h, min_speakers_expected=2, max_speakers_expected=5)
    await h.objects.put_bytes(FILES.words, Engines.dump_words([TimedWord("hi", 0.1, 0.4)]))
    seen: list[object] = []
    h.models.diarize = lambda pcm, speech, words, speakers: (  # type: ignore[method-assign]
        seen.append(speakers) or h.models.result)
    await diarize.run(h.ports, DONE)
    assert seen == [SpeakerCount(at_least=2, at_most=5)]


async def test_a_job_not_diarized_is_completed_by_transcribe(tmp_path: Path) -> None:
    """/v2 without speaker_labels: transcribe stores a one-speaker result and publishes the
    outcome itself; nothing reaches the diarize stage and no speaker model runs; a replay
    reuses the words."""
    h = Harness.for_node("transcribe", tmp_path)
    await _chunked(h, diarize=False)
    for _ in range(2):
        await transcribe.run(h.ports, PLAN)
    assert h.models.calls == {"transcribe": 1}
    assert h.sink.of("transcribed") == []
    outcome = JobOutcome(account_id="acct", transcript_id="tr_1", status="completed",
                         duration=2.5, result_key=FILES.result)
    assert h.sink.of("outcomes") == [outcome, outcome]
    stored = TranscriptResult.model_validate_json(await h.objects.get_bytes(FILES.result))
    assert stored.text == "hello world"
    assert {w.speaker for w in stored.words} == {"speaker_1"}
    assert [s.id for s in stored.speakers] == ["speaker_1"]
    assert [u.text for u in stored.utterances] == ["hello world"]


async def test_diarize_replay_reuses_the_result(tmp_path: Path) -> None:
    h = Harness.for_node("diarize", tmp_path)
    await _chunked(h)
    await h.objects.put_bytes(FILES.words, Engines.dump_words([]))
    await diarize.run(h.ports, DONE)
    await h.objects.delete(FILES.audio)
    await diarize.run(h.ports, DONE)
    assert h.models.calls["diarize"] == 1 and len(h.sink.of("outcomes")) == 2


async def test_diarize_without_the_speech_regions_fails_and_a_deleted_job_drops(
        tmp_path: Path) -> None:
    h = Harness.for_node("diarize", tmp_path)
    await h.job()
    await h.objects.put_bytes(FILES.audio, b"\x00" * 100)
    await h.objects.put_bytes(FILES.words, Engines.dump_words([]))
    with pytest.raises(JobFailed) as err:  # chunk's speech.json is missing
        await diarize.run(h.ports, DONE)
    assert err.value.code == JobErrorCode.internal_error
    await h.transcripts.change("tr_1", "deleted")
    await diarize.run(h.ports, DONE)
    assert h.sink.records == []
