"""Redis (embedded Valkey by default): atomic admission shared by every gateway replica.

Owns rate-limit buckets, the per-account set of waiting jobs, idempotency
records, the API-key cache, live-session slots, the account ledger
snapshots the accounts agent publishes, and the read model of live transcripts
(``row_*``). Every multi-step check is one Lua script, so concurrent replicas
cannot both pass a limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as redis_exc

from schemas.errors import InternalError, UpstreamTimeout, UpstreamUnavailable
from topologies.redis_keys import (CANCELED, LEDGER, LIVE, LIVE_HOLDS, QUEUED, RATE,
                                   TRANSCRIPT, TRANSCRIPT_LIST, UPLOAD, UPLOAD_CLAIM,
                                   WEBHOOK_AUTH)

__all__ = ["RedisStore", "map_redis_errors", "LedgerSnapshot", "WaitingPool", "LIST_CHANGES"]

# GCRA: allows `limit` requests per `period` seconds in any rolling window. The clock is the
# server's: every gateway replica shares it, and a request that waited for a connection is
# not judged by the time it was made (which would refuse it behind later ones).
_RATE = """
local t = redis.call('TIME'); local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local period = tonumber(ARGV[1]); local limit = tonumber(ARGV[2])
local interval = period / limit
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local wait = tat - now - (period - interval)
if wait > 0 then return tostring(wait) end
redis.call('SET', KEYS[1], tostring(tat + interval), 'PX', math.ceil(period * 1000) + 1000)
return '0'
"""
# Add a member to a bounded set; 0 when full (and not already a member).
_BOUNDED_ADD = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('SADD', KEYS[1], ARGV[1]); return 1
"""
# Live sessions: a sorted set scored by lease expiry; expired leases are dropped first.
_LEASE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3]); return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3]); return 1
"""

assert LIVE_HOLDS.ttl_s is not None   # declared with one: a hold must not outlive its use
_HOLDS_TTL_MS = int(LIVE_HOLDS.ttl_s * 1000)
# A live session's admission: its lease and the usage it is given, in one step, so that
# sessions admitted at once (by any gateway) each see the others' holds. A hold counts here
# until the accounts agent's ledger snapshot lists the session (its `reserved` has it
# then); holds of sessions whose lease is gone are dropped. Returns {the ms given (0 when no
# usage is left, -1 when every place is taken), the ledger's `used` in ms}.
_ADMIT = """
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local used, reserved, known = 0, 0, {}
local raw = redis.call('GET', KEYS[3])
if raw then
  local ledger = cjson.decode(raw)
  used = tonumber(ledger['used']) or 0
  reserved = tonumber(ledger['reserved']) or 0
  if type(ledger['live']) == 'table' then
    for _, sid in ipairs(ledger['live']) do known[sid] = true end
  end
end
local pending = 0
local holds = redis.call('HGETALL', KEYS[2])
for i = 1, #holds, 2 do
  if not redis.call('ZSCORE', KEYS[1], holds[i]) then redis.call('HDEL', KEYS[2], holds[i])
  elseif not known[holds[i]] then pending = pending + tonumber(holds[i + 1]) end
end
local free = tonumber(ARGV[5]) - math.floor((used + reserved) * 1000 + 0.5) - pending
local used_ms = math.floor(used * 1000 + 0.5)
if free <= 0 then return {0, used_ms} end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return {-1, used_ms} end
local given = math.min(tonumber(ARGV[6]), free)
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[3], given)
redis.call('PEXPIRE', KEYS[2], ARGV[7])
return {given, used_ms}
"""

# The read model of a transcript: one hash per id, {run, pending, version, row, result,
# deleted}. `run` is the server's run_id when the entry was made: a restarted server (whose
# append-only file may have lost its last second of writes) shows no entry from before,
# so every read goes to ClickHouse until the next write. `pending` counts writers between
# `begin` and `end`: while one is, ClickHouse may already hold a newer row, so the entry
# is not answered from.
_RUN = "local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')\n"
# An account's list stamp, {run, pending, gen, c<gen>...}: every row writer holds it
# `pending` around its ClickHouse write and adds one to `gen` after it, so a list page read
# while the stamp was settled is current for as long as the stamp is the same
# (``Transcripts.list``). A row writer also notes which transcript moved `gen` to each value
# (`c<gen>`, the last LIST_CHANGES kept): a page read at an earlier stamp is brought up to
# date from those rows alone. Batch writers note nothing, and such a page is read again.
_LIST_TTL_MS = 3_600_000
LIST_CHANGES = 64
_LIST_BEGIN = """
if redis.call('HGET', KEYS[i], 'run') ~= run then
  redis.call('DEL', KEYS[i]); redis.call('HSET', KEYS[i], 'run', run, 'pending', 0, 'gen', 0)
end
redis.call('HINCRBY', KEYS[i], 'pending', 1); redis.call('PEXPIRE', KEYS[i], %d)
""" % _LIST_TTL_MS
_LIST_END = """
if redis.call('HGET', KEYS[i], 'run') == run then
  if redis.call('HINCRBY', KEYS[i], 'pending', -1) < 0 then
    redis.call('HSET', KEYS[i], 'pending', 0) end
  local gen = redis.call('HINCRBY', KEYS[i], 'gen', 1)
  redis.call('HDEL', KEYS[i], 'c' .. (gen - %d))
end
""" % LIST_CHANGES
_LISTS_BEGIN = _RUN + "for i = 1, #KEYS do\n" + _LIST_BEGIN + "end\nreturn 1\n"
_LISTS_END = _RUN + "for i = 1, #KEYS do\n" + _LIST_END + "end\nreturn 1\n"
# KEYS[2], when given, is the row's account list stamp.
_ROW_BEGIN = _RUN + "if #KEYS > 1 then local i = 2\n" + _LIST_BEGIN + "end\n" + """
if redis.call('HGET', KEYS[1], 'run') ~= run then
  redis.call('DEL', KEYS[1]); redis.call('HSET', KEYS[1], 'run', run, 'pending', 0)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return redis.call('HINCRBY', KEYS[1], 'pending', 1)
"""
# ARGV: version, row JSON, ttl ms, deleted (1/0), transcript id. An older version than the
# entry's is not stored (concurrent writers: the highest version wins, as in ClickHouse).
_ROW_END = _RUN + "if #KEYS > 1 then local i = 2\n" + _LIST_END + """
  if redis.call('HGET', KEYS[2], 'run') == run then
    redis.call('HSET', KEYS[2], 'c' .. redis.call('HGET', KEYS[2], 'gen'), ARGV[5]) end
end
if redis.call('HGET', KEYS[1], 'run') ~= run then return 0 end
if redis.call('HINCRBY', KEYS[1], 'pending', -1) < 0 then
  redis.call('HSET', KEYS[1], 'pending', 0) end
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '-1')
if tonumber(ARGV[1]) <= current then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'row', ARGV[2], 'deleted', ARGV[4])
if ARGV[4] == '1' then redis.call('HDEL', KEYS[1], 'result') end
if tonumber(ARGV[1]) >= tonumber(redis.call('HGET', KEYS[1], 'live_version') or '-1') then
  redis.call('HDEL', KEYS[1], 'live', 'live_version') end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
# A row version kept in the read model only (``Transcripts.change`` to ``processing``),
# stored as `live` beside the entry's row while it is newer. ARGV: version, row JSON, ttl
# ms. 0: no whole entry of this server run to add it to (the caller writes ClickHouse
# instead); 1: stored, or an equal or newer version is already there.
_ROW_LIVE = _RUN + """
local v = redis.call('HMGET', KEYS[1], 'run', 'row', 'version', 'live_version')
if v[1] ~= run or not v[2] then return 0 end
local version = tonumber(ARGV[1])
if version <= tonumber(v[3] or '-1') or version <= tonumber(v[4] or '-1') then return 1 end
redis.call('HSET', KEYS[1], 'live', ARGV[2], 'live_version', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
# The live rows of many entries (false where there is none from this server run).
_ROWS_LIVE = _RUN + """
local out = {}
for i = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'run', 'live')
  if v[1] == run and v[2] then out[i] = v[2] else out[i] = false end
end
return out
"""
# The rows of many whole, settled entries of this server run (false for any other).
_ROWS_SETTLED = _RUN + """
local out = {}
for i = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'run', 'pending', 'row')
  if v[1] == run and tonumber(v[2] or '1') == 0 and v[3] then out[i] = v[3] else out[i] = false end
end
return out
"""
# ARGV: 1 to return the result too. {row, result or ''} when the entry is whole and
# settled (its live row, if any, is the row); {false, false, live} while it is not but
# holds a live row (ClickHouse answers, and the live row is newer than its rows may be);
# else nothing.
_ROW_GET = _RUN + """
local v = redis.call('HMGET', KEYS[1], 'run', 'pending', 'row', 'result', 'live')
if v[1] ~= run then return false end
if not v[3] or tonumber(v[2] or '1') ~= 0 then
  if v[5] then return {'', '', v[5]} end
  return false
end
local row = v[5] or v[3]
if ARGV[1] == '1' and v[4] then return {row, v[4]} end
return {row, ''}
"""
# {the stamp of a settled list (made for this server run if missing), then the ids of the
# rows written since the stamp in ARGV[1], where every one of them is noted}, or nothing
# while a writer is between its ClickHouse write and its end.
_LIST_STAMP = _RUN + """
local v = redis.call('HMGET', KEYS[1], 'run', 'pending', 'gen')
if v[1] ~= run then
  redis.call('DEL', KEYS[1]); redis.call('HSET', KEYS[1], 'run', run, 'pending', 0, 'gen', 0)
  redis.call('PEXPIRE', KEYS[1], %d)
  return {run .. ':0'}
end
if tonumber(v[2] or '1') ~= 0 then return false end
local out = {run .. ':' .. v[3]}
local gen = tonumber(v[3])
local since = nil
if string.sub(ARGV[1], 1, #run + 1) == run .. ':' then
  since = tonumber(string.sub(ARGV[1], #run + 2)) end
if since and since < gen and gen - since <= %d then
  local fields = {}
  for g = since + 1, gen do fields[#fields + 1] = 'c' .. g end
  local ids = redis.call('HMGET', KEYS[1], unpack(fields))
  for i = 1, #ids do
    if not ids[i] then return {out[1]} end
    out[#out + 1] = ids[i]
  end
end
return out
""" % (_LIST_TTL_MS, LIST_CHANGES)


_ROW_RESULT = _RUN + """
if redis.call('HGET', KEYS[1], 'run') ~= run then return 0 end
if redis.call('HGET', KEYS[1], 'deleted') == '1' then return 0 end
redis.call('HSET', KEYS[1], 'result', ARGV[1]); return 1
"""


@contextlib.asynccontextmanager
async def map_redis_errors() -> AsyncIterator[None]:
    try:
        yield
    except redis_exc.TimeoutError as exc:
        raise UpstreamTimeout(log=f"redis: {exc}") from exc
    except redis_exc.ConnectionError as exc:
        raise UpstreamUnavailable(log=f"redis: {exc}") from exc
    except redis_exc.RedisError as exc:
        raise InternalError(log=f"redis: {exc}") from exc


POOL_SIZE = 64
"""Redis connections one process keeps at most."""
POOL_WAIT_S = 5.0
"""How long a command waits for a free connection before the request fails (502)."""


POOL_OPTIONS: dict[str, Any] = {
    "max_connections": POOL_SIZE, "timeout": POOL_WAIT_S, "decode_responses": True,
    "socket_timeout": 5, "socket_connect_timeout": 3, "health_check_interval": 15}
"""The connection pool's settings (``WaitingPool.from_url(url, **POOL_OPTIONS)``)."""


class WaitingPool(aioredis.ConnectionPool):
    """A connection pool that, with all ``max_connections`` in use, waits up to ``timeout``
    for one to come back instead of failing with "Too many connections".

    redis-py's ``BlockingConnectionPool`` waits the same way, but takes an
    ``asyncio.Condition`` and a timeout scope around every command, a burst or not: about
    a quarter of what a ``GET`` costs the event loop (``docs/job-path.md``). Here a command
    finds a free connection as the plain pool does, and only a command that finds none waits.
    """

    def __init__(self, *, timeout: float = POOL_WAIT_S, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timeout = timeout
        self._waiting: deque[asyncio.Future[None]] = deque()

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        deadline: float | None = None
        while True:
            if self.can_get_connection():
                try:
                    return await super().get_connection()
                except redis_exc.MaxConnectionsError:
                    pass  # taken by another command between the check and the take
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.timeout if deadline is None else deadline
            if loop.time() >= deadline:
                raise redis_exc.ConnectionError("No connection available.")
            freed = loop.create_future()
            self._waiting.append(freed)
            try:
                await asyncio.wait_for(freed, deadline - loop.time())
            except TimeoutError:
                pass
            except BaseException:
                if freed.done() and not freed.cancelled():
                    self._wake_next()  # woken, then cancelled: the connection is another's
                raise
            finally:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(freed)

    async def release(self, connection: Any) -> None:
        await super().release(connection)
        self._wake_next()

    def _wake_next(self) -> None:
        while self._waiting:  # the longest waiter still waiting
            freed = self._waiting.popleft()
            if not freed.done():
                freed.set_result(None)
                return


class LedgerSnapshot(dict[str, Any]):
    """``used``, ``reserved`` (seconds), ``processing`` (count) and ``live`` (the ids of the
    live sessions whose hold ``reserved`` counts) as last published by the accounts agent."""


class RedisStore:
    def __init__(self, url: str, prefix: str = "a5s:",
                 pool_class: type[aioredis.ConnectionPool] = WaitingPool) -> None:
        self.url = url
        self.prefix = prefix
        # A burst of requests waits briefly for a free connection instead of failing with
        # "Too many connections" (or opening hundreds of sockets).
        pool = pool_class.from_url(url, **POOL_OPTIONS)
        self.client = aioredis.Redis.from_pool(pool)
        self._rate = self.client.register_script(_RATE)
        self._bounded_add = self.client.register_script(_BOUNDED_ADD)
        self._lease = self.client.register_script(_LEASE)
        self._admit = self.client.register_script(_ADMIT)
        self._row_begin = self.client.register_script(_ROW_BEGIN)
        self._row_end = self.client.register_script(_ROW_END)
        self._row_get = self.client.register_script(_ROW_GET)
        self._row_result = self.client.register_script(_ROW_RESULT)
        self._row_live = self.client.register_script(_ROW_LIVE)
        self._rows_live = self.client.register_script(_ROWS_LIVE)
        self._rows_settled = self.client.register_script(_ROWS_SETTLED)
        self._lists_begin = self.client.register_script(_LISTS_BEGIN)
        self._lists_end = self.client.register_script(_LISTS_END)
        self._list_stamp = self.client.register_script(_LIST_STAMP)

    def k(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    async def close(self) -> None:
        await self.client.aclose()

    async def ping(self) -> float:
        started = time.perf_counter()
        async with map_redis_errors():
            await self.client.ping()
        return (time.perf_counter() - started) * 1000

    # --- limits -------------------------------------------------------------------------------

    async def take_rate(self, bucket: str, limit: int, period_s: float = 60.0) -> int:
        """0 when allowed, else the whole seconds to wait (for ``Retry-After``)."""
        async with map_redis_errors():
            wait = float(await self._rate(keys=[self.k(*RATE.key(bucket))],
                                          args=[period_s, limit]))
        return 0 if wait <= 0 else max(1, math.ceil(wait))

    async def enqueue(self, account_id: str, transcript_id: str, limit: int) -> bool:
        async with map_redis_errors():
            return bool(await self._bounded_add(keys=[self.k(*QUEUED.key(account_id))],
                                                args=[transcript_id, limit]))

    async def dequeue(self, account_id: str, transcript_id: str) -> None:
        async with map_redis_errors():
            await self.client.srem(self.k(*QUEUED.key(account_id)), transcript_id)

    async def queued_count(self, account_id: str) -> int:
        async with map_redis_errors():
            return int(await self.client.scard(self.k(*QUEUED.key(account_id))))

    async def lease_session(self, account_id: str, session_id: str, limit: int,
                            ttl_s: float = 30.0) -> bool:
        now = time.time()
        async with map_redis_errors():
            return bool(await self._lease(keys=[self.k(*LIVE.key(account_id))],
                                          args=[now, limit, session_id, now + ttl_s]))

    async def admit_session(self, account_id: str, session_id: str, *, places: int,
                            quota_ms: int, cap_ms: int, ttl_s: float = 30.0
                            ) -> tuple[int, int]:
        """Lease a place for a live session and give it usage, atomically.

        The usage left is the quota less the ledger's ``used`` and ``reserved`` and less
        the holds of other leased sessions the ledger does not list yet (see ``_ADMIT``).

        Returns:
            the ms given (at most ``cap_ms``; 0 when no usage is left; -1 when ``places``
            sessions already hold a lease), and the ledger's ``used`` ms it was read with.
        """
        now = time.time()
        async with map_redis_errors():
            given, used_ms = await self._admit(
                keys=[self.k(*LIVE.key(account_id)), self.k(*LIVE_HOLDS.key(account_id)),
                      self.k(*LEDGER.key(account_id))],
                args=[now, places, session_id, now + ttl_s, quota_ms, cap_ms, _HOLDS_TTL_MS])
        return int(given), int(used_ms)

    async def release_session(self, account_id: str, session_id: str) -> None:
        async with map_redis_errors():
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.zrem(self.k(*LIVE.key(account_id)), session_id)
                pipe.hdel(self.k(*LIVE_HOLDS.key(account_id)), session_id)
                await pipe.execute()

    async def live_leases(self, account_id: str) -> set[str]:
        """The ids of the account's sessions whose lease has not expired."""
        async with map_redis_errors():
            return set(await self.client.zrangebyscore(self.k(*LIVE.key(account_id)),
                                                       time.time(), "+inf"))

    async def live_sessions(self, account_id: str) -> int:
        async with map_redis_errors():
            key = self.k(*LIVE.key(account_id))
            await self.client.zremrangebyscore(key, "-inf", time.time())
            return int(await self.client.zcard(key))

    # --- JSON values --------------------------------------------------------------------------

    async def get_json(self, *key: str) -> Any:
        async with map_redis_errors():
            raw = await self.client.get(self.k(*key))
        return None if raw is None else json.loads(raw)

    async def set_json(self, value: Any, *key: str, ttl_s: float | None = None,
                       only_new: bool = False) -> bool:
        async with map_redis_errors():
            done = await self.client.set(self.k(*key), json.dumps(value, default=str),
                                         px=int(ttl_s * 1000) if ttl_s else None, nx=only_new)
        return bool(done)

    async def delete(self, *key: str) -> None:
        async with map_redis_errors():
            await self.client.delete(self.k(*key))

    async def delete_many(self, keys: list[tuple[str, ...]]) -> None:
        """Delete many keys in one command."""
        if keys:
            async with map_redis_errors():
                await self.client.delete(*(self.k(*key) for key in keys))

    async def names(self, kind: str) -> list[str]:
        """The last key part of every ``kind:<name>`` key (SCAN, so never blocking Redis)."""
        prefix = self.k(kind, "")
        async with map_redis_errors():
            return [key[len(prefix):] async for key in
                    self.client.scan_iter(match=prefix.replace("*", r"\*") + "*", count=500)]

    # --- read model of live transcripts ---------------------------------------------------------

    def _row_keys(self, transcript_id: str, account_id: str | None) -> list[str]:
        keys = [self.k(*TRANSCRIPT.key(transcript_id))]
        if account_id is not None:
            keys.append(self.k(*TRANSCRIPT_LIST.key(account_id)))
        return keys

    async def row_begin(self, transcript_id: str, ttl_s: float,
                        account_id: str | None = None) -> None:
        """Before a transcript's row is written to ClickHouse: readers go there until
        :meth:`row_end` (or for good, should the writer not get that far). With
        ``account_id``, the account's list stamp is held too (no page is reused)."""
        async with map_redis_errors():
            await self._row_begin(keys=self._row_keys(transcript_id, account_id),
                                  args=[int(ttl_s * 1000)])

    async def row_end(self, transcript_id: str, version: int, row_json: str, ttl_s: float,
                      deleted: bool, account_id: str | None = None) -> bool:
        """After the row is stored in ClickHouse: the entry answers reads again, with this
        row unless a newer one is there. ``deleted`` drops the cached result. With
        ``account_id``, the account's list stamp moves on (pages read before are stale)."""
        async with map_redis_errors():
            return bool(await self._row_end(
                keys=self._row_keys(transcript_id, account_id),
                args=[version, row_json, int(ttl_s * 1000), 1 if deleted else 0,
                      transcript_id]))

    async def lists_begin(self, account_ids: list[str]) -> None:
        """:meth:`row_begin`'s hold on list stamps, for writes that bypass it (batches)."""
        if account_ids:
            async with map_redis_errors():
                await self._lists_begin(keys=[self.k(*TRANSCRIPT_LIST.key(a))
                                              for a in account_ids])

    async def lists_end(self, account_ids: list[str]) -> None:
        """:meth:`row_end`'s move of list stamps, after :meth:`lists_begin`."""
        if account_ids:
            async with map_redis_errors():
                await self._lists_end(keys=[self.k(*TRANSCRIPT_LIST.key(a))
                                            for a in account_ids])

    async def list_stamp(self, account_id: str, since: str | None = None,
                         ) -> tuple[str, list[str] | None] | None:
        """The account's list stamp, or None while a row writer is in flight; with it, the
        ids of the transcripts whose rows were written since the stamp ``since`` (in the
        order written, repeats kept), or None where they are not all known."""
        async with map_redis_errors():
            found = await self._list_stamp(keys=[self.k(*TRANSCRIPT_LIST.key(account_id))],
                                           args=[since or ""])
        if not found:
            return None
        # The script lists ids only where every generation since ``since`` is noted.
        return found[0], list(found[1:]) or None

    async def rows_settled(self, transcript_ids: Sequence[str]) -> list[str | None]:
        """The rows (JSON, or None) of many entries that may answer (:meth:`row_get`'s
        rule: this server run, no writer in flight), in one call."""
        if not transcript_ids:
            return []
        async with map_redis_errors():
            found = await self._rows_settled(keys=[self.k(*TRANSCRIPT.key(t))
                                                   for t in transcript_ids])
        return [f or None for f in found]

    async def row_get(self, transcript_id: str, *, with_result: bool = False,
                      ) -> tuple[str | None, str | None, str | None] | None:
        """(row JSON, result JSON or None, None) when the entry may answer; (None, None,
        live row JSON) when ClickHouse must answer but a live row (:meth:`row_live`) is
        newer than what it may hold; None: ask ClickHouse."""
        async with map_redis_errors():
            found = await self._row_get(keys=[self.k(*TRANSCRIPT.key(transcript_id))],
                                        args=[1 if with_result else 0])
        if not found:
            return None
        if len(found) > 2:
            return None, None, found[2]
        return found[0], (found[1] or None), None

    async def row_live(self, transcript_id: str, version: int, row_json: str,
                       ttl_s: float) -> bool:
        """Keep a row version in the read model only, where it answers reads (and
        overlays list pages) until a row written to ClickHouse replaces it. False when
        there is no entry of this server run to keep it in: write it the usual way."""
        async with map_redis_errors():
            return bool(await self._row_live(keys=[self.k(*TRANSCRIPT.key(transcript_id))],
                                             args=[version, row_json, int(ttl_s * 1000)]))

    async def rows_live(self, transcript_ids: Sequence[str]) -> list[str | None]:
        """The live rows (JSON, or None) of many entries, in one call."""
        if not transcript_ids:
            return []
        async with map_redis_errors():
            found = await self._rows_live(keys=[self.k(*TRANSCRIPT.key(t))
                                                for t in transcript_ids])
        return [f or None for f in found]

    async def row_result(self, transcript_id: str, result_json: str) -> None:
        """After the result is stored in ClickHouse: keep a copy beside the row."""
        async with map_redis_errors():
            await self._row_result(keys=[self.k(*TRANSCRIPT.key(transcript_id))],
                                   args=[result_json])

    async def row_forget(self, transcript_ids: list[str]) -> None:
        """Drop entries (readers go to ClickHouse); one command for many ids."""
        if transcript_ids:
            async with map_redis_errors():
                await self.client.delete(*(self.k(*TRANSCRIPT.key(t)) for t in transcript_ids))

    # --- keys the gateway and the pipeline share (declared in topologies.redis_keys) -----------

    async def ledger(self, account_id: str) -> LedgerSnapshot:
        value = await self.get_json(*LEDGER.key(account_id))
        return LedgerSnapshot(value or {"used": 0.0, "reserved": 0.0, "processing": 0})

    async def set_ledger(self, account_id: str, snapshot: dict[str, Any]) -> None:
        await self.set_json(snapshot, *LEDGER.key(account_id))

    async def mark_canceled(self, transcript_id: str) -> None:
        await self.set_json(True, *CANCELED.key(transcript_id), ttl_s=CANCELED.ttl_s)

    async def is_canceled(self, transcript_id: str) -> bool:
        return bool(await self.get_json(*CANCELED.key(transcript_id)))

    async def set_webhook_auth(self, transcript_id: str, value: str) -> None:
        await self.set_json(value, *WEBHOOK_AUTH.key(transcript_id))

    async def webhook_auth(self, transcript_id: str) -> Any:
        return await self.get_json(*WEBHOOK_AUTH.key(transcript_id))

    async def drop_webhook_auth(self, transcript_id: str) -> None:
        await self.delete(*WEBHOOK_AUTH.key(transcript_id))

    async def save_upload(self, file_id: str, record: dict[str, Any], ttl_s: float) -> None:
        await self.set_json(record, *UPLOAD.key(file_id), ttl_s=ttl_s)

    async def upload(self, file_id: str) -> Any:
        return await self.get_json(*UPLOAD.key(file_id))

    async def drop_upload(self, file_id: str) -> None:
        await self.delete(*UPLOAD.key(file_id))

    async def upload_ids(self) -> list[str]:
        return await self.names(UPLOAD.kind)

    async def claim_upload(self, file_id: str, transcript_id: str, ttl_s: float) -> bool:
        """False when another transcript already used the file."""
        return await self.set_json(transcript_id, *UPLOAD_CLAIM.key(file_id), ttl_s=ttl_s,
                                   only_new=True)

    async def upload_claim(self, file_id: str) -> Any:
        return await self.get_json(*UPLOAD_CLAIM.key(file_id))

    async def release_upload(self, file_id: str) -> None:
        await self.delete(*UPLOAD_CLAIM.key(file_id))
