"""The gateway's end of the realtime audio path: audio out to Kafka, transcripts back in.

One :class:`RealtimeHub` per gateway process. Audio records go to ``realtime-audio``
keyed by session (so one worker holds the session); the worker's messages come back on
``realtime-messages``, which this hub reads with a plain aiokafka consumer on every
partition (manual assignment, no consumer group: each gateway replica sees every
message and keeps those of its own sessions). Records are small and few, so reading
all of them costs little, and no rebalance ever delays a live session.

The consumer starts at the end of each partition when the first session opens, with a
fetch wait of ``realtime.fetch_max_wait_ms`` (aiokafka's 500 ms default is for
throughput, not speech).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.records import RealtimeAudio, RealtimeMessage
from stores.context import Context
from stores.kafka import LIVE_CLIENT, map_kafka_errors, topic_name
from topologies.topics import REALTIME_AUDIO, REALTIME_MESSAGES

from .base import publish, publish_nowait

__all__ = ["RealtimeHub", "hub_for"]

log = logging.getLogger("a5s.gateway.realtime")

Route = Callable[[RealtimeMessage], None]


class RealtimeHub:
    """Routes worker messages to the live sessions of this gateway, by session id."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.gateway_id = "gw_" + secrets.token_hex(6)
        self._routes: dict[str, Route] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @property
    def sessions(self) -> int:
        return len(self._routes)

    async def start(self) -> None:
        """Start reading ``realtime-messages`` (once; a no-op when running)."""
        async with self._lock:
            if self._task is not None and not self._task.done():
                return
            s = self.ctx.settings
            topic = topic_name(s, REALTIME_MESSAGES)
            consumer = AIOKafkaConsumer(
                bootstrap_servers=s.bootstrap, group_id=None, enable_auto_commit=False,
                client_id=f"{s.app_id}{LIVE_CLIENT}-{self.gateway_id}", auto_offset_reset="latest",
                fetch_max_wait_ms=s.realtime.fetch_max_wait_ms, request_timeout_ms=15_000)
            async with map_kafka_errors():
                await consumer.start()
                try:
                    partitions = consumer.partitions_for_topic(topic)
                    if not partitions:
                        await consumer.topics()  # a metadata refresh
                        partitions = consumer.partitions_for_topic(topic) or {0}
                    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
                    consumer.assign(tps)
                    await consumer.seek_to_end(*tps)
                    for tp in tps:  # resolve the end now: later messages must not be skipped
                        await consumer.position(tp)
                except BaseException:
                    with contextlib.suppress(Exception):
                        await consumer.stop()
                    raise
            self._consumer = consumer
            self._task = asyncio.create_task(self._read(consumer), name="a5s-realtime-hub")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()

    def attach(self, session_id: str, route: Route) -> None:
        self._routes[session_id] = route

    def detach(self, session_id: str) -> None:
        self._routes.pop(session_id, None)

    async def send(self, record: RealtimeAudio) -> int:
        """Publish one audio record (acknowledged by the broker before returning).

        Returns:
            its offset in the partition (the session's records share one).
        """
        return await publish(self.ctx, REALTIME_AUDIO, record.session_id, record)

    async def enqueue(self, record: RealtimeAudio) -> asyncio.Future[int]:
        """Publish one audio record without waiting for the broker: the future gives its
        offset. A session's records keep their order (one key, one partition)."""
        return await publish_nowait(self.ctx, REALTIME_AUDIO, record.session_id, record)

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            try:
                batches = await consumer.getmany(timeout_ms=1000, max_records=1000)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # sessions notice the silence through their stall check
                log.warning("realtime: reading worker messages failed: %r", exc)
                await asyncio.sleep(1.0)
                continue
            for records in batches.values():
                for record in records:
                    self._deliver(record.value)

    def _deliver(self, raw: bytes) -> None:
        try:
            message = REALTIME_MESSAGES.decode(raw)
        except ValueError:
            log.warning("realtime: undecodable worker message dropped")
            return
        route = self._routes.get(message.session_id)
        if route is not None:
            try:
                route(message)
            except Exception:  # one session's failure must not stop the others' messages
                log.exception("realtime: delivering a message to %s failed", message.session_id)


def hub_for(ctx: Context) -> RealtimeHub:
    """The process's hub (one per ``Context``, created on first use)."""
    hub = ctx.extras.get("realtime_hub")
    if not isinstance(hub, RealtimeHub):
        hub = ctx.extras["realtime_hub"] = RealtimeHub(ctx)
    return hub
