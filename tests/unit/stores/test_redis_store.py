"""The Redis store against a real Valkey server (the binary ``a5s up`` runs)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as redis
from redis import exceptions as redis_exc

from schemas.errors import UpstreamUnavailable
from stores.redis import RedisStore, WaitingPool, map_redis_errors


@pytest.fixture
async def store(valkey: str) -> AsyncIterator[RedisStore]:
    # Each test its own keys: the server is shared by the session (an ``id()`` of a
    # temporary object, used before, was reused by later tests and mixed their leases).
    s = RedisStore(valkey, prefix=f"t{uuid.uuid4().hex}:")
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


async def test_a_burst_beyond_the_pool_waits_for_a_connection(valkey: str) -> None:
    """Six commands that each hold a connection 0.3 s, through a pool of two: all of them
    run, on no more than two connections, instead of failing with "Too many connections"."""
    pool = WaitingPool.from_url(valkey, max_connections=2, timeout=10, decode_responses=True)
    client = redis.Redis.from_pool(pool)
    try:
        most = 0

        async def held() -> None:
            await client.blpop([f"t{uuid.uuid4().hex}:empty"], timeout=0.3)

        async def watch() -> None:
            nonlocal most
            while True:
                most = max(most, len(pool._in_use_connections))
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        results = await asyncio.gather(*(held() for _ in range(6)), return_exceptions=True)
        watcher.cancel()
        assert [r for r in results if r is not None] == []
        assert most == 2
        assert len(pool._available_connections) + len(pool._in_use_connections) == 2
        assert await client.ping()  # and the pool serves on afterwards
    finally:
        await client.aclose()


async def test_a_command_that_finds_no_connection_in_time_fails_as_unavailable(
        valkey: str) -> None:
    pool = WaitingPool.from_url(valkey, max_connections=2, timeout=0.2, decode_responses=True)
    client = redis.Redis.from_pool(pool)
    try:
        holders = [asyncio.create_task(client.blpop([f"t{uuid.uuid4().hex}:empty"], timeout=2))
                   for _ in range(2)]
        await asyncio.sleep(0.3)  # both connections taken
        with pytest.raises(redis_exc.ConnectionError, match="No connection available"):
            await client.get("anything")
        with pytest.raises(UpstreamUnavailable):
            async with map_redis_errors():
                await client.get("anything")
        assert not pool._waiting  # a waiter that gave up is not woken later
        await asyncio.gather(*holders)
        assert await client.get("anything") is None
    finally:
        await client.aclose()


async def test_a_waiter_cancelled_as_it_is_woken_leaves_the_connection_to_the_next(
        valkey: str) -> None:
    pool = WaitingPool.from_url(valkey, max_connections=1, timeout=10, decode_responses=True)
    try:
        taken = await pool.get_connection()
        first = asyncio.create_task(pool.get_connection())
        second = asyncio.create_task(pool.get_connection())
        await asyncio.sleep(0.1)  # both wait
        await pool.release(taken)  # wakes the first ...
        first.cancel()  # ... which is cancelled before it runs
        try:
            got = await first  # (Python 3.11's wait_for may hand it the connection anyway)
        except asyncio.CancelledError:
            pass
        else:
            await pool.release(got)
        # the second gets the connection now, not when its 10 s run out
        await pool.release(await asyncio.wait_for(second, 2))
        assert not pool._waiting
    finally:
        await pool.disconnect()
