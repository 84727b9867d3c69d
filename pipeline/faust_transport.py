"""Faust's aiokafka transport, with one fix: a partition never committed is read from its start.

After each rebalance Faust recovers its tables, then seeks every stream partition to
its committed offset (``Consumer.perform_seek``). Records the consumer fetched while
the tables were recovering are dropped, and aiokafka's ``seek_to_committed`` leaves a
partition without a committed offset where the fetcher got to. So a record in such a
partition (a fresh deployment's first jobs, or any partition no job had finished in
yet) was skipped for good when the process restarted: at-least-once became
at-most-once. Seeking those partitions to their beginning is what the
``earliest`` offset reset promises; every stage is idempotent, so a replay is harmless.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

__all__ = ["App"]


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
