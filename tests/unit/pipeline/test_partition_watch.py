"""Which partitions the watch seeks back: records past the commit, none held here, for a while."""

from __future__ import annotations

from faust.types import TP

from pipeline.faust_transport import Lag, stalled

DISPATCH = TP("a5s.dispatch", 1)
CHUNKS = TP("a5s.chunks", 0)


def test_records_left_unread_are_stalled_only_after_the_wait() -> None:
    seen = {DISPATCH: Lag(committed=1, end=2, in_flight=False)}
    stuck, marks = stalled(seen, {}, now=100.0, after_s=20.0)
    assert stuck == [] and marks == {DISPATCH: (1, 100.0)}
    stuck, marks = stalled(seen, marks, now=115.0, after_s=20.0)
    assert stuck == [] and marks == {DISPATCH: (1, 100.0)}
    stuck, _ = stalled(seen, marks, now=120.0, after_s=20.0)
    assert stuck == [DISPATCH]


def test_a_record_held_here_or_a_partition_read_to_its_end_is_never_stalled() -> None:
    marks = {DISPATCH: (1, 0.0), CHUNKS: (5, 0.0)}
    seen = {DISPATCH: Lag(committed=1, end=2, in_flight=True),  # a slow stage at work
            CHUNKS: Lag(committed=5, end=5, in_flight=False)}  # nothing to read
    stuck, kept = stalled(seen, marks, now=1000.0, after_s=20.0)
    assert stuck == [] and kept == {}


def test_a_commit_that_moves_restarts_the_wait() -> None:
    marks = {DISPATCH: (1, 0.0)}
    seen = {DISPATCH: Lag(committed=2, end=4, in_flight=False)}  # progress since the mark
    stuck, kept = stalled(seen, marks, now=30.0, after_s=20.0)
    assert stuck == [] and kept == {DISPATCH: (2, 30.0)}
    # a partition that was busy in between starts its wait again too
    stuck, kept = stalled({DISPATCH: Lag(committed=2, end=4, in_flight=True)}, kept, 40.0, 20.0)
    assert kept == {}
    stuck, kept = stalled(seen, kept, now=45.0, after_s=20.0)
    assert stuck == [] and kept == {DISPATCH: (2, 45.0)}
