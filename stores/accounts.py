"""Accounts and API keys: ClickHouse holds the record, Redis caches it for admission.

Keys are shown once at creation; only their SHA-256 is stored. A revoked key's
cache entry is dropped at once, and cache entries live 30 s at most, so a key
revoked from any console stops working well within the spec's 60 seconds.

Each process also keeps the keys it verified, with their account, under the auth
generation it read from Redis before verifying them: a token that every key
revocation and account change replaces (after dropping the cache entries). A kept key
is used only while Redis holds the same token, which a request reads in one call, so a
revoked key or a suspended account is refused on the next request to any process.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from datetime import UTC, datetime
from typing import Any

from security.signing import new_secret
from schemas import ids
from schemas.errors import InvalidRequest, NotFound
from schemas.rows import AccountRow, ApiKeyRow
from schemas.settings import DefaultLimits
from topologies.redis_keys import ACCOUNT_CACHE, AUTH_GENERATION, KEY_CACHE

from .clickhouse import ClickHouse
from .memo import Memo
from .redis import RedisStore

__all__ = ["Accounts", "hash_key", "KEY_PREFIX", "MAX_ACTIVE_KEYS"]

KEY_PREFIX = "a5s_sk_"
MAX_ACTIVE_KEYS = 10
CACHE_TTL_S = 30.0
VERIFIED_TTL_S = 10.0
"""How long a process reuses a key it verified, at most, even under the same auth
generation (a bound should Redis lose a newer token in a restart)."""
VERIFIED_MAX = 10_000
"""Keys a process keeps verified, at most (the oldest dropped first)."""


def hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def _now() -> datetime:
    return datetime.now(UTC)


class Accounts:
    def __init__(self, ch: ClickHouse, redis: RedisStore, defaults: DefaultLimits) -> None:
        self.ch = ch
        self.redis = redis
        self.defaults = defaults
        self._console_lock = asyncio.Lock()
        self._verified: Memo[str, tuple[str, float, AccountRow, ApiKeyRow]] = Memo(VERIFIED_MAX)
        """Keys this process verified, by digest: (auth generation read before, when
        (monotonic), account, key)."""

    # --- accounts -----------------------------------------------------------------------------

    async def create(self, *, email: str, display_name: str = "", tier: str = "free",
                     async_enabled: bool = True, streaming_enabled: bool = True,
                     **limits: Any) -> AccountRow:
        values = self.defaults.model_dump() | {k: v for k, v in limits.items() if v is not None}
        now = _now()
        row = AccountRow(id=ids.account_id(), email=email, display_name=display_name or email,
                         created_at=now, status="active", tier=tier,
                         async_enabled=async_enabled, streaming_enabled=streaming_enabled,
                         webhook_secret=new_secret(), updated_at=now,
                         **{k: values[k] for k in (
                             "usage_limit_seconds", "max_concurrent_jobs", "max_queued_jobs",
                             "max_requests_per_minute", "max_audio_duration_seconds",
                             "retention_days", "max_concurrent_sessions",
                             "max_session_seconds")})
        await self._save(row)
        return row

    async def get(self, account_id: str, *, fresh: bool = False) -> AccountRow:
        if not fresh:
            cached = await self.redis.get_json(*ACCOUNT_CACHE.key(account_id))
            if cached:
                return AccountRow.model_validate(cached)
        rows = await self.ch.query("SELECT * FROM {db}.accounts FINAL WHERE id = {id:String}",
                                   {"id": account_id})
        if not rows:
            raise NotFound(f"No account {account_id!r}.", param="account_id")
        row = AccountRow.model_validate(rows[0])
        await self.redis.set_json(row.model_dump(mode="json"), *ACCOUNT_CACHE.key(account_id),
                                  ttl_s=CACHE_TTL_S)
        return row

    async def list(self) -> list[AccountRow]:
        rows = await self.ch.query("SELECT * FROM {db}.accounts FINAL ORDER BY created_at")
        return [AccountRow.model_validate(r) for r in rows]

    async def update(self, account_id: str, **changes: Any) -> AccountRow:
        async with self._console_lock:
            row = await self.get(account_id, fresh=True)
            row = row.model_copy(update={k: v for k, v in changes.items() if v is not None}
                                 | {"updated_at": _now()})
            AccountRow.model_validate(row.model_dump())
            await self._save(row)
            return row

    async def _save(self, row: AccountRow) -> None:
        await self.ch.insert("accounts", [row.model_dump()])
        await self.redis.delete(*ACCOUNT_CACHE.key(row.id))
        await self._new_generation()

    # --- keys ---------------------------------------------------------------------------------

    async def create_key(self, account_id: str, name: str = "") -> tuple[str, ApiKeyRow]:
        """Returns the plaintext key (shown once) and its stored record."""
        async with self._console_lock:
            await self.get(account_id, fresh=True)
            active = [k for k in await self.keys(account_id) if k.revoked_at is None]
            if len(active) >= MAX_ACTIVE_KEYS:
                raise InvalidRequest(f"An account has at most {MAX_ACTIVE_KEYS} active keys; "
                                     "revoke one first.", param="account_id")
            plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
            now = _now()
            row = ApiKeyRow(key_hash=hash_key(plaintext), key_id=ids.key_id(),
                            account_id=account_id, name=name or "default",
                            prefix=plaintext[:len(KEY_PREFIX) + 4], created_at=now,
                            updated_at=now)
            await self.ch.insert("api_keys", [row.model_dump()])
            return plaintext, row

    async def keys(self, account_id: str) -> list[ApiKeyRow]:
        rows = await self.ch.query("SELECT * FROM {db}.api_keys FINAL WHERE account_id = "
                                   "{a:String} ORDER BY created_at", {"a": account_id})
        return [ApiKeyRow.model_validate(r) for r in rows]

    async def revoke_key(self, key_id: str) -> ApiKeyRow:
        async with self._console_lock:
            rows = await self.ch.query("SELECT * FROM {db}.api_keys FINAL WHERE key_id = "
                                       "{k:String}", {"k": key_id})
            if not rows:
                raise NotFound(f"No key {key_id!r}.", param="key_id")
            row = ApiKeyRow.model_validate(rows[0])
            if row.revoked_at is None:
                now = _now()
                row = row.model_copy(update={"revoked_at": now, "updated_at": now})
                await self.ch.insert("api_keys", [row.model_dump()])
            await self.redis.delete(*KEY_CACHE.key(row.key_hash))
            await self._new_generation()
            return row

    async def _new_generation(self) -> None:
        """Every process verifies its keys again on their next request (after a change of
        a key or an account, once the caches it concerns are dropped)."""
        self._verified.clear()
        await self.redis.set_json(secrets.token_hex(8), *AUTH_GENERATION.key())

    async def authenticate(self, plaintext: str) -> tuple[AccountRow, ApiKeyRow] | None:
        """The account and key for a bearer key, or None if unknown or revoked."""
        if not plaintext.startswith(KEY_PREFIX) or len(plaintext) > 200:
            return None
        digest = hash_key(plaintext)
        # Read before the key and account, so a change after this read moves the token.
        generation = await self.redis.get_json(*AUTH_GENERATION.key())
        kept = self._verified.get(digest)
        if kept is not None and generation is not None and kept[0] == generation and \
                time.monotonic() - kept[1] < VERIFIED_TTL_S and \
                secrets.compare_digest(kept[3].key_hash, digest):
            return kept[2], kept[3]
        found = await self._verify(digest)
        self._verified.pop(digest, None)
        if found is not None:
            if generation is None:  # none yet, or lost with a Redis restart: start one
                await self.redis.set_json(secrets.token_hex(8), *AUTH_GENERATION.key(),
                                          only_new=True)
            else:
                self._verified[digest] = (generation, time.monotonic(), *found)
        return found

    async def _verify(self, digest: str) -> tuple[AccountRow, ApiKeyRow] | None:
        """The account and key for a key's digest from the Redis caches (or ClickHouse)."""
        cached = await self.redis.get_json(*KEY_CACHE.key(digest))
        if cached is None:
            rows = await self.ch.query("SELECT * FROM {db}.api_keys FINAL WHERE key_hash = "
                                       "{h:String}", {"h": digest})
            cached = ApiKeyRow.model_validate(rows[0]).model_dump(mode="json") if rows else {}
            await self.redis.set_json(cached, *KEY_CACHE.key(digest), ttl_s=CACHE_TTL_S)
        if not cached:
            return None
        key = ApiKeyRow.model_validate(cached)
        # The lookup was by the digest; compare it in constant time all the same.
        if key.revoked_at is not None or not secrets.compare_digest(key.key_hash, digest):
            return None
        return await self.get(key.account_id), key

    async def rotate_webhook_secret(self, account_id: str) -> AccountRow:
        return await self.update(account_id, webhook_secret=new_secret())
