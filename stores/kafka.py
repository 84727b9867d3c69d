"""Kafka plumbing outside Faust: explicit topic creation and the gateway's producer.

Topics are created from ``topologies.TOPICS`` at start-up, never by broker
auto-creation (a broker that auto-creates picks its own partition count, which
then clashes with the changelog topics Faust creates).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError

from schemas.errors import UpstreamTimeout, UpstreamUnavailable
from schemas.settings import Settings
from topologies.tables import TABLES
from topologies.topics import CHANGELOG_CONFIG, TOPICS, TopicSpec

__all__ = ["ensure_topics", "changelog_names", "topic_configs", "Producer", "map_kafka_errors",
           "topic_name", "pace_empty_fetches", "LIVE_CLIENT", "keep_newest", "surplus", "delete_before"]

log = logging.getLogger(__name__)


def topic_name(settings: Settings, spec: TopicSpec[Any]) -> str:
    return settings.topic_prefix + spec.name


@contextlib.asynccontextmanager
async def map_kafka_errors() -> AsyncIterator[None]:
    try:
        yield
    except (KafkaTimeoutError, asyncio.TimeoutError) as exc:
        raise UpstreamTimeout(log=f"kafka: {exc!r}") from exc
    except KafkaError as exc:
        raise UpstreamUnavailable(log=f"kafka: {exc!r}") from exc


def changelog_names(settings: Settings) -> list[str]:
    """The changelog topics Faust creates for the tables ``topologies`` declares."""
    return [f"{settings.app_id}-{table.name}-changelog" for table in TABLES]


async def topic_configs(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    """Each named topic's settings, defaults included, as the broker reports them."""
    described = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name) for name in names])
    return {name: {entry[0]: entry[1] for entry in entries}
            for response in described for _, _, _, name, entries in response.resources}


async def _update_changelogs(admin: AIOKafkaAdminClient, names: list[str]) -> list[str]:
    """Give changelogs made before ``CHANGELOG_CONFIG`` its settings; returns those changed.

    Faust creates a missing changelog with the settings but leaves an existing one as it
    is. AlterConfigs replaces a topic's whole set, so the set is Faust's own (compacted,
    no retention: the tables are not windowed) plus ``CHANGELOG_CONFIG``.
    """
    if not names:
        return []
    stale = [name for name, current in (await topic_configs(admin, names)).items()
             if any(current.get(k) != v for k, v in CHANGELOG_CONFIG.items())]
    if not stale:
        return []
    altered = await admin.alter_configs([
        ConfigResource(ConfigResourceType.TOPIC, name,
                       configs={"cleanup.policy": "compact", **CHANGELOG_CONFIG})
        for name in stale])
    refused = {name: message for response in altered
               for code, message, _, name in response.resources if code}
    if refused:  # e.g. no ALTER_CONFIGS permission on a managed cluster
        log.warning("kafka: changelog settings not updated: %s", refused)
    updated = [name for name in stale if name not in refused]
    if updated:
        log.info("kafka: changelog settings updated on %s", updated)
    return updated


async def ensure_topics(settings: Settings, attempts: int = 30) -> list[str]:
    """Create every declared topic that does not exist yet; returns the names created.

    Table changelogs that already exist get ``CHANGELOG_CONFIG`` (Faust creates the
    missing ones itself).
    """
    for attempt in range(attempts):
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap,
                                    request_timeout_ms=10_000)
        try:
            await admin.start()
            existing = set(await admin.list_topics())
            wanted = [NewTopic(topic_name(settings, s), s.partitions or settings.partitions,
                               settings.replication_factor, topic_configs=s.config())
                      for s in TOPICS if topic_name(settings, s) not in existing]
            if wanted:
                try:
                    await admin.create_topics(wanted)
                except TopicAlreadyExistsError:
                    pass
                log.info("kafka: created topics %s", [t.name for t in wanted])
            try:
                await _update_changelogs(admin, [n for n in changelog_names(settings)
                                                 if n in existing])
            except KafkaError as exc:  # the old settings work; only compaction waits
                log.warning("kafka: could not update changelog settings: %r", exc)
            return [t.name for t in wanted]
        except KafkaError as exc:
            if attempt == attempts - 1:
                raise UpstreamUnavailable(log=f"kafka: cannot create topics: {exc!r}") from exc
            await asyncio.sleep(1)
        finally:
            with contextlib.suppress(Exception):
                await admin.close()
    return []


async def delete_before(admin: AIOKafkaAdminClient, points: dict[TopicPartition, int]) -> None:
    """Delete each partition's records before its offset in ``points`` (none: no request)."""
    if points:
        await admin.delete_records({tp: RecordsToDelete(offset) for tp, offset in points.items()})


def surplus(starts: dict[TopicPartition, int], ends: dict[TopicPartition, int],
            keep: int) -> dict[TopicPartition, int]:
    """Where each partition that holds more than ``keep`` records must start to hold
    ``keep`` (partitions already within it are left out)."""
    return {tp: end - keep for tp, end in ends.items() if end - starts.get(tp, 0) > keep}


async def keep_newest(settings: Settings, spec: TopicSpec[Any], keep: int) -> int:
    """Delete all but the newest ``keep`` records of each partition of ``spec``; returns
    how many were deleted.

    A bound by count beside the topic's ``retention.ms``: the embedded broker holds its
    whole log in memory and rewrites it to disk every few seconds, so a topic kept for
    30 days grows it for 30 days (docs/operations.md, "Over days").
    """
    name = topic_name(settings, spec)
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap,
                                request_timeout_ms=10_000)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap,
                                request_timeout_ms=10_000)
    try:
        async with map_kafka_errors():
            await consumer.start()
            await admin.start()
            await consumer.topics()  # the cluster's metadata, this topic's partitions in it
            parts = [TopicPartition(name, p) for p in consumer.partitions_for_topic(name) or ()]
            if not parts:
                return 0
            starts = await consumer.beginning_offsets(parts)
            points = surplus(starts, await consumer.end_offsets(parts), keep)
            await delete_before(admin, points)
            return sum(offset - starts[tp] for tp, offset in points.items())
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()
        with contextlib.suppress(Exception):
            await admin.close()


class Producer:
    """Typed sends: the topic's schema encodes the value, the key is a plain string."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=self.settings.bootstrap, acks="all",
                                          linger_ms=2, request_timeout_ms=15_000,
                                          enable_idempotence=False)
        async with map_kafka_errors():
            await self._producer.start()

    async def stop(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()

    async def ping(self) -> float:
        started = time.perf_counter()
        if self._producer is None or not await self._producer.client.force_metadata_update():
            raise UpstreamUnavailable(log="kafka: metadata refresh failed")
        return (time.perf_counter() - started) * 1000

    async def enqueue(self, spec: TopicSpec[Any], key: str, value: Any) -> asyncio.Future[int]:
        """Hand a record to the producer without waiting for the broker; the returned
        future gives its offset once acknowledged. Records of one key keep their order:
        the producer has one request per partition in flight and retries a failed one
        before the records behind it."""
        if self._producer is None:
            raise UpstreamUnavailable(log="kafka: producer not started")
        async with map_kafka_errors():
            delivery = await self._producer.send(topic_name(self.settings, spec),
                                                 spec.encode(value), key=key.encode())
        ack = asyncio.ensure_future(self._acknowledged(delivery))
        ack.add_done_callback(lambda f: f.cancelled() or f.exception())  # read, never logged
        return ack

    @staticmethod
    async def _acknowledged(delivery: asyncio.Future[Any]) -> int:
        async with map_kafka_errors():
            return int((await asyncio.wait_for(delivery, timeout=15)).offset)

    async def send(self, spec: TopicSpec[Any], key: str, value: Any) -> int:
        """Publish and wait for the broker's acknowledgement; returns the record's offset."""
        if self._producer is None:
            raise UpstreamUnavailable(log="kafka: producer not started")
        async with map_kafka_errors():
            meta = await asyncio.wait_for(
                self._producer.send_and_wait(topic_name(self.settings, spec), spec.encode(value),
                                             key=key.encode()), timeout=15)
        return int(meta.offset)


LIVE_CLIENT = "-realtime"
"""Consumers whose client id contains this carry live audio and transcripts (the realtime
agent's and the gateway's): :func:`pace_empty_fetches` polls for them sooner while records
flow."""


def _pause(live: bool, quiet_s: float, pause_s: float, live_pause_s: float,
           live_busy_s: float, live_idle_s: float, live_idle_pause_s: float
           ) -> tuple[float, bool]:
    """How long a consumer pauses after an empty fetch, ``quiet_s`` after its last record,
    and whether a record produced in this process wakes it. Only a live consumer that is
    woken has its pause not capped by its fetch wait (10 ms while records flow)."""
    if not live:
        return pause_s, True
    if quiet_s < live_busy_s:
        return live_pause_s, True
    if quiet_s < live_idle_s:
        return pause_s, False
    return live_idle_pause_s, True


CAUGHT_UP_RECORDS = 32
"""A fetch that left each of its partitions at most this many records short of its high
watermark brought all they held (a fetch takes up to 1 MiB a partition; the pipeline's
records are well under 32 KiB)."""


def caught_up(assignment: Any, request: Any) -> bool:
    """Every partition of a fetch ``request`` was at most :data:`CAUGHT_UP_RECORDS` short of
    its high watermark (as the answer told it) when the fetch went out."""
    for topic, partitions in request.topics:
        for partition, offset, *_ in partitions:
            state = assignment.state_value(TopicPartition(topic, partition))
            highwater = state.highwater if state is not None else None
            if highwater is not None and highwater - offset > CAUGHT_UP_RECORDS:
                return False
    return True


class _Wakeups:
    """Consumers of this process paused after an empty fetch, woken as soon as one of this
    process's producers has a record acknowledged on a partition they fetch.

    Faust's consumer runs its own event loop on a thread of its own, so a waiter is woken
    through its loop (``call_soon_threadsafe``) and the state is guarded by a lock. A record
    acknowledged while the fetch was on its way back is caught by its time: there is then
    no pause at all.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._produced_at: dict[tuple[str, int], float] = {}
        self._waiting: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None],
                                 frozenset[tuple[str, int]]]] = set()

    async def pause(self, seconds: float, partitions: frozenset[tuple[str, int]],
                    since: float) -> None:
        """Sleep ``seconds``, less if a record was produced here on one of ``partitions``
        after ``since`` (``time.monotonic``) or is while it sleeps."""
        loop = asyncio.get_running_loop()
        entry = (loop, loop.create_future(), partitions)
        with self._lock:
            if any(self._produced_at.get(tp, -math.inf) >= since for tp in partitions):
                return
            self._waiting.add(entry)
        try:
            await asyncio.wait((entry[1],), timeout=seconds)
        finally:
            with self._lock:
                self._waiting.discard(entry)

    def produced(self, topic: str, partition: int) -> None:
        with self._lock:
            self._produced_at[(topic, partition)] = time.monotonic()
            woken = [(loop, fut) for loop, fut, partitions in self._waiting
                     if (topic, partition) in partitions]
        for loop, fut in woken:
            with contextlib.suppress(RuntimeError):  # its loop has closed
                loop.call_soon_threadsafe(_wake, fut)

    def delivered(self, fut: asyncio.Future[Any]) -> None:
        """Done-callback of a producer's delivery future."""
        if not fut.cancelled() and fut.exception() is None:
            meta = fut.result()
            self.produced(meta.topic, meta.partition)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


_WAKEUPS = _Wakeups()


def pace_empty_fetches(pause_s: float = 0.25, live_pause_s: float = 0.01,
                       live_busy_s: float = 2.0, live_idle_s: float = 30.0,
                       live_idle_pause_s: float = 0.5) -> None:
    """Make aiokafka consumers pause after a fetch that brought nothing, until a record
    is produced for them.

    A Kafka broker holds an empty fetch for up to ``fetch.max.wait.ms``; the embedded
    broker answers at once, so every idle consumer (Faust's, the realtime ones) would
    spin, measured at about 70% of a core for an idle service. So a consumer pauses after
    an empty answer, and this process's producers wake it (:class:`_Wakeups`) as soon as
    the broker has acknowledged a record on a partition it fetches: in the embedded stack
    the gateway and the agents that write a topic share a process with the agent that reads
    it, and a hop costs no pause. ``pause_s`` bounds what a record written by another
    process (an extra worker, a client) waits. With a 50 ms pause and no wake-up, a lone
    2.9 s job took 0.73 s from submission to completion and an idle service used 57 ms of
    CPU a second; woken, with 250 ms, 0.46 s and 33 ms (``python -m bench.lone``).

    A woken consumer pauses alike after a fetch that brought records and left it caught up
    (:func:`caught_up`), once it has handed them over: otherwise each record of a job's
    hop cost a second fetch, of every partition it holds, which came back empty. The next
    record produced here wakes it, as after an empty fetch.

    A live consumer (:data:`LIVE_CLIENT`) that received a record in the last
    ``live_busy_s`` pauses at most ``live_pause_s``: with 50 ms, each of the two hops of
    live audio and transcripts waited 37-44 ms (median) under load, 17-19 ms with 10 ms.
    A record produced in this process (the gateway's audio, the worker's transcripts, in
    the embedded default) wakes it within that pause: with 5 live sessions the final p50
    fell from 0.260 to 0.247 s at the same CPU (medians of alternating runs,
    docs/realtime.md, "Live consumers woken by their own process"). Waking them was
    first measured with 60 ms audio records and a 50 ms pause, and cost more than it
    saved.
    One that received nothing for ``live_idle_s`` (no live session on this worker or
    gateway) pauses ``live_idle_pause_s`` and is woken like the others: the first record
    of a session produced in this process (the embedded default) comes at once, one
    produced by another process (an extra worker) waits at most that. At its 100 ms fetch
    wait, each of the two idle live consumers built, sent and parsed ten fetches a second
    on the event loop through a whole batch workload. The fetch wait caps every other
    pause.
    """
    from aiokafka.consumer import consumer as consumer_module
    from aiokafka.consumer.fetcher import Fetcher

    if getattr(consumer_module.Fetcher, "paced", False):
        return

    class PacedFetcher(Fetcher):
        paced = True

        def __init__(self, client: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(client, *args, **kwargs)
            self._live = LIVE_CLIENT in str(getattr(client, "_client_id", ""))
            self._records_at = -math.inf

        async def _proc_fetch_request(self, assignment: Any, node_id: Any,
                                      request: Any) -> bool:
            started = time.monotonic()
            got = await super()._proc_fetch_request(assignment, node_id, request)
            if got:
                self._records_at = started
                if self._live or not caught_up(assignment, request):
                    return True  # fetch again at once: more is waiting, or live audio flows
                # aiokafka hands records over when this task ends: hand them over now,
                # then pause as after an empty fetch.
                for waiter in self._fetch_waiters:
                    self._notify(waiter)
            wait, wakeable = _pause(self._live, started - self._records_at, pause_s,
                                    live_pause_s, live_busy_s, live_idle_s,
                                    live_idle_pause_s)
            if not (self._live and wakeable):
                wait = min(wait, self._fetch_max_wait_ms / 1000)
            remaining = wait - (time.monotonic() - started)
            if remaining > 0:
                # Cancelled here by ``Fetcher.close``, which awaits this task: end as
                # aiokafka's own fetch does when cancelled, or the consumer thread dies
                # with CancelledError and the worker's stop waits for it.
                try:
                    if not wakeable:
                        await asyncio.sleep(remaining)
                    else:
                        await _WAKEUPS.pause(remaining, frozenset(
                            (topic, p[0]) for topic, parts in request.topics
                            for p in parts), since=started)
                except asyncio.CancelledError:
                    return got
            return got

    send = AIOKafkaProducer.send

    async def send_and_wake(self: AIOKafkaProducer, topic: str, *args: Any, **kwargs: Any) -> Any:
        delivered = await send(self, topic, *args, **kwargs)
        delivered.add_done_callback(_WAKEUPS.delivered)
        return delivered

    consumer_module.Fetcher = PacedFetcher  # type: ignore[misc]
    AIOKafkaProducer.send = send_and_wake  # type: ignore[method-assign]

