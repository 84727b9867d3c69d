"""Admission and bookkeeping of batch jobs: what ``POST``/``DELETE /v1/transcripts`` do.

Order of checks on create: rate (every create request counts), body (a ``webhook_url``
that no delivery could reach under the webhook settings included), idempotency, model
access, usage, upload, queue size. A transcript is recorded in ClickHouse
before its ``submitted`` event is published, so it is visible at once; if the
publish fails the row is withdrawn and the client may retry with the same key.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from schemas import ids
from schemas.api import (ASYNC_MODEL, CreateTranscript, DeletedTranscript, JobError,
                         Transcript, TranscriptSummary)
from schemas.errors import (A5sError, FileNotFound, IdempotencyConflict, InvalidRequest,
                            ModelAccessDenied, NotFound, QueueFull, RateLimited,
                            UsageLimitReached)
from schemas.records import Canceled, JobSpec, PiiRedaction, Submitted, TranscriptResult
from schemas.rows import TranscriptRow, UsageEventRow
from stores.context import Context
from stores.transcripts import Transcripts
from topologies.objects import JobFiles, upload_key
from topologies.redis_keys import IDEMPOTENCY
from topologies.topics import ACCOUNT_EVENTS

from .base import Principal, publish

__all__ = ["JobService", "IDEMPOTENCY_TTL_S"]

log = logging.getLogger("a5s.gateway")
IDEMPOTENCY_TTL_S = 31 * 24 * 3600
PENDING = "pending"


class JobService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.transcripts = Transcripts(ctx.ch, ctx.redis)

    # --- create -------------------------------------------------------------------------------

    async def create(self, who: Principal, raw_body: bytes, idempotency_key: str | None,
                     parse: type[CreateTranscript],
                     webhook_format: Literal["a5s", "assemblyai"] = "a5s",
                     spec_fields: Mapping[str, Any] | None = None) -> tuple[Transcript, bool]:
        """Returns the transcript and whether it was created now (201) or replayed (200).

        ``webhook_format`` is the body its webhook will have (``assemblyai`` for ``/v2``);
        ``spec_fields`` are further ``JobSpec`` fields that shape the processing (``/v2``'s
        options: whether to diarize, the speaker count or bounds, multichannel, the PII to
        redact, the key terms)."""
        account = who.account
        wait = await self.ctx.redis.take_rate(f"create:{account.id}",
                                              account.max_requests_per_minute)
        if wait:
            raise RateLimited(f"More than {account.max_requests_per_minute} create requests "
                              "in a minute.", retry_after=wait)
        from .base import parse_body
        body = parse_body(parse, raw_body)
        if body.webhook_url is not None:
            why = self.ctx.settings.webhooks.undeliverable(body.webhook_url)
            if why is not None:
                raise InvalidRequest(f"webhook_url can never be delivered: {why}.",
                                     param="webhook_url")
        if idempotency_key is not None:
            replay = await self._claim_idempotency(account.id, idempotency_key, body)
            if replay is not None:
                return replay, False
        try:
            transcript = await self._admit(who, body, webhook_format, spec_fields or {})
        except BaseException:
            if idempotency_key is not None:
                await self.ctx.redis.delete(*IDEMPOTENCY.key(account.id,
                                                              _idem_hash(idempotency_key)))
            raise
        if idempotency_key is not None:
            await self.ctx.redis.set_json(
                {"body": _body_hash(body), "transcript_id": transcript.id},
                *IDEMPOTENCY.key(account.id, _idem_hash(idempotency_key)), ttl_s=IDEMPOTENCY_TTL_S)
        return transcript, True

    async def _claim_idempotency(self, account_id: str, key: str,
                                 body: CreateTranscript) -> Transcript | None:
        if not key or len(key) > 255:
            raise InvalidRequest("Idempotency-Key must be 1 to 255 characters.",
                                 param="Idempotency-Key")
        digest = _body_hash(body)
        slot = IDEMPOTENCY.key(account_id, _idem_hash(key))
        for _ in range(200):
            if await self.ctx.redis.set_json({"body": digest, "transcript_id": PENDING}, *slot,
                                             ttl_s=60, only_new=True):
                return None
            record = await self.ctx.redis.get_json(*slot)
            if record is None:
                continue
            if record["body"] != digest:
                raise IdempotencyConflict()
            if record["transcript_id"] != PENDING:
                found = await self.get(account_id, record["transcript_id"], missing_ok=True)
                if found is not None:
                    return found
                raise IdempotencyConflict("The transcript created with this Idempotency-Key "
                                          "was deleted; use a new key.")
            await asyncio.sleep(0.05)  # a concurrent identical request is creating it
        raise IdempotencyConflict("A request with this Idempotency-Key is still in progress.")

    async def _admit(self, who: Principal, body: CreateTranscript,
                     webhook_format: Literal["a5s", "assemblyai"],
                     spec_fields: Mapping[str, Any]) -> Transcript:
        account, ctx = who.account, self.ctx
        if not account.async_enabled:
            raise ModelAccessDenied(f"This account has no access to {ASYNC_MODEL}.",
                                    param="model")
        ledger = await ctx.redis.ledger(account.id)
        if account.usage_limit_seconds - float(ledger["used"]) - float(ledger["reserved"]) <= 0:
            raise UsageLimitReached()
        tid = ids.transcript_id()
        if body.file_id is not None:
            await self._claim_upload(account.id, body.file_id, tid)
        if not await ctx.redis.enqueue(account.id, tid, account.max_queued_jobs):
            await self._release_upload(body.file_id)
            raise QueueFull(f"{account.max_queued_jobs} jobs are already waiting.",
                            retry_after=30)
        now = datetime.now(UTC)
        spec = JobSpec(transcript_id=tid, account_id=account.id, key_id=who.key.key_id,
                       created_at=now, audio_url=body.audio_url, file_id=body.file_id,
                       language_code=body.language_code, webhook_url=body.webhook_url,
                       webhook_auth_header_name=body.webhook_auth_header_name,
                       metadata=body.metadata, webhook_format=webhook_format,
                       **spec_fields)
        row = TranscriptRow(id=tid, account_id=account.id, key_id=who.key.key_id,
                            created_at=now, status="queued", audio_url=body.audio_url,
                            file_id=body.file_id, language_code=body.language_code,
                            model=ASYNC_MODEL,
                            metadata=Transcripts.metadata_json(body.metadata),
                            webhook_url=body.webhook_url)
        try:
            await ctx.objects.put_bytes(JobFiles(tid).spec, spec.model_dump_json().encode())
            if body.webhook_auth_header_value is not None:
                await ctx.redis.set_webhook_auth(tid, body.webhook_auth_header_value)
            await self.transcripts.insert(row)
            await publish(ctx, ACCOUNT_EVENTS, account.id, Submitted(
                account_id=account.id, transcript_id=tid, at=now, limits=account.limits))
        except A5sError:
            await self._withdraw(row)
            raise
        await self.transcripts.record_usage(UsageEventRow(
            event_id=f"{tid}:request", account_id=account.id, key_id=who.key.key_id,
            model=ASYNC_MODEL, kind="request", at=now, transcript_id=tid))
        return Transcript.model_validate(row.summary().model_dump())

    async def _withdraw(self, row: TranscriptRow) -> None:
        log.warning("withdrawing %s: its submission could not be published", row.id)
        for step in (self.transcripts.change(row.id, "deleted", account_id=row.account_id),
                     self.ctx.redis.dequeue(row.account_id, row.id),
                     self.ctx.objects.delete_prefix(JobFiles(row.id).prefix),
                     self._release_upload(row.file_id)):
            try:
                await step
            except A5sError as exc:
                log.error("withdraw %s: %s", row.id, exc.log or exc)

    # --- uploads ------------------------------------------------------------------------------

    async def _claim_upload(self, account_id: str, file_id: str, transcript_id: str) -> None:
        record = await self.ctx.redis.upload(file_id)
        if (record is None or record.get("account_id") != account_id
                or not await self.ctx.objects.exists(upload_key(file_id))):
            raise FileNotFound(param="file_id")
        if not await self.ctx.redis.claim_upload(file_id, transcript_id, IDEMPOTENCY_TTL_S):
            raise FileNotFound("This file was already used for a transcript; upload it again.",
                               param="file_id")

    async def _release_upload(self, file_id: str | None) -> None:
        if file_id is not None:
            await self.ctx.redis.release_upload(file_id)

    # --- read ---------------------------------------------------------------------------------

    async def get(self, account_id: str, transcript_id: str,
                  missing_ok: bool = False) -> Transcript | None:
        found = await self.get_with_result(account_id, transcript_id, missing_ok)
        return found[0] if found else None

    async def get_with_result(self, account_id: str, transcript_id: str, missing_ok: bool = False,
                              ) -> tuple[Transcript, TranscriptResult | None] | None:
        """The transcript, and its stored result once completed (which also holds what
        ``/v1`` does not show, such as word confidences)."""
        found = await self.transcripts.get_with_result(transcript_id, account_id)
        if found is None:
            if missing_ok:
                return None
            raise NotFound(f"No transcript {transcript_id!r}.")
        row, result = found
        data = row.summary().model_dump()
        if result is not None:
            data |= result.public()
        return Transcript.model_validate(data), result

    # --- delete -------------------------------------------------------------------------------

    async def delete(self, who: Principal, transcript_id: str) -> DeletedTranscript:
        account = who.account
        row = await self.transcripts.get(transcript_id, account.id)
        if row is None:
            raise NotFound(f"No transcript {transcript_id!r}.")
        summary = row.summary()
        if row.status in ("queued", "processing"):
            await self.ctx.redis.mark_canceled(row.id)
            await publish(self.ctx, ACCOUNT_EVENTS, account.id, Canceled(
                account_id=account.id, transcript_id=row.id, at=datetime.now(UTC)))
            await self.ctx.redis.dequeue(account.id, row.id)
            summary = summary.model_copy(update={"error": JobError(
                code="canceled", message="The job was canceled before it finished.")})
            await self.transcripts.change(row.id, "deleted", account_id=row.account_id)
        else:
            await self.transcripts.delete(row)
        await self.ctx.objects.delete_prefix(JobFiles(row.id).prefix)
        await self.ctx.redis.drop_webhook_auth(row.id)
        if row.file_id:
            await self.ctx.objects.delete(upload_key(row.file_id))
        return DeletedTranscript(**TranscriptSummary.model_validate(summary).model_dump())


def _body_hash(body: CreateTranscript) -> str:
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _idem_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32]
