"""The Faust app: agents, timers and tasks registered from ``topologies.GRAPH`` alone.

Each worker node of the graph names its handler: a stage's ``run(ports, record)``
(``pipeline.stages``) or a ``Pipeline.install_*`` method for the other nodes. Every
publish goes through a function bound to its node, which refuses a topic the node does
not declare. Agents are thin: decode the record, call the stage, retry what failed for a
transient reason, and end the job with ``internal_error`` when retries run out.
Sends go out with ``send_and_wait`` before the source offset is acknowledged,
so a crash replays the record rather than losing its effects.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from datetime import UTC, datetime
from typing import Any

import faust

from schemas.errors import JobErrorCode, JobFailed
from schemas.api import STREAMING_MODEL
from schemas.records import Submitted
from schemas.rows import UsageEventRow
from schemas.settings import Settings
from stores.context import Context
from stores.retention import SWEEP_INTERVAL_S, sweep_once
from stores.transcripts import Transcripts
from topologies.graph import Node, worker_nodes
from topologies.tables import ACCOUNT_RECENT, ACCOUNTS, TableSpec
from topologies.topics import ADMISSIONS, CHANGELOG_CONFIG, DISPATCH, SETTLED, TopicSpec

from .account_tables import AccountTables
from .accounts import AccountState, Effects, apply
from .engines import Engines
from .faust_transport import WATCH_INTERVAL_S, App, PartitionWatch
from .log_trim import TRIM_INTERVAL_S, BatchLogTrim
from .reconcile import RECONCILE_INTERVAL_S, Reconciler
from .stages import Ports, Publish, fail
from .stages.decode import url_fetcher
from .stages.ports import Fetch
from .stages.publish import settle
from .webhooks import SCAN_INTERVAL_S, WebhookScheduler, WebhookSender

__all__ = ["create_app", "Pipeline", "resolve"]

log = logging.getLogger("a5s.pipeline")


def create_app(settings: Settings) -> faust.App:
    """Faust settings tuned for a small broker (group joins in seconds, not 30 s), and the
    consumer's partition watch: a timer of the transport, not a node of the dataflow."""
    app = App(
        settings.app_id, broker=f"kafka://{settings.bootstrap}", store="memory://",
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        broker_rebalance_timeout=4, broker_session_timeout=10, broker_heartbeat_interval=1,
        broker_max_poll_interval=3600, broker_commit_every=1, broker_commit_interval=1.0,
        consumer_auto_offset_reset="earliest", web_enabled=False, autodiscover=False,
        producer_acks=-1, table_standby_replicas=0, stream_wait_empty=False,
        key_serializer="raw", value_serializer="raw", logging_config=None)
    app.timer(WATCH_INTERVAL_S, name="a5s.partition-watch")(PartitionWatch(app).tick)
    return app


def resolve(dotted: str) -> Any:
    """The object a graph node names as its handler: ``module:attr.attr``."""
    module, _, path = dotted.partition(":")
    target: Any = importlib.import_module(module)
    for part in path.split("."):
        target = getattr(target, part)
    return target


def _is_new_job(old: AccountState, event: Any) -> bool:
    """A ``submitted`` event seen for the first time (not a replay)."""
    tid = getattr(event, "transcript_id", None)
    return (isinstance(event, Submitted) and tid not in old.queue
            and tid not in old.processing and not old.has_left(tid))


def _first_settled(old: AccountState, fx: Effects) -> set[str]:
    """Jobs whose outcome this event counts for the first time (a replay settles again)."""
    return {s.transcript_id for s in fx.settled if s.transcript_id in old.processing}


class OneAtATime:
    """Runs the records of one job through a node one after another.

    A node with several actors (``batched``, ``parallel``) could otherwise run a job's
    re-dispatched or replayed record beside its first one, both doing the model work; the
    second now waits, then finds the output stored and reuses it.
    """

    def __init__(self) -> None:
        self._held: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._held.get(key, (asyncio.Lock(), 0))
        self._held[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._held[key]
            if users == 1:
                del self._held[key]
            else:
                self._held[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._held)


class Pipeline:
    """Binds one process's ``Context`` and models to the nodes of ``topologies.GRAPH``."""

    def __init__(self, app: faust.App, ctx: Context, engines: Engines, *,
                 transcripts: Any = None, fetch: Fetch | None = None) -> None:
        """``transcripts`` and ``fetch`` replace the ClickHouse store and the ``audio_url``
        download (tests run the wiring on in-memory ones)."""
        self.app = app
        self.ctx = ctx
        self.settings = ctx.settings
        self.engines = engines
        self.transcripts = (transcripts if transcripts is not None
                            else Transcripts(ctx.ch, ctx.redis))
        self.fetch = fetch if fetch is not None else url_fetcher(ctx.settings)
        self._topics: dict[str, Any] = {}
        self.reconciler: Reconciler | None = None
        """Set when this process runs the reconcile node; told of each dispatch."""
        self.accounts = AccountTables(self._table(ACCOUNTS), self._table(ACCOUNT_RECENT))

    def _table(self, spec: TableSpec) -> Any:
        return self.app.Table(spec.name, default=None, key_type=str, value_type=bytes,
                              partitions=self.settings.partitions,
                              use_partitioner=spec.use_partitioner,
                              extra_topic_configs=CHANGELOG_CONFIG)

    def topic(self, spec: TopicSpec[Any]) -> Any:
        name = self.settings.topic_prefix + spec.name
        if name not in self._topics:
            self._topics[name] = self.app.topic(name, key_type=bytes, value_type=bytes,
                                                partitions=spec.partitions or
                                                self.settings.partitions)
        return self._topics[name]

    async def send(self, topic: str, key: bytes, value: bytes) -> None:
        """Every record of the worker goes out here, acknowledged before the source offset."""
        await self.app.producer.send_and_wait(topic, key, value, None, None, None)

    def publisher(self, item: Node) -> Publish:
        """``item``'s publish: refuses (``UndeclaredWrite``) a topic it does not declare."""

        async def publish(spec: TopicSpec[Any], key: str, value: Any) -> None:
            item.check_write(spec)
            await self.send(self.settings.topic_prefix + spec.name, key.encode(),
                            spec.encode(value))

        return publish

    def ports(self, item: Node) -> Ports:
        return Ports(objects=self.ctx.objects, transcripts=self.transcripts,
                     publish=self.publisher(item), flags=self.ctx.redis, models=self.engines,
                     settings=self.settings, fetch=self.fetch)

    def register(self, only: Collection[str] | None = None) -> list[str]:
        """Install every worker node of the graph (or those named in ``only``) by its handler;
        the names installed."""
        installed = []
        for item in worker_nodes():
            if only is not None and item.name not in only:
                continue
            handler = resolve(item.handler or "")
            if item.kind == "stage":
                self._stage(item, handler)
            else:
                handler(self, item)
            installed.append(item.name)
        return installed

    # --- service nodes (named as handlers in topologies.GRAPH) ----------------------------------

    def install_accounts(self, item: Node) -> None:
        self.accounts_node = item
        self.accounts_ports = self.ports(item)
        self._agent(item, self.on_account_event, retries=None)

    def install_reconcile(self, item: Node) -> None:
        self.reconciler = Reconciler(self.app, self.ctx, self.accounts, self.publisher(item))
        self.app.timer(RECONCILE_INTERVAL_S, name="a5s.reconcile")(self.reconciler.tick)

    def install_realtime(self, item: Node) -> None:
        """Live sessions: a task running the realtime agent's own low-latency consumer."""
        from .realtime.agent import RealtimeAgent

        async def send(spec: TopicSpec[Any], key: str, value: Any) -> Any:
            item.check_write(spec)
            return await self.ctx.producer.send(spec, key, value)

        self.realtime = RealtimeAgent(self.settings, send, self.ctx.metrics)

        async def realtime() -> None:
            await self.realtime.serve()

        self.app.task(realtime)

    def install_webhooks(self, item: Node) -> None:
        """The ``webhooks`` agent fills the delivery table; a timer delivers what is due."""
        self.webhooks = WebhookScheduler(
            self.app, self.ctx, WebhookSender(self.ctx, self.transcripts),
            topic=self.settings.topic_prefix + item.reads[0].name, metrics=self.ctx.metrics)
        self._agent(item, self.webhooks.on_due, retries=None)
        self.app.timer(SCAN_INTERVAL_S, name="a5s.webhooks-due")(self.webhooks.tick)

    def install_trim(self, item: Node) -> None:
        self.log_trim = BatchLogTrim(self.app, self.settings, item.trims)
        self.app.timer(TRIM_INTERVAL_S, name="a5s.log-trim")(self.log_trim.tick)

    def install_retention(self, item: Node) -> None:
        self.app.timer(SWEEP_INTERVAL_S, name="a5s.retention")(self.sweep)

    async def sweep(self) -> None:
        """The periodic retention sweep; a failure waits for the next interval."""
        try:
            await sweep_once(self.ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the timer must keep running; the next sweep redoes it
            log.warning("retention sweep failed: %r", exc, exc_info=True)

    # --- agents --------------------------------------------------------------------------------

    def _stage(self, item: Node, run: Callable[[Ports, Any], Awaitable[None]]) -> None:
        ports = self.ports(item)
        jobs = OneAtATime()

        async def handler(record: Any) -> None:
            async with jobs.hold(record.transcript_id):
                await run(ports, record)

        self._agent(item, handler, retries=None if item.retry_forever
                    else self.settings.stage_retries, ports=ports)

    def _agent(self, item: Node, handler: Callable[[Any], Awaitable[None]],
               retries: int | None, ports: Ports | None = None) -> None:
        spec = item.reads[0]
        # Several transcribe actors keep several jobs in flight, so their chunks can share
        # ASR batches (pipeline.asr.batching); decode, chunk and diarize take one record per
        # thread of the models pool; the other nodes one record at a time.
        concurrency = (self.settings.models.transcribe_concurrency if item.batched else
                       self.engines.layout.stage_workers if item.parallel else 1)
        publish = ports.publish if ports is not None else self.publisher(item)

        async def agent(stream: Any) -> None:
            async for raw in stream:
                record = spec.decode(raw)
                await self._run(item.name, handler, record, retries, publish)

        agent.__name__ = agent.__qualname__ = item.name
        self.app.agent(self.topic(spec), name=f"a5s.{item.name}", concurrency=concurrency)(agent)

    async def _run(self, name: str, handler: Callable[[Any], Awaitable[None]], record: Any,
                   retries: int | None, publish: Publish) -> None:
        started = time.perf_counter()
        try:
            await self._attempts(name, handler, record, retries, publish)
        finally:
            self.ctx.metrics.stage_duration.labels(name).observe(time.perf_counter() - started)

    async def _attempts(self, name: str, handler: Callable[[Any], Awaitable[None]], record: Any,
                        retries: int | None, publish: Publish) -> None:
        attempt = 0
        while True:
            try:
                await handler(record)
                return
            except JobFailed as exc:
                log.info("%s %s: %s", name, getattr(record, "transcript_id", "?"), exc)
                self.ctx.metrics.stage_failures.labels(name).inc()
                await fail(publish, record.account_id, record.transcript_id, exc.code,
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
                    await fail(publish, record.account_id, record.transcript_id,
                               JobErrorCode.internal_error,
                               "Processing failed after automatic retries; "
                               "resubmit the job.")
                    return
                await asyncio.sleep(min(30.0, 0.5 * 2 ** attempt))

    # --- accounts agent -----------------------------------------------------------------------

    async def on_account_event(self, event: Any) -> None:
        account_id = event.account_id
        state = self.accounts.state(account_id)
        now = datetime.now(UTC)
        new, fx = apply(state, event, now)
        # The ledger first: a client that sees a job completed also sees it counted.
        await self.ctx.redis.set_ledger(account_id, {
            "used": new.used, "reserved": new.reserved, "processing": len(new.processing),
            "queued": len(new.queue), "live": sorted(new.live)})
        if self.reconciler is not None:
            self.reconciler.held(account_id, bool(new.live))
        if _is_new_job(state, event):
            self.ctx.metrics.jobs.labels("queued").inc()
        await self._carry_out(account_id, fx, now, first=_first_settled(state, fx))
        self.accounts.put(account_id, new, fx.pages)

    async def _carry_out(self, account_id: str, fx: Effects, now: datetime,
                         first: Collection[str] = ()) -> None:
        """``first``: ids whose outcome this event counts for the first time (not a replay)."""
        for settled in fx.settled:  # before the freed slot goes to the next job
            row = await settle(self.accounts_ports, settled, now)
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
            await self.accounts_ports.publish(DISPATCH, job.transcript_id, job)
            if self.reconciler is not None:
                self.reconciler.dispatched(job.transcript_id)
        for verdict in fx.admissions:
            await self.accounts_ports.publish(ADMISSIONS, verdict.transcript_id, verdict)
        for closed in fx.sessions_closed:
            await self.transcripts.record_usage(UsageEventRow(
                event_id=closed.session_id, account_id=closed.account_id, key_id=closed.key_id,
                model=STREAMING_MODEL, kind="stream", at=closed.at,
                audio_seconds=closed.billed_ms / 1000))
        for settled in fx.settled:
            await self.accounts_ports.publish(SETTLED, settled.transcript_id, settled)
