"""The batch stages: what each agent does with one record.

Every stage is idempotent on redelivery: outputs go to deterministic object keys
(``jobs/<id>/...``) and downstream records can be replayed. A stage checks the
cancel flag first, so a canceled job's work is dropped. Spec job errors
(``JobFailed``) end the job at once; anything else is retried by the agent and
then ends the job with ``internal_error``.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from schemas.api import ASYNC_MODEL, WebhookEvent
from schemas.errors import JobErrorCode, JobFailed
from schemas.records import (Admission, ChunkPlan, Chunk, CompletedTranscript, Dispatch,
                             DurationKnown, Finished, JobOutcome, JobSpec, Settled,
                             Transcribed, TranscriptResult, WebhookDue)
from schemas.rows import TranscriptRow, UsageEventRow
from stores.context import Context
from stores.objects import ObjectMissing
from stores.transcripts import Transcripts
from topologies.topics import (ACCOUNT_EVENTS, CHUNKS, COMPLETED, OUTCOMES, TRANSCRIBED,
                               WEBHOOKS, TopicSpec)

from .engines import Engines
from .types import Region

__all__ = ["Stages", "Publish", "job_key", "webhook_id"]

log = logging.getLogger("a5s.pipeline")
Publish = Callable[[TopicSpec[Any], str, Any], Awaitable[None]]


def job_key(transcript_id: str, name: str) -> str:
    return f"jobs/{transcript_id}/{name}"


def webhook_id(transcript_id: str) -> str:
    """Stable per job: one event per transcript, so retries and replays share the id."""
    return "msg_" + transcript_id.removeprefix("tr_")


class Stages:
    def __init__(self, ctx: Context, engines: Engines, publish: Publish) -> None:
        self.ctx = ctx
        self.engines = engines
        self.publish = publish
        self.transcripts = Transcripts(ctx.ch, ctx.redis)

    async def canceled(self, transcript_id: str) -> bool:
        return bool(await self.ctx.redis.get_json("canceled", transcript_id))

    async def _inputs_missing(self, tid: str, stage: str, exc: ObjectMissing) -> None:
        """A job's stored input is gone: drop a stale replay, fail a live job.

        Cleanup removes ``jobs/<id>/`` once a job ends, so a record replayed after
        that (a crash before its offset was committed) finds nothing: the job is
        over and the record is dropped. A job still running has lost its data,
        which no retry brings back.

        Raises:
            JobFailed: ``internal_error`` when the job has not ended.
        """
        row = await self.transcripts.get(tid, include_deleted=True)
        if row is None or row.deleted or row.status in ("completed", "error"):
            log.info("%s %s: the job has ended; dropping a replayed record", stage, tid)
            return
        raise JobFailed(JobErrorCode.internal_error, "The audio being processed was lost; "
                        "resubmit the job.") from exc

    async def _done(self, tid: str, name: str) -> bytes | None:
        """A stage's stored output when a replayed record finds the work already done."""
        try:
            return await self.ctx.objects.get_bytes(job_key(tid, name))
        except ObjectMissing:
            return None

    async def fail(self, account_id: str, transcript_id: str, code: JobErrorCode,
                   message: str) -> None:
        await self.publish(OUTCOMES, transcript_id, JobOutcome(
            account_id=account_id, transcript_id=transcript_id, status="error",
            error_code=str(code), error_message=message))

    # --- decode -------------------------------------------------------------------------------

    async def decode(self, job: Dispatch) -> None:
        tid = job.transcript_id
        if await self.canceled(tid):
            return
        try:
            spec = JobSpec.model_validate_json(
                await self.ctx.objects.get_bytes(job_key(tid, "spec.json")))
        except ObjectMissing:
            log.info("decode %s: job spec gone (deleted); dropping", tid)
            return
        done = await self._done(tid, "duration.json")
        if done is not None:  # a replay: the audio is decoded already
            duration = float(done)
        else:
            max_s = float(self.ctx.settings.limits.max_audio_duration_seconds)
            async with self._source(spec) as src, \
                    self.ctx.objects.writer(job_key(tid, "audio.pcm")) as dst:
                duration = await self.engines.run(self.engines.decode, src, dst, max_s)
            await self.ctx.objects.put_bytes(job_key(tid, "duration.json"),
                                             str(duration).encode())
            log.info("decode %s: %.2f s of audio", tid, duration)
        await self.publish(ACCOUNT_EVENTS, job.account_id, DurationKnown(
            account_id=job.account_id, transcript_id=tid, duration=duration))

    @contextlib.asynccontextmanager
    async def _source(self, spec: JobSpec) -> Any:
        if spec.file_id is not None:
            try:
                async with self.ctx.objects.local_copy(f"uploads/{spec.file_id}") as path:
                    yield path
            except ObjectMissing as exc:
                raise JobFailed(JobErrorCode.file_not_found,
                                "The uploaded file is missing or expired.") from exc
            return
        from .netguard import AddressPolicy, download
        allow = self.ctx.settings.allow_private_audio_urls
        policy = AddressPolicy(allow_private=allow, allow_loopback=allow)
        with tempfile.TemporaryDirectory(prefix="a5s-dl-") as tmp:
            path = Path(tmp) / "audio"
            with open(path, "wb") as fh:
                await download(spec.audio_url or "", fh, policy=policy,
                               max_bytes=self.ctx.settings.max_download_bytes,
                               timeout_s=self.ctx.settings.download_timeout_s)
            yield path

    # --- chunk --------------------------------------------------------------------------------

    async def chunk(self, verdict: Admission) -> None:
        tid = verdict.transcript_id
        if await self.canceled(tid):
            return
        if not verdict.admitted:
            raise JobFailed(JobErrorCode.usage_limit_reached, verdict.reason or
                            "The audio is longer than the remaining usage.")
        planned = await self._done(tid, "chunks.json")
        if planned is not None:
            chunks = Engines.load_regions(planned)
        else:
            try:
                async with self.ctx.objects.local_copy(job_key(tid, "audio.pcm")) as pcm:
                    speech, chunks = await self.engines.run(self.engines.speech, pcm)
            except ObjectMissing as exc:
                return await self._inputs_missing(tid, "chunk", exc)
            await self.ctx.objects.put_bytes(job_key(tid, "speech.json"),
                                             Engines.dump_regions(speech))
            await self.ctx.objects.put_bytes(job_key(tid, "chunks.json"),
                                             Engines.dump_regions(chunks))
        await self.publish(CHUNKS, tid, ChunkPlan(
            account_id=verdict.account_id, transcript_id=tid, duration=verdict.duration,
            chunks=[Chunk(start=c.start, end=c.end) for c in chunks]))

    # --- transcribe ---------------------------------------------------------------------------

    async def transcribe(self, plan: ChunkPlan) -> None:
        tid = plan.transcript_id
        if await self.canceled(tid):
            return
        key = job_key(tid, "words.json")
        if await self._done(tid, "words.json") is None:
            chunks = [Region(c.start, c.end) for c in plan.chunks]
            try:
                async with self.ctx.objects.local_copy(job_key(tid, "audio.pcm")) as pcm:
                    words = await self.engines.run(self.engines.transcribe, pcm, chunks)
            except ObjectMissing as exc:
                return await self._inputs_missing(tid, "transcribe", exc)
            await self.ctx.objects.put_bytes(key, Engines.dump_words(words))
        await self.publish(TRANSCRIBED, tid, Transcribed(
            account_id=plan.account_id, transcript_id=tid, duration=plan.duration,
            result_key=key))

    # --- diarize ------------------------------------------------------------------------------

    async def diarize(self, done: Transcribed) -> None:
        tid = done.transcript_id
        if await self.canceled(tid):
            return
        key = job_key(tid, "result.json")
        if await self._done(tid, "result.json") is None:
            try:
                words = Engines.load_words(await self.ctx.objects.get_bytes(done.result_key))
                speech = Engines.load_regions(await self.ctx.objects.get_bytes(
                    job_key(tid, "speech.json")))
                spec = JobSpec.model_validate_json(
                    await self.ctx.objects.get_bytes(job_key(tid, "spec.json")))
                async with self.ctx.objects.local_copy(job_key(tid, "audio.pcm")) as pcm:
                    result = await self.engines.run(self.engines.diarize, pcm, speech, words,
                                                    spec.speakers_expected)
            except ObjectMissing as exc:
                return await self._inputs_missing(tid, "diarize", exc)
            await self.ctx.objects.put_bytes(key, result.model_dump_json().encode())
        await self.publish(OUTCOMES, tid, JobOutcome(
            account_id=done.account_id, transcript_id=tid, status="completed",
            duration=done.duration, result_key=key))

    # --- finalize -----------------------------------------------------------------------------

    async def finalize(self, outcome: JobOutcome) -> None:
        """One write of the result and the usage event, then the ledger counts the job.

        The transcript stays ``processing`` until the accounts agent has counted it
        (``settled``), so a client that sees ``completed`` also sees its usage.
        """
        tid = outcome.transcript_id
        row = await self.transcripts.get(tid, outcome.account_id, include_deleted=True)
        if row is None or row.deleted:
            await self._cleanup(tid, row.file_id if row else None)
            return
        if row.status in ("completed", "error"):
            # Settled already: a replayed outcome must not write a second usage event (a late
            # "failed" beside the "completed" one). The recorded outcome is announced to the
            # ledger again: it counts a job only while it holds it as processing, which is
            # the case when the broker lost the ledger's last changes (a killed embedded
            # broker); otherwise the job stays counted once and its slot stays free.
            log.info("finalize %s: already %s; announcing the recorded outcome again", tid,
                     row.status)
            await self.publish(ACCOUNT_EVENTS, row.account_id, Finished(
                account_id=row.account_id, transcript_id=tid, status=row.status,
                duration=row.audio_duration if row.status == "completed" else None,
                error_code=row.error_code, error_message=row.error_message))
            return
        now = datetime.now(UTC)
        completed = outcome.status == "completed"
        if completed and row.status != "error":
            try:
                raw = await self.ctx.objects.get_bytes(outcome.result_key or "")
            except ObjectMissing:  # retrying cannot bring it back: end the job instead
                log.error("finalize %s: the result %s is missing", tid, outcome.result_key)
                outcome = outcome.model_copy(update={
                    "status": "error", "duration": None,
                    "error_code": str(JobErrorCode.internal_error),
                    "error_message": "The result was lost; resubmit the job."})
                completed = False
            else:
                await self.transcripts.save_result(
                    row, TranscriptResult.model_validate_json(raw))
        await self.transcripts.record_usage(UsageEventRow(
            event_id=f"{tid}:finished", account_id=row.account_id, key_id=row.key_id,
            model=ASYNC_MODEL, kind="completed" if completed else "failed", at=now,
            audio_seconds=(outcome.duration or 0.0) if completed else 0.0, transcript_id=tid))
        await self.publish(ACCOUNT_EVENTS, row.account_id, Finished(
            account_id=row.account_id, transcript_id=tid, status=outcome.status,
            duration=outcome.duration, error_code=outcome.error_code,
            error_message=outcome.error_message))

    # --- publish ------------------------------------------------------------------------------

    async def settle(self, settled: Settled, now: datetime) -> TranscriptRow | None:
        """Record the counted outcome on the transcript row; a no-op once the row is final.

        The accounts agent calls this before it hands the freed slot to the next job,
        so no client ever sees more jobs processing than the account's limit, and the
        next job's ``started_at`` is never before this one's ``completed_at``.
        """
        row = await self.transcripts.get(settled.transcript_id, settled.account_id,
                                         include_deleted=True)
        if row is None or row.deleted or row.status in ("completed", "error"):
            return row
        if settled.status == "completed":
            return await self.transcripts.change(
                row.id, "completed", now, account_id=row.account_id, known=row,
                audio_duration=settled.duration) or row
        return await self.transcripts.change(
            row.id, "error", now, account_id=row.account_id, known=row,
            error_code=settled.error_code, error_message=settled.error_message) or row

    async def publish_outcome(self, settled: Settled) -> None:
        """Make the counted outcome visible; then the public record, the webhook, cleanup."""
        tid = settled.transcript_id
        now = datetime.now(UTC)
        row = await self.settle(settled, now)
        if row is None or row.deleted:
            await self._cleanup(tid, row.file_id if row else None)
            return
        summary = row.summary()
        result = await self._result(row) if row.status == "completed" else None
        await self.publish(COMPLETED, tid, CompletedTranscript(
            id=tid, account_id=row.account_id, status=summary.status,  # type: ignore[arg-type]
            created_at=row.created_at, completed_at=row.completed_at or now,
            audio_duration=row.audio_duration, language_code=row.language_code,
            model=row.model, metadata=summary.metadata, error_code=row.error_code,
            **(result.public() if result else {})))
        pending_webhook = bool(row.webhook_url) and await self.ctx.objects.exists(
            job_key(tid, "spec.json"))
        if pending_webhook:
            await self.publish(WEBHOOKS, tid, WebhookDue(
                transcript_id=tid, account_id=row.account_id, webhook_id=webhook_id(tid)))
        await self._cleanup(tid, row.file_id, keep_spec=pending_webhook)

    async def _result(self, row: TranscriptRow) -> TranscriptResult | None:
        """The stored result: the stage output while the job's files remain (cheaper than
        a ClickHouse read), else the transcript's saved result (a replay after cleanup)."""
        done = await self._done(row.id, "result.json")
        if done is not None:
            return TranscriptResult.model_validate_json(done)
        return await self.transcripts.result(row.id, row.account_id)

    async def _cleanup(self, tid: str, file_id: str | None, keep_spec: bool = False) -> None:
        """Audio copies never outlive their job; the spec stays only for a pending webhook."""
        for item in await self.ctx.objects.list(f"jobs/{tid}/"):
            if not (keep_spec and item.key.endswith("spec.json")):
                await self.ctx.objects.delete(item.key)
        if file_id:
            await self.ctx.objects.delete(f"uploads/{file_id}")

    @staticmethod
    def webhook_event(status: str, transcript_id: str, metadata: dict[str, Any]) -> WebhookEvent:
        return WebhookEvent(event="transcript.completed" if status == "completed"
                            else "transcript.failed", id=transcript_id,
                            status=status, metadata=metadata)  # type: ignore[arg-type]
