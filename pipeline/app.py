"""The Faust app: agents registered from ``topologies.GRAPH``, around the stage functions.

Agents are thin: decode the record, call the stage, retry what failed for a
transient reason, and end the job with ``internal_error`` when retries run out.
Sends go out with ``send_and_wait`` before the source offset is acknowledged,
so a crash replays the record rather than losing its effects.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from datetime import UTC, datetime
from typing import Any

import faust

from schemas.errors import JobErrorCode, JobFailed
from schemas.api import STREAMING_MODEL
from schemas.records import Submitted
from schemas.rows import UsageEventRow
from schemas.settings import Settings
from stores.context import Context
from stores.transcripts import Transcripts
from topologies.graph import node
from topologies.topics import ADMISSIONS, CHANGELOG_CONFIG, DISPATCH, SETTLED, TopicSpec

from .accounts import AccountState, Effects, apply
from .engines import Engines
from .faust_transport import App
from .reconcile import RECONCILE_INTERVAL_S, Reconciler
from .retention import SWEEP_INTERVAL_S, sweep_once
from .stages import Stages
from .webhooks import SCAN_INTERVAL_S, WebhookScheduler, WebhookSender

__all__ = ["create_app", "Pipeline"]

log = logging.getLogger("a5s.pipeline")


def create_app(settings: Settings) -> faust.App:
    """Faust settings tuned for a small broker: group joins in seconds, not 30 s."""
    return App(
        settings.app_id, broker=f"kafka://{settings.bootstrap}", store="memory://",
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        broker_rebalance_timeout=4, broker_session_timeout=10, broker_heartbeat_interval=1,
        broker_max_poll_interval=3600, broker_commit_every=1, broker_commit_interval=1.0,
        consumer_auto_offset_reset="earliest", web_enabled=False, autodiscover=False,
        producer_acks=-1, table_standby_replicas=0, stream_wait_empty=False,
        key_serializer="raw", value_serializer="raw", logging_config=None)


def _is_new_job(old: AccountState, event: Any) -> bool:
    """A ``submitted`` event seen for the first time (not a replay)."""
    tid = getattr(event, "transcript_id", None)
    return (isinstance(event, Submitted) and tid not in old.queue
            and tid not in old.processing and tid not in old.recent)


def _first_settled(old: AccountState, fx: Effects) -> set[str]:
    """Jobs whose outcome this event counts for the first time (a replay settles again)."""
    return {s.transcript_id for s in fx.settled if s.transcript_id in old.processing}


class Pipeline:
    """Binds one process's ``Context`` and models to the Faust agents of the graph."""

    def __init__(self, app: faust.App, ctx: Context, engines: Engines) -> None:
        self.app = app
        self.ctx = ctx
        self.settings = ctx.settings
        self.engines = engines
        self.transcripts = Transcripts(ctx.ch, ctx.redis)
        self._topics: dict[str, Any] = {}
        self.stages = Stages(ctx, engines, self.publish)
        self.accounts = app.Table("accounts", default=None, key_type=str, value_type=bytes,
                                  partitions=self.settings.partitions,
                                  extra_topic_configs=CHANGELOG_CONFIG)

    def topic(self, spec: TopicSpec[Any]) -> Any:
        name = self.settings.topic_prefix + spec.name
        if name not in self._topics:
            self._topics[name] = self.app.topic(name, key_type=bytes, value_type=bytes,
                                                partitions=spec.partitions or
                                                self.settings.partitions)
        return self._topics[name]

    async def publish(self, spec: TopicSpec[Any], key: str, value: Any) -> None:
        await self.app.producer.send_and_wait(self.settings.topic_prefix + spec.name,
                                              key.encode(), spec.encode(value), None, None,
                                              None)

    def register(self, names: set[str]) -> None:
        handlers: dict[str, Callable[[Any], Awaitable[None]]] = {
            "decode": self.stages.decode, "chunk": self.stages.chunk,
            "transcribe": self.stages.transcribe, "diarize": self.stages.diarize,
            "finalize": self.stages.finalize, "publish": self.stages.publish_outcome,
        }
        if "accounts" in names:
            self._agent("accounts", self.on_account_event, retries=None)
            self.reconciler = Reconciler(self.app, self.ctx, self.accounts, self.publish)
            self.app.timer(RECONCILE_INTERVAL_S, name="a5s.reconcile")(self.reconciler.tick)
        if "webhooks" in names:
            self._register_webhooks()
        if "retention" in names:
            self.app.timer(SWEEP_INTERVAL_S, name="a5s.retention")(self.sweep)
        if "realtime" in names:
            self._register_realtime()
        for name, handler in handlers.items():
            if name in names:
                self._agent(name, handler, retries=None if name in ("finalize", "publish")
                            else self.settings.stage_retries)

    def _register_realtime(self) -> None:
        """Live sessions: a task running the realtime agent's own low-latency consumer."""
        from .realtime.agent import RealtimeAgent
        self.realtime = RealtimeAgent(self.settings, self.ctx.producer.send)

        async def realtime() -> None:
            await self.realtime.serve()

        self.app.task(realtime)

    def _register_webhooks(self) -> None:
        """The ``webhooks`` agent fills the delivery table; a timer delivers what is due."""
        self.webhooks = WebhookScheduler(
            self.app, self.ctx, WebhookSender(self.ctx, self.transcripts),
            topic=self.settings.topic_prefix + node("webhooks").reads[0].name,
            metrics=self.ctx.metrics)
        self._agent("webhooks", self.webhooks.on_due, retries=None)
        self.app.timer(SCAN_INTERVAL_S, name="a5s.webhooks-due")(self.webhooks.tick)

    async def sweep(self) -> None:
        """The periodic retention sweep; a failure waits for the next interval."""
        try:
            await sweep_once(self.ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the timer must keep running; the next sweep redoes it
            log.warning("retention sweep failed: %r", exc, exc_info=True)

    def _agent(self, name: str, handler: Callable[[Any], Awaitable[None]],
               retries: int | None) -> None:
        spec = node(name).reads[0]
        # Several transcribe actors keep several jobs in flight, so their chunks can share
        # ASR batches (pipeline.asr.batching); the other stages take one record at a time.
        concurrency = self.settings.models.transcribe_concurrency if name == "transcribe" else 1

        async def agent(stream: Any) -> None:
            async for raw in stream:
                record = spec.decode(raw)
                await self._run(name, handler, record, retries)

        agent.__name__ = agent.__qualname__ = name
        self.app.agent(self.topic(spec), name=f"a5s.{name}", concurrency=concurrency)(agent)

    async def _run(self, name: str, handler: Callable[[Any], Awaitable[None]], record: Any,
                   retries: int | None) -> None:
        started = time.perf_counter()
        try:
            await self._attempts(name, handler, record, retries)
        finally:
            self.ctx.metrics.stage_duration.labels(name).observe(time.perf_counter() - started)

    async def _attempts(self, name: str, handler: Callable[[Any], Awaitable[None]], record: Any,
                        retries: int | None) -> None:
        attempt = 0
        while True:
            try:
                await handler(record)
                return
            except JobFailed as exc:
                log.info("%s %s: %s", name, getattr(record, "transcript_id", "?"), exc)
                self.ctx.metrics.stage_failures.labels(name).inc()
                await self.stages.fail(record.account_id, record.transcript_id, exc.code,
                                       exc.message)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any other failure: retried, then internal_error
                attempt += 1
                log.warning("%s failed (attempt %d): %r", name, attempt, exc,
                            exc_info=attempt == 1)
                if retries is not None and attempt > retries:
                    self.ctx.metrics.stage_failures.labels(name).inc()
                    await self.stages.fail(record.account_id, record.transcript_id,
                                           JobErrorCode.internal_error,
                                           "Processing failed after automatic retries; "
                                           "resubmit the job.")
                    return
                await asyncio.sleep(min(30.0, 0.5 * 2 ** attempt))

    # --- accounts agent -----------------------------------------------------------------------

    async def on_account_event(self, event: Any) -> None:
        account_id = event.account_id
        raw = self.accounts.get(account_id)
        state = AccountState.model_validate_json(raw) if raw else AccountState()
        now = datetime.now(UTC)
        new, fx = apply(state, event, now)
        # The ledger first: a client that sees a job completed also sees it counted.
        await self.ctx.redis.set_json({"used": new.used, "reserved": new.reserved,
                                       "processing": len(new.processing),
                                       "queued": len(new.queue)}, "ledger", account_id)
        if _is_new_job(state, event):
            self.ctx.metrics.jobs.labels("queued").inc()
        await self._carry_out(account_id, fx, now, first=_first_settled(state, fx))
        self.accounts[account_id] = new.model_dump_json().encode()

    async def _carry_out(self, account_id: str, fx: Effects, now: datetime,
                         first: Collection[str] = ()) -> None:
        """``first``: ids whose outcome this event counts for the first time (not a replay)."""
        for settled in fx.settled:  # before the freed slot goes to the next job
            row = await self.stages.settle(settled, now)
            if settled.transcript_id in first and row is not None:
                self.ctx.metrics.observe_job(settled.status, row.created_at, row.started_at,
                                             row.completed_at, row.audio_duration)
        for change in fx.changes:
            self.ctx.metrics.jobs.labels("canceled" if change.status == "deleted"
                                         else change.status).inc()
            if change.status != "deleted":
                await self.transcripts.change(change.transcript_id, change.status, change.at,
                                              account_id=account_id)
        for job in fx.dispatch:
            await self.ctx.redis.dequeue(job.account_id, job.transcript_id)
            await self.publish(DISPATCH, job.transcript_id, job)
        for verdict in fx.admissions:
            await self.publish(ADMISSIONS, verdict.transcript_id, verdict)
        for closed in fx.sessions_closed:
            await self.transcripts.record_usage(UsageEventRow(
                event_id=closed.session_id, account_id=closed.account_id, key_id=closed.key_id,
                model=STREAMING_MODEL, kind="stream", at=closed.at,
                audio_seconds=closed.billed_ms / 1000))
        for settled in fx.settled:
            await self.publish(SETTLED, settled.transcript_id, settled)
