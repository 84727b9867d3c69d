"""Retention and data handling (spec sections 3 and 8): the sweep that forgets what expired.

:func:`sweep` removes, as of ``now``:

* transcripts finished (completed or error) more than their account's
  ``retention_days`` ago (30 by default): the row is emptied to a tombstone
  (metadata, ``audio_url``, ``webhook_url`` gone, earlier row versions purged), the
  result is deleted, and so is anything of the job left in the object store and
  Redis (processing copies, upload, webhook auth value);
* earlier row versions of any deleted or canceled transcript that a crash left behind;
* unused uploads ``upload_ttl_s`` (24 h) after they were created, object and Redis
  record; an upload claimed by a transcript waits for that job, whose end deletes it;
* Redis records of presigned uploads never sent, once as old;
* processing copies (``jobs/<id>/...``) the job no longer needs: everything of a
  deleted transcript, of a finished one except the spec kept for a pending webhook
  (and that too once the webhook schedule is long over) and the redacted audio (kept
  as long as its transcript), and of ids no transcript has;
* the oldest records of ``transcripts.completed`` beyond ``completed_keep_records`` a
  partition (:func:`stores.kafka.keep_newest`).

Every step is idempotent and judged from stored state, so several workers may sweep at
once, a sweep may stop halfway, and ``now`` may be given (the console's maintenance
endpoint) to see what a later sweep would remove. The worker sweeps every
``SWEEP_INTERVAL_S``; a Redis lock keeps replicas from repeating each other's work.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

from schemas.errors import A5sError
from schemas.rows import TranscriptRow, as_utc
from schemas.settings import Settings
from topologies.objects import (JOBS_PREFIX, UPLOADS_PREFIX, JobFiles, file_id_of,
                                 transcript_id_of, upload_key)
from topologies.redis_keys import RETENTION_LOCK, UPLOAD, UPLOAD_CLAIM, WEBHOOK_AUTH
from topologies.topics import COMPLETED

from .context import Context
from .kafka import keep_newest
from .objects import ObjectInfo
from .transcripts import Transcripts

__all__ = ["SweepReport", "sweep", "sweep_once", "webhook_window", "SWEEP_INTERVAL_S"]

log = logging.getLogger("a5s.retention")

SWEEP_INTERVAL_S = 300.0
BATCH = 500
MAX_BATCHES = 100
ORPHAN_GRACE = timedelta(hours=1)
"""A ``jobs/<id>/`` prefix with no transcript row is left alone this long: the gateway
writes the job spec just before the row."""
SETTLE_GRACE = timedelta(minutes=10)
"""Objects of a finished job written this recently may still be read by a replayed stage."""


class SweepReport(BaseModel):
    """What one sweep removed."""

    now: datetime
    transcripts: int = 0
    """Transcripts expired and deleted."""
    purged: int = 0
    """Deleted transcripts whose leftover row versions were purged."""
    uploads: int = 0
    """Unused uploads removed (object, Redis record or both)."""
    job_objects: int = 0
    """Processing copies and job specs removed."""
    completed_records: int = 0
    """Records of ``transcripts.completed`` deleted beyond ``completed_keep_records``."""


def webhook_window(settings: Settings) -> timedelta:
    """How long after completion a webhook may still be pending: the whole retry schedule,
    every attempt's reply limit, and a day of slack for a worker that was down."""
    hooks = settings.webhooks
    seconds = sum(hooks.retry_schedule_s) + (len(hooks.retry_schedule_s) + 1) * hooks.timeout_s
    return timedelta(seconds=seconds) + timedelta(days=1)


async def sweep(ctx: Context, now: datetime | None = None) -> SweepReport:
    """Remove everything expired as of ``now`` (default: the clock); see the module doc."""
    now = now or datetime.now(UTC)
    now = now if now.tzinfo else now.replace(tzinfo=UTC)
    transcripts = Transcripts(ctx.ch, ctx.redis)
    report = SweepReport(now=now)
    for _ in range(MAX_BATCHES):
        rows = await transcripts.expired(now, BATCH)
        await forget(ctx, transcripts, rows)
        report.transcripts += len(rows)
        if len(rows) < BATCH:
            break
    for account_id, tid in await transcripts.unpurged(BATCH):
        await transcripts.purge_versions(account_id, tid)
        report.purged += 1
    report.uploads = await _sweep_uploads(ctx, transcripts, now)
    report.job_objects = await _sweep_jobs(ctx, transcripts, now)
    report.completed_records = await _cap_completed(ctx.settings)
    if report.transcripts or report.uploads or report.job_objects or report.purged or \
            report.completed_records:
        log.info("retention sweep: %s", report.model_dump(exclude={"now"}))
    return report


async def sweep_once(ctx: Context, lock_s: float = SWEEP_INTERVAL_S) -> SweepReport | None:
    """The worker's periodic sweep: at most one replica per interval takes it."""
    if not await ctx.redis.set_json(True, *RETENTION_LOCK.key(), ttl_s=lock_s * 0.9,
                                    only_new=True):
        return None
    return await sweep(ctx)


async def _cap_completed(settings: Settings) -> int:
    """The public topic's oldest records beyond its count bound; a broker away leaves it
    to the next sweep (the topic's retention bounds it meanwhile)."""
    if settings.completed_keep_records <= 0:
        return 0
    try:
        return await keep_newest(settings, COMPLETED, settings.completed_keep_records)
    except A5sError as exc:
        log.warning("retention: transcripts.completed not trimmed: %r", exc)
        return 0


async def forget(ctx: Context, transcripts: Transcripts, rows: list[TranscriptRow]) -> None:
    """Delete transcripts and everything stored for them.

    ClickHouse first: a sweep stopped halfway leaves objects that the next sweep's job
    pass removes (a deleted transcript needs none of them)."""
    await transcripts.delete_many(rows)
    keys: list[tuple[str, ...]] = []
    for row in rows:
        await ctx.objects.delete_prefix(JobFiles(row.id).prefix)
        keys.append(WEBHOOK_AUTH.key(row.id))
        if row.file_id:
            await ctx.objects.delete(upload_key(row.file_id))
            keys += [UPLOAD.key(row.file_id), UPLOAD_CLAIM.key(row.file_id)]
    await ctx.redis.delete_many(keys)


async def _job_running(transcripts: Transcripts, transcript_id: object) -> bool:
    if not isinstance(transcript_id, str):
        return False
    row = await transcripts.get(transcript_id)
    return row is not None and row.status in ("queued", "processing")


async def _sweep_uploads(ctx: Context, transcripts: Transcripts, now: datetime) -> int:
    ttl = timedelta(seconds=ctx.settings.upload_ttl_s)
    removed = 0
    stored = {file_id_of(item.key): item for item in await ctx.objects.list(UPLOADS_PREFIX)}
    for file_id in set(stored) | set(await ctx.redis.upload_ids()):
        record = await ctx.redis.upload(file_id)
        created = _created_at(record, stored.get(file_id))
        if created is None or created + ttl > now:
            continue
        if await _job_running(transcripts, await ctx.redis.upload_claim(file_id)):
            continue  # its transcript deletes it when the job ends
        if file_id in stored:
            await ctx.objects.delete(upload_key(file_id))
        await ctx.redis.drop_upload(file_id)
        removed += 1
    return removed


def _created_at(record: object, item: ObjectInfo | None) -> datetime | None:
    if isinstance(record, dict) and isinstance(record.get("created_at"), str):
        try:
            return as_utc(datetime.fromisoformat(record["created_at"]))
        except ValueError:
            pass
    if item is not None:
        return datetime.fromtimestamp(item.modified, UTC)
    return None


async def _sweep_jobs(ctx: Context, transcripts: Transcripts, now: datetime) -> int:
    jobs: dict[str, list[ObjectInfo]] = defaultdict(list)
    for item in await ctx.objects.list(JOBS_PREFIX):
        tid = transcript_id_of(item.key)
        if tid is not None:
            jobs[tid].append(item)
    removed = 0
    names = list(jobs)
    for start in range(0, len(names), BATCH):  # one query per batch, not one per job
        rows = await transcripts.get_many(names[start:start + BATCH])
        for tid in names[start:start + BATCH]:
            removed += await _sweep_job(ctx, tid, rows.get(tid), jobs[tid], now)
    return removed


async def _sweep_job(ctx: Context, tid: str, row: TranscriptRow | None,
                     items: list[ObjectInfo], now: datetime) -> int:
    removed = 0
    for item in _unneeded(row, items, now, webhook_window(ctx.settings)):
        await ctx.objects.delete(item.key)
        if JobFiles(tid).is_spec(item.key):
            await ctx.redis.drop_webhook_auth(tid)
        removed += 1
    return removed


def _unneeded(row: TranscriptRow | None, items: list[ObjectInfo], now: datetime,
              webhook_for: timedelta) -> list[ObjectInfo]:
    """Which of a job's objects nothing will read again."""
    def older_than(item: ObjectInfo, age: timedelta) -> bool:
        return datetime.fromtimestamp(item.modified, UTC) + age <= now

    if row is None:
        return [i for i in items if older_than(i, ORPHAN_GRACE)]
    if row.deleted:
        return items
    if row.status not in ("completed", "error"):
        return []  # a running job
    finished = row.completed_at or now
    webhook_pending = bool(row.webhook_url) and finished + webhook_for > now
    return [i for i in items if older_than(i, SETTLE_GRACE)
            and not (webhook_pending and i.key.endswith("/spec.json"))
            and not (row.status == "completed" and JobFiles(row.id).is_kept(i.key))]
