"""How long a consumer of the embedded broker pauses after an empty or a caught-up fetch."""

from __future__ import annotations

import asyncio
import math
import threading
import time

from types import SimpleNamespace

from aiokafka import TopicPartition

from stores.kafka import _WAKEUPS, CAUGHT_UP_RECORDS, _pause, caught_up


def test_live_consumers_poll_fast_while_records_flow_and_wait_for_a_wakeup_when_long_idle(
        ) -> None:
    def pause(live: bool, quiet_s: float) -> tuple[float, bool]:
        return _pause(live, quiet_s, pause_s=0.05, live_pause_s=0.01, live_busy_s=2.0,
                      live_idle_s=30.0, live_idle_pause_s=0.5)

    assert pause(True, 0.5) == (0.01, True)     # a live session's records flow
    assert pause(True, 5.0) == (0.05, False)    # paused a moment
    assert pause(True, 60.0) == (0.5, True)     # no session: long, until a record is made here
    assert pause(True, math.inf) == (0.5, True)  # never a record since it started
    # the others pause alike whenever their fetch was empty, and are woken
    assert pause(False, 0.5) == pause(False, 60.0) == pause(False, math.inf) == (0.05, True)


def _paused_on_a_thread(partitions: frozenset[tuple[str, int]]) -> threading.Thread:
    """A consumer thread's own event loop paused for 30 s, as Faust's consumer pauses."""
    thread = threading.Thread(target=lambda: asyncio.run(
        _WAKEUPS.pause(30.0, partitions, since=time.monotonic())), daemon=True)
    thread.start()
    return thread


def test_a_record_produced_here_wakes_a_paused_consumer_on_another_loop() -> None:
    thread = _paused_on_a_thread(frozenset({("wake-a", 0), ("wake-a", 1)}))
    time.sleep(0.3)
    _WAKEUPS.produced("wake-b", 0)  # another topic
    _WAKEUPS.produced("wake-a", 2)  # another partition of the topic
    thread.join(0.5)
    assert thread.is_alive()
    _WAKEUPS.produced("wake-a", 1)
    thread.join(5.0)
    assert not thread.is_alive()


def test_a_record_produced_while_the_empty_fetch_came_back_skips_the_pause() -> None:
    fetched = time.monotonic()
    _WAKEUPS.produced("wake-c", 3)
    started = time.monotonic()
    asyncio.run(_WAKEUPS.pause(30.0, frozenset({("wake-c", 3)}), since=fetched))
    assert time.monotonic() - started < 5.0


class _Assignment:
    """aiokafka's assignment as ``caught_up`` reads it: each partition's high watermark."""

    def __init__(self, highwater: dict[tuple[str, int], int | None]) -> None:
        self._state = {TopicPartition(t, p): SimpleNamespace(highwater=h)
                       for (t, p), h in highwater.items()}

    def state_value(self, tp: TopicPartition) -> SimpleNamespace | None:
        return self._state.get(tp)


def _request(offsets: dict[tuple[str, int], int]) -> SimpleNamespace:
    """A fetch request's topics as aiokafka builds them: (partition, offset, max bytes)."""
    topics: dict[str, list[tuple[int, int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append((partition, offset, 1 << 20))
    return SimpleNamespace(topics=list(topics.items()))


def test_a_fetch_is_caught_up_when_no_partition_held_more_than_one_fetch_brings() -> None:
    fetched = {("dispatch", 0): 10, ("dispatch", 1): 4, ("chunks", 0): 0}
    assert caught_up(_Assignment({("dispatch", 0): 11, ("dispatch", 1): 4,
                                  ("chunks", 0): None}), _request(fetched))
    assert caught_up(_Assignment({("dispatch", 0): 10 + CAUGHT_UP_RECORDS, ("dispatch", 1): 4,
                                  ("chunks", 0): 0}), _request(fetched))
    # a backlog on one partition: fetch again at once, no pause
    assert not caught_up(_Assignment({("dispatch", 0): 11 + CAUGHT_UP_RECORDS,
                                      ("dispatch", 1): 4, ("chunks", 0): 0}), _request(fetched))
