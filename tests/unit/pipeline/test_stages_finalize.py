"""finalize on in-memory ports: one usage event per job, replays re-announce, lost results."""

from __future__ import annotations

from pathlib import Path

from memory_ports import Harness
from pipeline.stages import finalize
from schemas.records import Finished, JobOutcome, TranscriptResult
from topologies.objects import JobFiles, upload_key

FILES = JobFiles("tr_1")
COMPLETED = JobOutcome(account_id="acct", transcript_id="tr_1", status="completed",
                       duration=2.5, result_key=FILES.result)
FAILED = JobOutcome(account_id="acct", transcript_id="tr_1", status="error",
                    error_code="invalid_audio", error_message="Not audio.")


async def test_plan(tmp_path: Path) -> None:
    h = Harness.for_node("finalize", tmp_path)
    row = await h.job()
    assert finalize.plan_finalize(None, COMPLETED).action == "cleanup"
    assert finalize.plan_finalize(row.model_copy(update={"deleted": 1}), COMPLETED).action \
        == "cleanup"
    assert finalize.plan_finalize(row.model_copy(update={"status": "error"}), COMPLETED) \
        .action == "announce"
    assert finalize.plan_finalize(row, COMPLETED) == finalize.FinalizeDecision("record", True)
    assert finalize.plan_finalize(row, FAILED) == finalize.FinalizeDecision("record", False)


async def test_a_completed_outcome_saves_the_result_and_counts_its_audio(tmp_path: Path) -> None:
    h = Harness.for_node("finalize", tmp_path)
    await h.job()
    await h.objects.put_bytes(FILES.result, TranscriptResult(text="hi").model_dump_json().encode())
    await finalize.run(h.ports, COMPLETED)
    assert h.transcripts.results["tr_1"].text == "hi"
    usage = h.transcripts.usage["tr_1:finished"]
    assert usage.kind == "completed" and usage.audio_seconds == 2.5
    [event] = h.sink.of("account-events")
    assert isinstance(event, Finished) and event.status == "completed" and event.duration == 2.5
    assert h.transcripts.rows["tr_1"].status == "processing"  # visible only once settled


async def test_a_failed_outcome_counts_no_audio(tmp_path: Path) -> None:
    h = Harness.for_node("finalize", tmp_path)
    await h.job()
    await finalize.run(h.ports, FAILED)
    usage = h.transcripts.usage["tr_1:finished"]
    assert usage.kind == "failed" and usage.audio_seconds == 0.0
    assert h.transcripts.results == {}
    [event] = h.sink.of("account-events")
    assert event.status == "error" and event.error_code == "invalid_audio"


async def test_a_lost_result_ends_the_job_with_internal_error(tmp_path: Path) -> None:
    h = Harness.for_node("finalize", tmp_path)
    await h.job()
    await finalize.run(h.ports, COMPLETED)  # result.json was never stored
    [event] = h.sink.of("account-events")
    assert event.status == "error" and event.error_code == "internal_error"
    assert event.duration is None
    assert h.transcripts.usage["tr_1:finished"].kind == "failed"


async def test_a_replay_after_settling_announces_the_recorded_outcome_without_usage(
        tmp_path: Path) -> None:
    h = Harness.for_node("finalize", tmp_path)
    row = await h.job()
    h.transcripts.rows["tr_1"] = row.model_copy(update={"status": "completed",
                                                        "audio_duration": 2.5})
    await finalize.run(h.ports, FAILED)  # a late "failed" beside the recorded "completed"
    assert h.transcripts.usage_writes == 0
    [event] = h.sink.of("account-events")
    assert event.status == "completed" and event.duration == 2.5


async def test_a_deleted_transcript_is_cleaned_up_and_not_counted(tmp_path: Path) -> None:
    h = Harness.for_node("finalize", tmp_path)
    await h.job(file_id="file_1")
    await h.objects.put_bytes(upload_key("file_1"), b"x")
    await h.objects.put_bytes(FILES.audio, b"x")
    await h.transcripts.change("tr_1", "deleted")
    await finalize.run(h.ports, COMPLETED)
    assert await h.keys() == [] and not await h.objects.exists(upload_key("file_1"))
    assert h.sink.records == [] and h.transcripts.usage_writes == 0
