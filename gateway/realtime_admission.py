"""Admission and settlement of live sessions: the account side of ``WSS /v1/realtime``.

Injected into :class:`gateway.realtime.StreamSocket` through ``initialize()`` (the route
table builds one per process), so the socket handler holds no accounting of its own.

* **admit**: the account has usage left and fewer than ``max_concurrent_sessions`` live
  sessions (a lease in Redis, shared by every gateway replica); gives the session's limit,
  held in Redis beside the lease until the ledger holds it (``RedisStore.admit_session``),
  so sessions admitted at once do not share one remainder.
* **renew** / **release**: the lease lives ``lease_ttl_s`` unless renewed, so a gateway
  that dies frees its sessions' places by itself.
* **opened**: ``SessionOpened`` on ``account-events`` has the accounts agent hold the
  session's limit as reserved usage (the ledger's ``reserved``, which every admission reads).
* **settle**: the session's usage goes to the accounts agent as ``SessionClosed`` on
  ``account-events``, the path of every other usage count: the agent frees the hold, adds
  the usage to the ledger once per session id and records the ``stream`` usage event.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime

from schemas.errors import A5sError, StreamError, StreamErrorCode
from schemas.records import SessionClosed, SessionOpened
from schemas.settings import RealtimeSettings
from stores.context import Context
from topologies.topics import ACCOUNT_EVENTS

from .base import Principal, publish

__all__ = ["Admitted", "StreamAdmission"]


@dataclass(frozen=True, slots=True)
class Admitted:
    """What ``ready`` reports: the session's audio limit and the account's usage, ms."""

    limit_ms: int
    quota_ms: int
    used_ms: int


class StreamAdmission:
    """Admits, keeps and settles the live sessions of one gateway process."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx  # read on use: the route table is built before the stores open

    @property
    def opts(self) -> RealtimeSettings:
        return self.ctx.settings.realtime

    async def admit(self, principal: Principal, session_id: str) -> Admitted:
        """Take a live-session place for ``session_id``.

        Raises:
            StreamError: ``quota_unavailable`` when no usage is left or every place is taken.
        """
        account = principal.account
        quota_ms = int(account.usage_limit_seconds * 1000)
        given, used_ms = await self.ctx.redis.admit_session(
            account.id, session_id, places=account.max_concurrent_sessions, quota_ms=quota_ms,
            cap_ms=int(min(account.max_session_seconds, self.opts.max_session_s) * 1000),
            ttl_s=self.opts.lease_ttl_s)
        if given == 0:
            raise StreamError(StreamErrorCode.quota_unavailable,
                              "The account's usage limit is used up.")
        if given < 0:
            raise StreamError(StreamErrorCode.quota_unavailable,
                              f"At most {account.max_concurrent_sessions} streaming sessions "
                              "may be live at once.")
        self.ctx.metrics.live_sessions.inc()
        return Admitted(given, quota_ms, used_ms)

    async def opened(self, principal: Principal, session_id: str, limit_ms: int) -> None:
        """The session is live on a worker: the accounts agent holds ``limit_ms`` of the
        account's usage for it until ``settle``, so batch jobs and later sessions see it."""
        account_id = principal.account.id
        await publish(self.ctx, ACCOUNT_EVENTS, account_id, SessionOpened(
            account_id=account_id, session_id=session_id, at=datetime.now(UTC),
            limit_ms=limit_ms))

    async def renew(self, principal: Principal, session_id: str) -> None:
        """Extend the lease; a Redis blip is left to the next renewal."""
        account = principal.account
        with contextlib.suppress(A5sError):
            await self.ctx.redis.lease_session(account.id, session_id,
                                               account.max_concurrent_sessions,
                                               self.opts.lease_ttl_s)

    async def release(self, principal: Principal, session_id: str) -> None:
        """Free the place (idempotent; an expired lease is already free)."""
        self.ctx.metrics.live_sessions.dec()
        with contextlib.suppress(Exception):
            await self.ctx.redis.release_session(principal.account.id, session_id)

    async def settle(self, principal: Principal, session_id: str, audio_ms: int,
                     billed_ms: int) -> int:
        """Count the session's usage (once per session id, by the accounts agent).

        Returns:
            the account's usage after this session, ms.
        """
        account, key = principal.account, principal.key
        # The agent cannot have counted this session before it is published.
        used_before = float((await self.ctx.redis.ledger(account.id))["used"])
        await publish(self.ctx, ACCOUNT_EVENTS, account.id, SessionClosed(
            account_id=account.id, session_id=session_id, key_id=key.key_id,
            audio_ms=audio_ms, billed_ms=billed_ms, at=datetime.now(UTC)))
        return int(used_before * 1000) + billed_ms
