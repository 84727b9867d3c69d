"""The partition watch on a real Faust worker and the embedded broker.

A record the consumer never delivers is made the way it was seen after a broker restart:
the record is in the log past the group's commit while the consumer's position has moved on
(here: a seek past it while the partition was paused). The watch must find it and seek
back; a record that is merely slow to process must not be read twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
from faust.types import TP

from ops.embedded import EmbeddedStack
from ops.stack import free_port
from pipeline.faust_transport import App, PartitionWatch
from schemas.settings import EmbeddedPorts, Settings

pytestmark = [pytest.mark.stack, pytest.mark.timeout(180)]

AFTER_S = 2.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("watch") / "data",
                        embedded=EmbeddedPorts(kafka=free_port(), redis=free_port()))
    stack = EmbeddedStack(settings)
    stack.start()
    yield settings
    stack.stop()


async def _until(check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def _run(settings: Settings, app_id: str, slow_s: float) -> tuple[list[bytes], int]:
    """One worker, one topic of one partition: what the agent saw, and the watch's seeks."""
    app = App(app_id, broker=f"kafka://{settings.bootstrap}", store="memory://",
              topic_partitions=1, broker_commit_every=1, broker_commit_interval=1.0,
              broker_rebalance_timeout=4, broker_session_timeout=10,
              broker_heartbeat_interval=1, consumer_auto_offset_reset="earliest",
              web_enabled=False, autodiscover=False, key_serializer="raw",
              value_serializer="raw", logging_config=None)
    topic = app.topic(f"{app_id}.records", partitions=1, key_type=bytes, value_type=bytes)
    seen: list[bytes] = []

    @app.agent(topic)
    async def read(stream: object) -> None:
        async for value in stream:  # type: ignore[attr-defined]
            if value == b"slow":
                await asyncio.sleep(slow_s)
            seen.append(value)

    watch = PartitionWatch(app, after_s=AFTER_S)
    await app.start()
    try:
        tp = TP(topic.get_topic_name(), 0)
        await topic.send(key=b"k", value=b"first")
        await _until(lambda: seen == [b"first"], 60)
        if slow_s:
            await topic.send(key=b"k", value=b"slow")
            started = time.monotonic()
            while b"slow" not in seen:  # checked all along while the agent is at work
                await watch.check(time.monotonic())
                assert time.monotonic() - started < slow_s + 30
                await asyncio.sleep(0.2)
            for _ in range(int(AFTER_S / 0.2) + 10):  # and after it finished
                await watch.check(time.monotonic())
                await asyncio.sleep(0.2)
        else:
            app.consumer.pause_partitions({tp})
            await topic.send(key=b"k", value=b"lost")
            await asyncio.sleep(1.0)
            await app.consumer.seek_wait({tp: 2})  # the position moves past the record
            app.consumer.resume_partitions({tp})
            await asyncio.sleep(AFTER_S + 1.0)
            assert seen == [b"first"], "the record was not left behind"
            deadline = time.monotonic() + 30
            while b"lost" not in seen and time.monotonic() < deadline:
                await watch.check(time.monotonic())
                await asyncio.sleep(0.2)
        return seen, watch.sought
    finally:
        await app.stop()


def test_a_record_left_behind_in_the_log_is_read_after_the_wait(broker: Settings) -> None:
    seen, sought = asyncio.run(_run(broker, "watch-lost", slow_s=0.0))
    assert seen == [b"first", b"lost"]
    assert sought == 1


def test_a_record_slower_than_the_wait_is_read_once(broker: Settings) -> None:
    seen, sought = asyncio.run(_run(broker, "watch-slow", slow_s=3 * AFTER_S))
    assert seen == [b"first", b"slow"]
    assert sought == 0
