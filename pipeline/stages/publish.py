"""publish: make the counted outcome visible, publish it, schedule the webhook, clean up.

``settle`` records the outcome on the transcript row. The accounts agent calls it
before it hands the freed slot to the next job, so no client ever sees more jobs
processing than the account's limit, and the next job's ``started_at`` is never
before this one's ``completed_at``; the ``publish`` agent calls it again (a no-op once
the row is final) before anything is announced.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from schemas.records import CompletedTranscript, Settled, TranscriptResult, WebhookDue
from schemas.rows import TranscriptRow
from topologies.objects import JobFiles
from topologies.topics import COMPLETED, WEBHOOKS

from .common import cleanup, job_has_ended, stored
from .ports import Ports

__all__ = ["SettleChange", "plan_settle", "settle", "completed_record", "webhook_id",
           "webhook_due", "run"]


@dataclass(frozen=True)
class SettleChange:
    status: Literal["completed", "error"]
    fields: dict[str, Any]


def plan_settle(row: TranscriptRow | None, settled: Settled) -> SettleChange | None:
    """The change that records ``settled`` on the row; None once the row is final or gone."""
    if job_has_ended(row):
        return None
    if settled.status == "completed":
        return SettleChange("completed", {"audio_duration": settled.duration})
    return SettleChange("error", {"error_code": settled.error_code,
                                  "error_message": settled.error_message})


async def settle(ports: Ports, settled: Settled, now: datetime) -> TranscriptRow | None:
    """Record the counted outcome on the transcript row; a no-op once the row is final."""
    row = await ports.transcripts.get(settled.transcript_id, settled.account_id,
                                      include_deleted=True)
    change = plan_settle(row, settled)
    if change is None or row is None:
        return row
    return await ports.transcripts.change(row.id, change.status, now, account_id=row.account_id,
                                          known=row, **change.fields) or row


def webhook_id(transcript_id: str) -> str:
    """Stable per job: one event per transcript, so retries and replays share the id."""
    return "msg_" + transcript_id.removeprefix("tr_")


def completed_record(row: TranscriptRow, result: TranscriptResult | None,
                     now: datetime) -> CompletedTranscript:
    """The public record on ``transcripts.completed``: the outcome, the text when completed."""
    summary = row.summary()
    return CompletedTranscript(
        id=row.id, account_id=row.account_id, status=summary.status,  # type: ignore[arg-type]
        created_at=row.created_at, completed_at=row.completed_at or now,
        audio_duration=row.audio_duration, language_code=row.language_code,
        model=row.model, metadata=summary.metadata, error_code=row.error_code,
        **(result.public() if result else {}))


def webhook_due(row: TranscriptRow, spec_kept: bool) -> WebhookDue | None:
    """A delivery is scheduled for a job with a ``webhook_url`` whose spec is still stored
    (the spec holds the auth header name and the body format; a replay after the delivery
    ended finds it gone and schedules nothing)."""
    if not (row.webhook_url and spec_kept):
        return None
    return WebhookDue(transcript_id=row.id, account_id=row.account_id,
                      webhook_id=webhook_id(row.id))


async def run(ports: Ports, settled: Settled) -> None:
    tid = settled.transcript_id
    now = datetime.now(UTC)
    row = await settle(ports, settled, now)
    if row is None or row.deleted:
        await cleanup(ports, tid, row.file_id if row else None)
        return
    result = await _result(ports, row) if row.status == "completed" else None
    await ports.publish(COMPLETED, tid, completed_record(row, result, now))
    due = webhook_due(row, bool(row.webhook_url)
                      and await ports.objects.exists(JobFiles(tid).spec))
    if due is not None:
        await ports.publish(WEBHOOKS, tid, due)
    await cleanup(ports, tid, row.file_id, keep_spec=due is not None,
                  keep_redacted=row.status == "completed")


async def _result(ports: Ports, row: TranscriptRow) -> TranscriptResult | None:
    """The stored result: the stage output while the job's files remain (cheaper than a
    ClickHouse read), else the transcript's saved result (a replay after cleanup)."""
    done = await stored(ports, JobFiles(row.id).result)
    if done is not None:
        return TranscriptResult.model_validate_json(done)
    return await ports.transcripts.result(row.id, row.account_id)
