"""A process's bounded memo keeps its newest entries."""

from __future__ import annotations

from stores.memo import Memo


def test_a_new_key_past_the_bound_drops_the_oldest_and_a_rewrite_drops_nothing() -> None:
    memo: Memo[str, int] = Memo(2)
    memo["a"] = 1
    memo["b"] = 2
    memo["a"] = 3  # a key already held: nothing goes
    assert memo == {"a": 3, "b": 2}
    memo["c"] = 4  # the oldest insert goes first
    assert memo == {"b": 2, "c": 4}
    assert memo.get("a") is None
