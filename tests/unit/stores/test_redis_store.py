"""The Redis store against a real Valkey server (the binary ``a5s up`` runs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from stores.redis import RedisStore


@pytest.fixture
async def store(valkey: str) -> AsyncIterator[RedisStore]:
    s = RedisStore(valkey, prefix=f"t{id(object())}:")
    yield s
    await s.close()


async def test_json_roundtrip_and_only_new(store: RedisStore) -> None:
    assert await store.set_json({"a": [1, 2]}, "thing", "x")
    assert await store.get_json("thing", "x") == {"a": [1, 2]}
    assert not await store.set_json({"b": 1}, "thing", "x", only_new=True)
    await store.delete("thing", "x")
    assert await store.get_json("thing", "x") is None
    assert await store.ping() >= 0


async def test_rate_limit_allows_exactly_the_limit_per_window(store: RedisStore) -> None:
    results = await asyncio.gather(*(store.take_rate("acct", 10, 60) for _ in range(25)))
    assert results.count(0) == 10
    waits = [r for r in results if r]
    assert len(waits) == 15 and all(1 <= w <= 60 for w in waits)


async def test_queue_bound_is_atomic_under_concurrency(store: RedisStore) -> None:
    results = await asyncio.gather(*(store.enqueue("acct", f"tr_{i}", 7) for i in range(40)))
    assert sum(results) == 7
    assert await store.queued_count("acct") == 7
    assert await store.enqueue("acct", "tr_0", 7) == results[0]  # members re-enter; others wait
    member = next(f"tr_{i}" for i, ok in enumerate(results) if ok)
    await store.dequeue("acct", member)
    await store.dequeue("acct", member)  # idempotent
    assert await store.queued_count("acct") == 6


async def test_session_leases_bound_and_expire(store: RedisStore) -> None:
    # long leases for the bound, so that a slow machine cannot expire one mid-gather
    got = await asyncio.gather(*(store.lease_session("acct", f"s{i}", 5, ttl_s=60)
                                 for i in range(12)))
    assert sum(got) == 5
    assert await store.live_sessions("acct") == 5
    assert not await store.lease_session("acct", "sixth", 5)
    for i, ok in enumerate(got):
        if ok:
            await store.release_session("acct", f"s{i}")
    assert await store.live_sessions("acct") == 0
    # short leases that are never renewed give their places back once they expire
    assert all(await asyncio.gather(*(store.lease_session("acct", f"short{i}", 5, ttl_s=0.3)
                                      for i in range(5))))
    await asyncio.sleep(0.6)
    assert await store.live_sessions("acct") == 0
    assert sum(await asyncio.gather(*(store.lease_session("acct", f"late{i}", 5)
                                      for i in range(7)))) == 5


async def test_sessions_admitted_at_once_share_the_usage_left(store: RedisStore) -> None:
    """Twelve admissions at once against 400 s left: the places and the usage are shared
    out, never given twice, however the calls interleave."""
    await store.set_ledger("acct", {"used": 50.0, "reserved": 50.0, "live": []})
    given = [g for g, _ in await asyncio.gather(*(
        store.admit_session("acct", f"s{i}", places=5, quota_ms=500_000, cap_ms=300_000)
        for i in range(12)))]
    assert sorted(given, reverse=True)[:2] == [300_000, 100_000] and given.count(0) == 10
    assert await store.live_sessions("acct") == 2
    # with usage to spare, the places are what runs out
    given = [g for g, _ in await asyncio.gather(*(
        store.admit_session("big", f"s{i}", places=5, quota_ms=10**9, cap_ms=300_000)
        for i in range(12)))]
    assert given.count(300_000) == 5 and given.count(-1) == 7


async def test_a_hold_counts_until_the_ledger_lists_it_and_goes_with_its_lease(
        store: RedisStore) -> None:
    assert await store.admit_session("acct", "a", places=5, quota_ms=400_000,
                                     cap_ms=300_000) == (300_000, 0)
    assert await store.admit_session("acct", "b", places=5, quota_ms=400_000,
                                     cap_ms=300_000) == (100_000, 0)
    await store.release_session("acct", "b")
    # the agent now holds "a" itself: its hold is in the ledger's reserved, not counted twice
    await store.set_ledger("acct", {"used": 12.5, "reserved": 287.5, "live": ["a"]})
    assert await store.admit_session("acct", "c", places=5, quota_ms=400_000,
                                     cap_ms=300_000) == (100_000, 12_500)
    # a snapshot from before the field (no "live"): every leased hold counts
    await store.set_ledger("acct", {"used": 0.0, "reserved": 0.0})
    assert await store.admit_session("acct", "d", places=5, quota_ms=400_000,
                                     cap_ms=300_000) == (0, 0)
    # an expired lease takes its hold with it
    assert await store.admit_session("acct2", "e", places=5, quota_ms=10_000, cap_ms=8_000,
                                     ttl_s=0.3) == (8_000, 0)
    await asyncio.sleep(0.5)
    assert await store.admit_session("acct2", "f", places=5, quota_ms=10_000,
                                     cap_ms=8_000) == (8_000, 0)
