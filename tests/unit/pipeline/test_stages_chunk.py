"""chunk on in-memory ports: refused jobs fail, replays reuse the stored plan, lost audio."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_ports import Harness
from pipeline.stages import chunk
from schemas.errors import JobErrorCode, JobFailed
from schemas.records import Admission, ChunkPlan
from topologies.objects import JobFiles

ADMITTED = Admission(account_id="acct", transcript_id="tr_1", admitted=True, duration=2.5)
REFUSED = ADMITTED.model_copy(update={"admitted": False, "reason": "Over the limit."})


def test_plan() -> None:
    assert chunk.plan_chunk(False, ADMITTED, planned=False) == "run"
    assert chunk.plan_chunk(False, ADMITTED, planned=True) == "reuse"
    assert chunk.plan_chunk(True, REFUSED, planned=False) == "drop"  # canceled wins
    with pytest.raises(JobFailed) as err:
        chunk.plan_chunk(False, REFUSED, planned=False)
    assert err.value.code == JobErrorCode.usage_limit_reached
    assert err.value.message == "Over the limit."


async def _decoded(h: Harness) -> None:
    await h.job()
    await h.objects.put_bytes(JobFiles("tr_1").audio, b"\x00" * 100)


async def test_speech_and_chunks_are_stored_and_the_plan_published(tmp_path: Path) -> None:
    h = Harness.for_node("chunk", tmp_path)
    await _decoded(h)
    await chunk.run(h.ports, ADMITTED)
    files = JobFiles("tr_1")
    assert files.speech in await h.keys() and files.chunks in await h.keys()
    [plan] = h.sink.of("chunks")
    assert isinstance(plan, ChunkPlan) and plan.duration == 2.5
    assert [(c.start, c.end) for c in plan.chunks] == [(0.1, 2.4)]


async def test_a_replay_reuses_the_stored_chunks(tmp_path: Path) -> None:
    h = Harness.for_node("chunk", tmp_path)
    await _decoded(h)
    await chunk.run(h.ports, ADMITTED)
    await h.objects.delete(JobFiles("tr_1").audio)
    await chunk.run(h.ports, ADMITTED)
    assert h.models.calls["speech"] == 1
    first, second = h.sink.of("chunks")
    assert first == second


async def test_refused_and_canceled_jobs(tmp_path: Path) -> None:
    h = Harness.for_node("chunk", tmp_path)
    await _decoded(h)
    with pytest.raises(JobFailed):
        await chunk.run(h.ports, REFUSED)
    h.flags.canceled.add("tr_1")
    await chunk.run(h.ports, ADMITTED)
    assert h.sink.records == [] and h.models.calls["speech"] == 0


async def test_lost_audio_fails_a_running_job_and_drops_a_stale_replay(tmp_path: Path) -> None:
    h = Harness.for_node("chunk", tmp_path)
    await h.job()  # no audio.pcm
    with pytest.raises(JobFailed) as err:
        await chunk.run(h.ports, ADMITTED)
    assert err.value.code == JobErrorCode.internal_error
    h.transcripts.rows["tr_1"] = h.transcripts.rows["tr_1"].model_copy(
        update={"status": "completed"})
    await chunk.run(h.ports, ADMITTED)  # the job has ended: nothing to do, nothing raised
    assert h.sink.records == []
