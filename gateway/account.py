"""``GET /v1/models``, ``GET /v1/account`` and ``GET /health``."""

from __future__ import annotations

from schemas.api import ASYNC_MODEL, STREAMING_MODEL, Account, Health, model_list
from schemas.rows import AccountRow
from stores.context import Context

from .base import BaseHandler

__all__ = ["ModelsHandler", "AccountHandler", "HealthHandler", "account_resource"]


async def account_resource(ctx: Context, account: AccountRow) -> Account:
    """The Account resource with live figures from the ledger snapshot and the queue set."""
    ledger = await ctx.redis.ledger(account.id)
    queued = await ctx.redis.queued_count(account.id)
    return Account(id=account.id, email=account.email, display_name=account.display_name,
                   created_at=account.created_at,
                   status="suspended" if account.status == "suspended" else "active",
                   tier=account.tier,
                   usage_limit=account.usage(float(ledger["used"]), float(ledger["reserved"])),
                   models=account.models(queued, int(ledger["processing"])))


def engines(ctx: Context) -> dict[str, str]:
    """Model id -> engine, from the settings the service started with."""
    m = ctx.settings.models
    return {ASYNC_MODEL: m.batch_engine, STREAMING_MODEL: m.streaming_engine}


class ModelsHandler(BaseHandler):
    QUERY = {"GET": ()}

    async def get(self) -> None:
        self.send(model_list(engines(self.ctx)))


class AccountHandler(BaseHandler):
    QUERY = {"GET": ()}

    async def get(self) -> None:
        principal = await self.authenticate()
        self.send(await account_resource(self.ctx, principal.account))


class HealthHandler(BaseHandler):
    QUERY = {"GET": ()}

    async def get(self) -> None:
        components = await self.ctx.health()
        ok = all(c.ok for c in components.values())
        self.send(Health(status="ok" if ok else "degraded", components=components,
                         engines=engines(self.ctx)), 200 if ok else 503)
