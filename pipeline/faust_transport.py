"""Faust's aiokafka transport, with two fixes: records are never left unread for good.

A partition never committed is read from its start. After each rebalance Faust recovers its tables, then seeks every stream partition to
its committed offset (``Consumer.perform_seek``). Records the consumer fetched while
the tables were recovering are dropped, and aiokafka's ``seek_to_committed`` leaves a
partition without a committed offset where the fetcher got to. So a record in such a
partition (a fresh deployment's first jobs, or any partition no job had finished in
yet) was skipped for good when the process restarted: at-least-once became
at-most-once. Seeking those partitions to their beginning is what the
``earliest`` offset reset promises; every stage is idempotent, so a replay is harmless.

A partition whose records sit unread past its commit is sought back to it
(``PartitionWatch``, a timer ``pipeline.app.create_app`` installs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

__all__ = ["App", "settled", "PartitionWatch", "Lag", "stalled", "WATCH_INTERVAL_S", "STALL_AFTER_S"]

log = logging.getLogger("a5s.pipeline")


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed = await super().seek_to_committed()
        fresh = [tp for tp, offset in committed.items() if not offset]
        if fresh:
            await self.call_thread(self._ensure_consumer().seek_to_beginning, *fresh)
        return committed


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer


class App(faust.App):
    """``faust.App`` whose consumer reads never-committed partitions from the start."""

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)


def settled(app: Any) -> bool:
    """No rebalance or table recovery under way: the tables and positions are whole. (Read
    with defaults, so stand-in apps in tests need only what they model.)"""
    recovery = getattr(getattr(app, "tables", None), "recovery", None)
    return (not getattr(app, "rebalancing", False) and not getattr(app, "in_recovery", False)
            and recovery is not None and recovery.completed.is_set())


# --- partitions whose records sit unread --------------------------------------------------------

WATCH_INTERVAL_S = 5.0
STALL_AFTER_S = 20.0
"""How long a partition may hold records past its commit with none of them in this process
before the watch seeks it back. Any record the consumer holds counts as in flight (buffered
for an agent, being processed, acknowledged but not yet committed), so a busy stage never
trips it; commits go out every second."""


@dataclass(frozen=True)
class Lag:
    """A stream partition as the watch saw it."""

    committed: int
    """The next offset the group would read (its commit, or the log start if none)."""
    end: int
    """The log end offset."""
    in_flight: bool
    """Some record of it is held in this process: buffered, processing or not committed."""


def stalled(seen: Mapping[TP, Lag], marks: Mapping[TP, tuple[int, float]], now: float,
            after_s: float = STALL_AFTER_S) -> tuple[list[TP], dict[TP, tuple[int, float]]]:
    """The partitions behind their log end with nothing in flight for ``after_s`` at one
    commit, and the marks to keep: partition -> (commit, first seen so) for each that is
    behind and idle now."""
    stuck, kept = [], {}
    for tp, lag in seen.items():
        if lag.end <= lag.committed or lag.in_flight:
            continue
        mark = marks.get(tp)
        if mark is None or mark[0] != lag.committed:
            mark = (lag.committed, now)
        kept[tp] = mark
        if now - mark[1] >= after_s:
            stuck.append(tp)
    return stuck, kept


class PartitionWatch:
    """Seeks back a stream partition whose records the consumer stopped delivering.

    Faust drops records it fetched around a rebalance and relies on the seek to the
    committed offsets that follows; a group settling after a broker restart was seen to
    leave a ``dispatch`` record in the log, past the group's commit, that the worker never
    delivered and never fetched again (the job waited forever). Whatever the cause, the sign
    is the same and cheap to read: records past the commit, none of them in this process,
    for ``STALL_AFTER_S``. Seeking to the commit replays only unfinished records, and every
    stage is idempotent.
    """

    def __init__(self, app: faust.App, after_s: float = STALL_AFTER_S) -> None:
        self.app = app
        self.after_s = after_s
        self.marks: dict[TP, tuple[int, float]] = {}
        self.sought = 0
        """Seeks made so far (each logged as a warning)."""

    async def tick(self) -> None:
        try:
            await self.check(time.monotonic())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the timer must keep running; the next tick redoes it
            log.warning("partition watch failed: %r", exc)

    async def check(self, now: float) -> list[TP]:
        app, consumer = self.app, self.app.consumer
        if not settled(app):
            self.marks.clear()  # positions are being set right now
            return []
        changelogs = app.tables.changelog_topics
        tps = [tp for tp in consumer.assignment()
               if tp.topic not in changelogs and app.topics.acks_enabled_for(tp.topic)]
        if not tps:
            self.marks.clear()
            return []
        ends = await consumer.highwaters(*tps)
        held = {m.tp for m in list(consumer._unacked_messages) if not m.acked}
        held.update(tp for tp, acked in consumer._acked.items() if acked)
        committed = {tp: consumer._committed_offset.get(tp) for tp in tps}
        never = [tp for tp, offset in committed.items() if offset is None]
        starts = await consumer.earliest_offsets(*never) if never else {}
        seen = {tp: Lag(committed=committed[tp] if committed[tp] is not None
                        else starts.get(tp, 0), end=ends.get(tp, 0), in_flight=tp in held)
                for tp in tps}
        stuck, self.marks = stalled(seen, self.marks, now, self.after_s)
        for tp in stuck:
            lag = seen[tp]
            log.warning("%s[%d]: %d record(s) past offset %d sat unread for %.0f s; "
                        "seeking back to %d", tp.topic, tp.partition, lag.end - lag.committed,
                        lag.committed, now - self.marks[tp][1], lag.committed)
            if tp in consumer._paused_partitions:
                consumer.resume_partitions({tp})
            await consumer.seek_wait({tp: lag.committed})
            self.marks.pop(tp)
            self.sought += 1
        return stuck
