"""Secrets are compared in constant time, and keys are found by their hash alone.

Every place that checks a client-supplied secret (API keys, the console token,
presigned upload signatures, webhook signatures) must use ``hmac.compare_digest``
/ ``secrets.compare_digest``; an ``==`` on a secret leaks its prefix through timing.
The source is read with ``ast`` so a later edit that swaps in ``==`` fails here.
The key lookup itself is exercised against in-memory stand-ins for the two stores.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import textwrap
from datetime import UTC, datetime
from typing import Any

import pytest

from schemas.rows import AccountRow, ApiKeyRow
from schemas.settings import DefaultLimits
from security import signing, tokens
from stores.accounts import KEY_PREFIX, Accounts, hash_key

# Presigned upload and redacted-audio URLs are both checked by url_signature_matches.
CHECKS = [Accounts.authenticate, Accounts._verify, tokens.token_matches,
          signing.url_signature_matches, signing.verify]
SECRET_NAMES = ("token", "digest", "signature", "key_hash", "expected", "given", "secret")


def _tree(fn: Any) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(fn)))


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


@pytest.mark.parametrize("fn", CHECKS, ids=lambda f: f.__qualname__)
def test_secret_checks_use_compare_digest(fn: Any) -> None:
    tree = _tree(fn)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "compare_digest"
             and isinstance(n.func.value, ast.Name) and n.func.value.id in ("hmac", "secrets")]
    assert calls, f"{fn.__qualname__} compares a secret without compare_digest"
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq))
                                                 for op in node.ops):
            mentioned = {n for n in _names(node) if not n.isupper()  # constants
                         and any(s in n.lower() for s in SECRET_NAMES)}
            assert not mentioned, (f"{fn.__qualname__} line {node.lineno}: "
                                   f"== on {sorted(mentioned)}")


# --- the key lookup against in-memory stores --------------------------------------------------

class _Redis:
    def __init__(self) -> None:
        self.values: dict[tuple[str, ...], Any] = {}

    async def get_json(self, *key: str) -> Any:
        return self.values.get(key)

    async def set_json(self, value: Any, *key: str, ttl_s: float | None = None,
                       only_new: bool = False) -> bool:
        self.values[key] = value
        return True

    async def delete(self, *key: str) -> None:
        self.values.pop(key, None)


class _ClickHouse:
    def __init__(self, account: AccountRow, keys: list[ApiKeyRow]) -> None:
        self.account = account
        self.keys = keys

    async def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict]:
        params = params or {}
        if "api_keys" in sql:
            return [k.model_dump() for k in self.keys if k.key_hash == params.get("h")]
        return [self.account.model_dump()] if params.get("id") == self.account.id else []


def _account() -> AccountRow:
    now = datetime.now(UTC)
    limits = DefaultLimits().model_dump()
    return AccountRow(id="acct_1", email="a@example.com", display_name="a", created_at=now,
                      webhook_secret="whsec_x", updated_at=now,
                      **{k: limits[k] for k in (
                          "usage_limit_seconds", "max_concurrent_jobs", "max_queued_jobs",
                          "max_requests_per_minute", "max_audio_duration_seconds",
                          "retention_days", "max_concurrent_sessions", "max_session_seconds")})


def _key(plaintext: str, revoked: bool = False) -> ApiKeyRow:
    now = datetime.now(UTC)
    return ApiKeyRow(key_hash=hash_key(plaintext), key_id="key_" + plaintext[-4:],
                     account_id="acct_1", name="k", prefix=plaintext[:11], created_at=now,
                     updated_at=now, revoked_at=now if revoked else None)


def test_keys_are_found_by_hash_and_revoked_or_unknown_ones_refused() -> None:
    good, revoked = KEY_PREFIX + "a" * 43, KEY_PREFIX + "b" * 43
    redis = _Redis()
    accounts = Accounts(_ClickHouse(_account(), [_key(good), _key(revoked, revoked=True)]),
                        redis, DefaultLimits())  # type: ignore[arg-type]

    def auth(plaintext: str) -> Any:
        return asyncio.run(accounts.authenticate(plaintext))

    found = auth(good)
    assert found is not None and found[0].id == "acct_1"
    assert auth(good) is not None  # from the cache now
    assert auth(revoked) is None
    assert auth(KEY_PREFIX + "c" * 43) is None
    assert auth("a" * 50) is None and auth(KEY_PREFIX + "x" * 300) is None
    # only hashes are held, never the plaintext
    assert all(good not in repr(v) and good not in repr(k) for k, v in redis.values.items())
    # a cache entry whose hash does not match the presented key is not trusted
    redis.values[("key", hash_key(KEY_PREFIX + "d" * 43))] = _key(good).model_dump(mode="json")
    assert auth(KEY_PREFIX + "d" * 43) is None
