"""Admission and settlement of live sessions: the account side of ``WSS /v1/realtime``.

Injected into :class:`gateway.realtime.StreamSocket` through ``initialize()`` (the route
table builds one per process), so the socket handler holds no accounting of its own.

* **admit**: the account has usage left and fewer than ``max_concurrent_sessions`` live
  sessions (a lease in Redis, shared by every gateway replica); gives the session's limit.
* **renew** / **release**: the lease lives ``lease_ttl_s`` unless renewed, so a gateway
  that dies frees its sessions' places by itself.
* **settle**: the session's usage goes to the accounts agent as ``SessionClosed`` on
  ``account-events``, the path of every other usage count: the agent adds it to the ledger
  once per session id and records the ``stream`` usage event.
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
        ledger = await self.ctx.redis.ledger(account.id)
        quota_ms = int(account.usage_limit_seconds * 1000)
        used_ms = int(float(ledger["used"]) * 1000)
        remaining = quota_ms - used_ms - int(float(ledger["reserved"]) * 1000)
        if remaining <= 0:
            raise StreamError(StreamErrorCode.quota_unavailable,
                              "The account's usage limit is used up.")
        if not await self.ctx.redis.lease_session(account.id, session_id,
                                                  account.max_concurrent_sessions,
                                                  self.opts.lease_ttl_s):
            raise StreamError(StreamErrorCode.quota_unavailable,
                              f"At most {account.max_concurrent_sessions} streaming sessions "
                              "may be live at once.")
        self.ctx.metrics.live_sessions.inc()
        limit_ms = int(min(account.max_session_seconds * 1000, self.opts.max_session_s * 1000,
                           remaining))
        return Admitted(limit_ms, quota_ms, used_ms)

    async def opened(self, principal: Principal, session_id: str) -> None:
        """The session is live on a worker."""
        account_id = principal.account.id
        await publish(self.ctx, ACCOUNT_EVENTS, account_id, SessionOpened(
            account_id=account_id, session_id=session_id, at=datetime.now(UTC)))

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
