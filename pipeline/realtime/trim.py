"""Where the live topics' logs may start: what no live session can still need.

The embedded broker keeps its whole log in memory and writes all of it to disk every few
seconds, so its CPU grows with what the log holds, not with the traffic: 10 sessions of
60 ms audio records took it from 6% to 41% of a core over 120 s, and as much with a
quarter of the records at the same bytes (``python -m bench.broker``). Retention (10
minutes) would bound it only far above that. So the worker deletes, every
``TRIM_INTERVAL_S``, the records of its partitions that are both older than ``keep_s``
and before the floor of every session it holds there or waits to open (its models still
loading): the session's opening record, or the audio record its latest checkpoint names
(a takeover replays a session from there, :mod:`.checkpoint`). Transcript messages are
read only from the end, so they go once older than ``keep_s``.

Pure bookkeeping: the agent gives it end offsets, the floors of the sessions it holds and
those it waits to open, and deletes what :meth:`LogTrim.points` returns.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from aiokafka import TopicPartition

__all__ = ["LogTrim", "TRIM_INTERVAL_S"]

TRIM_INTERVAL_S = 5.0
"""How often the worker trims its live partitions."""


class LogTrim:
    """End offsets seen over the last ``keep_s`` seconds, and the trims already made."""

    def __init__(self, keep_s: float, wait_s: float = 0.0) -> None:
        self.keep_s = keep_s
        self.wait_s = wait_s
        """How long a session waits to open before its gateway gives up on it."""
        self.history: deque[tuple[float, dict[TopicPartition, int]]] = deque()
        self.done: dict[TopicPartition, int] = {}
        self.waiting: dict[str, tuple[int, int, float]] = {}
        """Sessions seen while the models load: partition, origin, when first seen."""

    def wait(self, session_id: str, partition: int, origin: int, now: float) -> None:
        """A session not opened yet (the models still load): its next record tries again and
        a takeover's replay covers this one, so its log is kept from ``origin`` until it
        opens (:meth:`opened`) or its gateway gave up (``wait_s``)."""
        self.waiting.setdefault(session_id, (partition, origin, now))

    def opened(self, session_id: str) -> None:
        self.waiting.pop(session_id, None)

    def floors(self, topic: str, held: Iterable[tuple[int, int]], now: float
               ) -> dict[TopicPartition, int]:
        """The earliest offset of ``topic`` each partition must keep: the origins of the
        sessions held there (``(partition, origin)`` pairs) and of those waiting to open."""
        for sid, (_, _, since) in list(self.waiting.items()):
            if now - since > self.wait_s:
                del self.waiting[sid]
        floors: dict[TopicPartition, int] = {}
        for partition, origin in [*held, *((p, o) for p, o, _ in self.waiting.values())]:
            tp = TopicPartition(topic, partition)
            floors[tp] = min(floors.get(tp, origin), origin)
        return floors

    def reset(self) -> None:
        """Partitions moved: what this worker knew of them says nothing of their sessions
        until every live one has sent a record again, so trimming waits ``keep_s``."""
        self.history.clear()

    def observe(self, now: float, ends: Mapping[TopicPartition, int]) -> None:
        self.history.append((now, dict(ends)))
        while len(self.history) > 1 and self.history[1][0] <= now - self.keep_s:
            self.history.popleft()

    def points(self, now: float, floors: Mapping[TopicPartition, int]
               ) -> dict[TopicPartition, int]:
        """Offsets to delete records before: each partition's end ``keep_s`` ago, no later
        than its floor (the earliest origin of a session held there), and past the last
        trim. Recorded as done: the caller deletes them."""
        if not self.history or self.history[0][0] > now - self.keep_s:
            return {}
        _, ends = self.history[0]
        points = {}
        for tp, end in ends.items():
            point = min(end, floors.get(tp, end))
            if point > self.done.get(tp, 0):
                points[tp] = self.done[tp] = point
        return points
