"""settle and publish on in-memory ports: the row is final before anything is announced,
the webhook is scheduled once while the spec is kept, and the job's files go."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from memory_ports import Harness
from pipeline.stages import publish
from schemas.records import CompletedTranscript, Settled, TranscriptResult, WebhookDue
from topologies.objects import JobFiles, upload_key

FILES = JobFiles("tr_1")
NOW = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
OK = Settled(account_id="acct", transcript_id="tr_1", status="completed", duration=2.5)
FAILED = Settled(account_id="acct", transcript_id="tr_1", status="error",
                 error_code="invalid_audio", error_message="Not audio.")


async def test_plan_settle(tmp_path: Path) -> None:
    h = Harness.for_node("publish", tmp_path)
    row = await h.job()
    assert publish.plan_settle(row, OK) == publish.SettleChange("completed",
                                                                {"audio_duration": 2.5})
    assert publish.plan_settle(row, FAILED).status == "error"  # type: ignore[union-attr]
    assert publish.plan_settle(row.model_copy(update={"status": "error"}), OK) is None
    assert publish.plan_settle(None, OK) is None


async def test_settle_is_final_once(tmp_path: Path) -> None:
    h = Harness.for_node("publish", tmp_path)
    await h.job()
    row = await publish.settle(h.ports, OK, NOW)
    assert row is not None and row.status == "completed" and row.completed_at == NOW
    later = await publish.settle(h.ports, FAILED, datetime(2026, 1, 2, tzinfo=UTC))
    assert later is not None and later.status == "completed" and later.completed_at == NOW


async def test_a_completed_job_is_announced_with_its_text_and_webhook(tmp_path: Path) -> None:
    h = Harness.for_node("publish", tmp_path)
    await h.job(file_id="file_1", webhook_url="https://hooks.example/x")
    await h.objects.put_bytes(upload_key("file_1"), b"x")
    await h.objects.put_bytes(FILES.audio, b"x")
    await h.objects.put_bytes(FILES.result,
                              TranscriptResult(text="hi there").model_dump_json().encode())
    await publish.run(h.ports, OK)
    assert h.sink.topics() == ["transcripts.completed", "webhooks"]
    [record] = h.sink.of("transcripts.completed")
    assert isinstance(record, CompletedTranscript)
    assert record.status == "completed" and record.text == "hi there"
    [due] = h.sink.of("webhooks")
    assert due == WebhookDue(transcript_id="tr_1", account_id="acct", webhook_id="msg_1")
    assert await h.keys() == [FILES.spec]  # kept for the pending webhook only
    assert not await h.objects.exists(upload_key("file_1"))


async def test_a_replay_after_clean_up_reads_the_saved_result_and_schedules_no_webhook(
        tmp_path: Path) -> None:
    h = Harness.for_node("publish", tmp_path)
    await h.job(webhook_url="https://hooks.example/x")
    h.transcripts.results["tr_1"] = TranscriptResult(text="saved")
    await publish.settle(h.ports, OK, NOW)
    await h.objects.delete(FILES.spec)  # the delivery ended and took the spec with it
    await publish.run(h.ports, OK)
    assert h.sink.topics() == ["transcripts.completed"]
    assert h.sink.of("transcripts.completed")[0].text == "saved"


async def test_a_failed_job_has_no_text_and_no_webhook_without_url(tmp_path: Path) -> None:
    h = Harness.for_node("publish", tmp_path)
    await h.job()
    await publish.run(h.ports, FAILED)
    [record] = h.sink.of("transcripts.completed")
    assert record.status == "error" and record.error_code == "invalid_audio"
    assert record.text is None or record.text == ""
    assert h.sink.topics() == ["transcripts.completed"] and await h.keys() == []


async def test_a_deleted_transcript_is_only_cleaned_up(tmp_path: Path) -> None:
    h = Harness.for_node("publish", tmp_path)
    await h.job(webhook_url="https://hooks.example/x")
    await h.transcripts.change("tr_1", "deleted")
    await publish.run(h.ports, OK)
    assert h.sink.records == [] and await h.keys() == []
