"""Deleting the batch path's records once the workers have read them.

The embedded broker (noida-db) keeps its whole log in memory and writes all of it to
disk every few seconds, so its CPU grows with what the log holds, not with the traffic
(docs/realtime.md, "The broker's CPU"). The batch topics kept their records for their
whole retention (7 days, some 10 KB a job): a service that had run a few thousand jobs
paid for them on every save. Once the workers' consumer group has committed a record,
nothing reads it again: a crash replays from the committed offset, the tables recover
from their changelogs, and the reconciler reads ClickHouse. So every ``TRIM_INTERVAL_S``
the worker deletes, in the partitions it holds, what its group had committed
``log_keep_s`` before. ``transcripts.completed`` is public (data engineers read it at
their pace) and the changelogs are compacted: neither is trimmed; nor are the live
topics, which the realtime agent trims itself (``pipeline.realtime.trim``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Collection, Mapping
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from schemas.settings import Settings
from stores.kafka import delete_before
from topologies.topics import TopicSpec

from .faust_transport import settled
from .realtime.trim import LogTrim

__all__ = ["BatchLogTrim", "consumed", "TRIM_INTERVAL_S"]

log = logging.getLogger("a5s.pipeline")

TRIM_INTERVAL_S = 10.0


def consumed(committed: Mapping[TopicPartition, Any], topics: Collection[str],
             held: Collection[TopicPartition]) -> dict[TopicPartition, int]:
    """The group's committed offsets (``OffsetAndMetadata``) of the partitions of ``topics``
    this worker holds; a partition with nothing committed is left out."""
    return {tp: meta.offset for tp, meta in committed.items()
            if tp.topic in topics and tp in held and meta.offset > 0}


class BatchLogTrim:
    """The worker's timer: deletes what its group committed ``log_keep_s`` ago from
    ``topics`` (the ``trim`` node's, ``topologies.graph``)."""

    def __init__(self, app: Any, settings: Settings, topics: Collection[TopicSpec[Any]]
                 ) -> None:
        self.app = app
        self.settings = settings
        self.topics = frozenset(settings.topic_prefix + t.name for t in topics)
        self.trim = LogTrim(settings.log_keep_s)

    async def tick(self) -> dict[TopicPartition, int]:
        """One pass; the offsets records were deleted before (none while a rebalance or a
        recovery is under way, when the assignment says nothing yet)."""
        if self.settings.log_keep_s <= 0 or not settled(self.app):
            return {}
        admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.bootstrap,
                                    request_timeout_ms=10_000)
        try:
            await admin.start()
            committed = await admin.list_consumer_group_offsets(self.app.conf.id)
            now = time.monotonic()
            self.trim.observe(now, consumed(committed, self.topics,
                                            set(self.app.consumer.assignment())))
            points = self.trim.points(now, {})
            await delete_before(admin, points)
            return points
        except Exception as exc:  # retention bounds the log meanwhile; the next pass retries
            log.info("trimming the batch topics failed: %r", exc)
            return {}
        finally:
            with contextlib.suppress(Exception):
                await admin.close()
