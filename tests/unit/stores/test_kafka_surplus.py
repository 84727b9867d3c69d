"""Where a partition must start to keep only its newest records (``stores.kafka.surplus``)."""

from aiokafka import TopicPartition

from stores.kafka import surplus


def test_only_partitions_past_the_bound_move_and_each_keeps_exactly_the_bound() -> None:
    a, b, c = (TopicPartition("t", p) for p in range(3))
    starts = {a: 0, b: 5, c: 0}
    ends = {a: 10, b: 8, c: 0}
    assert surplus(starts, ends, 3) == {a: 7}      # b holds 3, c none: left alone
    assert surplus(starts, ends, 0) == {a: 10, b: 8}
    assert surplus({}, {a: 4}, 2) == {a: 2}       # a start not known counts from 0
