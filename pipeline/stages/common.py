"""What every stage shares: the replay plan, stored outputs, lost inputs, failure, clean-up."""

from __future__ import annotations

import logging
from typing import Literal

from schemas.errors import JobErrorCode, JobFailed
from schemas.records import JobOutcome
from stores.objects import ObjectMissing
from topologies.objects import JobFiles, upload_key
from topologies.topics import OUTCOMES

from .ports import Ports, Publish

__all__ = ["Step", "plan_step", "stored", "inputs_missing", "job_has_ended", "fail", "cleanup"]

log = logging.getLogger("a5s.pipeline")

Step = Literal["drop", "reuse", "run"]


def plan_step(canceled: bool, output_stored: bool) -> Step:
    """A canceled job's record is dropped; a replay finds its output stored and reuses it."""
    if canceled:
        return "drop"
    return "reuse" if output_stored else "run"


async def stored(ports: Ports, key: str) -> bytes | None:
    """A stage's stored output when a replayed record finds the work already done."""
    try:
        return await ports.objects.get_bytes(key)
    except ObjectMissing:
        return None


def job_has_ended(row: object) -> bool:
    """No row, a deleted one, or a final status: whatever input is gone, nothing is lost."""
    return (row is None or bool(getattr(row, "deleted", False))
            or getattr(row, "status", None) in ("completed", "error"))


async def inputs_missing(ports: Ports, tid: str, stage: str, exc: ObjectMissing) -> None:
    """A job's stored input is gone: drop a stale replay, fail a live job.

    Clean-up removes the job's files once it ends, so a record replayed after that
    (a crash before its offset was committed) finds nothing: the job is over and the
    record is dropped. A job still running has lost its data, which no retry brings back.

    Raises:
        JobFailed: ``internal_error`` when the job has not ended.
    """
    if job_has_ended(await ports.transcripts.get(tid, include_deleted=True)):
        log.info("%s %s: the job has ended; dropping a replayed record", stage, tid)
        return
    raise JobFailed(JobErrorCode.internal_error, "The audio being processed was lost; "
                    "resubmit the job.") from exc


async def fail(publish: Publish, account_id: str, transcript_id: str, code: JobErrorCode,
               message: str) -> None:
    """End a job with a spec error: an ``error`` outcome for finalize."""
    await publish(OUTCOMES, transcript_id, JobOutcome(
        account_id=account_id, transcript_id=transcript_id, status="error",
        error_code=str(code), error_message=message))


async def cleanup(ports: Ports, tid: str, file_id: str | None, keep_spec: bool = False,
                  keep_redacted: bool = False) -> None:
    """Audio copies never outlive their job; the spec stays only for a pending webhook, and
    a completed transcript's redacted audio as long as the transcript."""
    files = JobFiles(tid)
    for item in await ports.objects.list(files.prefix):
        if not (keep_spec and files.is_spec(item.key)) and not (
                keep_redacted and files.is_kept(item.key)):
            await ports.objects.delete(item.key)
    if file_id:
        await ports.objects.delete(upload_key(file_id))
