"""The batch topics are trimmed behind the workers' commits, on the embedded broker.

Runs its own stack with ``log_keep_s`` at 1 s, so the worker's timer (every 10 s) deletes
what its group committed a second before; the jobs fail at once (an unreachable
``audio_url``), which takes them through account-events, dispatch, outcomes and settled
without the models.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from ops.stack import Stack, free_port
from schemas.settings import Settings
from stores.kafka import keep_newest
from topologies.graph import node
from topologies.topics import COMPLETED

pytestmark = pytest.mark.stack

TRIMMED = {"a5s." + t.name for t in node("trim").trims}


@pytest.fixture(scope="module")
def trimming(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("log-trim") / "data", env={"A5S_LOG_KEEP_S": "1"})
    s.data_dir.mkdir(parents=True)
    s.start()
    yield s
    s.stop()


async def _offsets(stack: Stack) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int],
                                          dict[TopicPartition, int]]:
    """Log starts and ends of every partition of the pipeline's topics, and the workers'
    group's committed offsets."""
    bootstrap = f"127.0.0.1:{stack.env['A5S_EMBEDDED__KAFKA']}"
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await consumer.start()
    await admin.start()
    try:
        topics = TRIMMED | {"a5s." + COMPLETED.name}
        parts = [TopicPartition(t, p) for t in topics
                 for p in consumer.partitions_for_topic(t) or ()]
        starts = await consumer.beginning_offsets(parts)
        ends = await consumer.end_offsets(parts)
        committed = {tp: meta.offset
                     for tp, meta in (await admin.list_consumer_group_offsets("a5s")).items()}
        return starts, ends, committed
    finally:
        await consumer.stop()
        await admin.close()


def _fail_jobs(stack: Stack, key: str, n: int) -> None:
    dead = f"http://127.0.0.1:{free_port()}/nothing.wav"
    with stack.client(key) as client:
        ids = [client.post("/v1/transcripts", json={"audio_url": dead}).json()["id"]
               for _ in range(n)]
        for tid in ids:
            assert stack.wait_transcript(client, tid, timeout_s=120)["status"] == "error"


def test_what_the_workers_committed_is_deleted_and_the_service_goes_on(trimming: Stack) -> None:
    _, key = trimming.new_account()
    _fail_jobs(trimming, key, 6)
    deadline = time.monotonic() + 90
    while True:
        starts, ends, committed = asyncio.run(_offsets(trimming))
        trimmed = {tp.topic for tp, start in starts.items() if start > 0}
        if {"a5s.account-events", "a5s.dispatch", "a5s.settled"} <= trimmed:
            break
        assert time.monotonic() < deadline, (starts, committed)
        time.sleep(2)
    for tp, start in starts.items():
        if tp.topic in TRIMMED:
            assert start <= committed.get(tp, 0), f"{tp}: deleted past the group's commit"
        else:  # transcripts.completed is public: kept for its retention
            assert start == 0 and ends[tp] >= 0, tp
    assert sum(ends[tp] for tp in ends if tp.topic == "a5s." + COMPLETED.name) >= 6

    # The workers read on from their commits, and so does a restarted worker.
    _fail_jobs(trimming, key, 2)
    trimming.restart_service()
    _fail_jobs(trimming, key, 2)


def test_the_public_topic_keeps_its_newest_records_up_to_the_bound(trimming: Stack) -> None:
    """``transcripts.completed`` is not trimmed behind commits, but the retention sweep keeps
    at most ``completed_keep_records`` a partition of it (the embedded broker holds its log
    in memory): the oldest go, the newest stay, and a second pass deletes nothing."""
    _, key = trimming.new_account()
    _fail_jobs(trimming, key, 8)
    settings = Settings(kafka_bootstrap=f"127.0.0.1:{trimming.env['A5S_EMBEDDED__KAFKA']}")
    completed = "a5s." + COMPLETED.name
    starts, ends, _ = asyncio.run(_offsets(trimming))
    held = {tp: ends[tp] - starts[tp] for tp in ends if tp.topic == completed}
    assert sum(held.values()) >= 8 and max(held.values()) >= 2, held

    deleted = asyncio.run(keep_newest(settings, COMPLETED, 1))
    assert deleted == sum(n - 1 for n in held.values() if n > 1), (deleted, held)
    after, ends_after, _ = asyncio.run(_offsets(trimming))
    for tp, n in held.items():
        assert ends_after[tp] == ends[tp], tp  # nothing new was written, nothing lost at the end
        assert ends_after[tp] - after[tp] == min(n, 1), (tp, after[tp], ends_after[tp])
    assert asyncio.run(keep_newest(settings, COMPLETED, 1)) == 0
