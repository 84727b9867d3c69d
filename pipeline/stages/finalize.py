"""finalize: one write of the result and the usage event, then the ledger counts the job.

The transcript stays ``processing`` until the accounts agent has counted it
(``settled``), so a client that sees ``completed`` also sees its usage.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from schemas.api import ASYNC_MODEL
from schemas.errors import JobErrorCode
from schemas.records import Finished, JobOutcome, TranscriptResult
from schemas.rows import TranscriptRow, UsageEventRow
from stores.objects import ObjectMissing
from topologies.topics import ACCOUNT_EVENTS

from ..accounts import billed_seconds
from .common import cleanup
from .ports import Ports

__all__ = ["FinalizeDecision", "plan_finalize", "without_result", "usage_event", "finished",
           "recorded", "run"]

log = logging.getLogger("a5s.pipeline")


@dataclass(frozen=True)
class FinalizeDecision:
    action: Literal["cleanup", "announce", "record"]
    """``cleanup``: the transcript is gone; ``announce``: its outcome is recorded already (a
    replay), announce it to the ledger again; ``record``: write usage (and result), announce."""
    save_result: bool = False


def plan_finalize(row: TranscriptRow | None, outcome: JobOutcome) -> FinalizeDecision:
    if row is None or row.deleted:
        return FinalizeDecision("cleanup")
    if row.status in ("completed", "error"):
        # Settled already: a replayed outcome must not write a second usage event (a late
        # "failed" beside the "completed" one). The recorded outcome is announced to the
        # ledger again: it counts a job only while it holds it as processing, which is
        # the case when the broker lost the ledger's last changes (a killed embedded
        # broker); otherwise the job stays counted once and its slot stays free.
        return FinalizeDecision("announce")
    return FinalizeDecision("record", save_result=outcome.status == "completed")


def without_result(outcome: JobOutcome) -> JobOutcome:
    """A completed outcome whose result is lost: retrying cannot bring it back, so it fails."""
    return outcome.model_copy(update={
        "status": "error", "duration": None, "error_code": str(JobErrorCode.internal_error),
        "error_message": "The result was lost; resubmit the job."})


def usage_event(row: TranscriptRow, outcome: JobOutcome, now: datetime) -> UsageEventRow:
    """One per job (``<id>:finished``): a replay writes the same event id. Its seconds are
    what the ledger counts (``billed_seconds``: a multichannel job's once per channel)."""
    completed = outcome.status == "completed"
    return UsageEventRow(
        event_id=f"{row.id}:finished", account_id=row.account_id, key_id=row.key_id,
        model=ASYNC_MODEL, kind="completed" if completed else "failed", at=now,
        audio_seconds=billed_seconds(outcome.duration or 0.0, outcome.channels)
        if completed else 0.0, transcript_id=row.id)


def finished(row: TranscriptRow, outcome: JobOutcome) -> Finished:
    return Finished(account_id=row.account_id, transcript_id=row.id, status=outcome.status,
                    duration=outcome.duration, error_code=outcome.error_code,
                    error_message=outcome.error_message, channels=outcome.channels)


def recorded(row: TranscriptRow) -> Finished:
    """The outcome the transcript row already holds (a multichannel job's channels the
    ledger took from its ``DurationKnown``)."""
    return Finished(account_id=row.account_id, transcript_id=row.id,
                    status=row.status,  # type: ignore[arg-type]
                    duration=row.audio_duration if row.status == "completed" else None,
                    error_code=row.error_code, error_message=row.error_message)


async def run(ports: Ports, outcome: JobOutcome) -> None:
    tid = outcome.transcript_id
    row = await ports.transcripts.get(tid, outcome.account_id, include_deleted=True)
    decision = plan_finalize(row, outcome)
    if decision.action == "cleanup":
        await cleanup(ports, tid, row.file_id if row else None)
        return
    assert row is not None
    if decision.action == "announce":
        log.info("finalize %s: already %s; announcing the recorded outcome again", tid,
                 row.status)
        await ports.publish(ACCOUNT_EVENTS, row.account_id, recorded(row))
        return
    now = datetime.now(UTC)
    if decision.save_result:
        try:
            raw = await ports.objects.get_bytes(outcome.result_key or "")
        except ObjectMissing:
            log.error("finalize %s: the result %s is missing", tid, outcome.result_key)
            outcome = without_result(outcome)
        else:
            await ports.transcripts.save_result(row, TranscriptResult.model_validate_json(raw))
    await ports.transcripts.record_usage(usage_event(row, outcome, now))
    await ports.publish(ACCOUNT_EVENTS, row.account_id, finished(row, outcome))
