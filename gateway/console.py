"""The console: account and key administration on its own loopback listener.

Spec 5.4: keys and account settings change only from a console, never with an
API key. It also runs operator maintenance (``POST /console/v1/maintenance/sweep``,
the retention sweep of ``stores.retention``, optionally "as of" a later ``now``).
``a5s admin`` is the client of this API; it authenticates with the
console token (``A5S_CONSOLE_TOKEN``, or the 0600 file ``console.token`` in the
data directory).
"""

from __future__ import annotations

import secrets
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.errors import SessionRequired
from schemas.records import LimitsChanged
from schemas.rows import AccountRow, ApiKeyRow
from schemas.settings import Settings
from security.tokens import bearer_token, token_matches
from topologies.topics import ACCOUNT_EVENTS

from .account import account_resource
from .base import BaseHandler, publish

__all__ = ["console_routes", "console_token", "NewAccount", "AccountChange", "NewKey",
           "CreatedKey", "KeyInfo", "ConsoleAccount", "SweepRequest"]


def console_token(settings: Settings, create: bool = True) -> str:
    """``A5S_CONSOLE_TOKEN``, else the one in ``<data_dir>/console.token``, made there by the
    service's first start; a client (``create=False``) gets FileNotFoundError without one."""
    if settings.console_token.get_secret_value():
        return settings.console_token.get_secret_value()
    path = Path(settings.data_path) / "console.token"
    if not path.exists():
        if not create:
            raise FileNotFoundError(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(32))
        path.chmod(0o600)
    return path.read_text().strip()


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Limits(_Body):
    usage_limit_seconds: float | None = Field(None, ge=0)
    max_concurrent_jobs: int | None = Field(None, ge=1, le=100)
    max_queued_jobs: int | None = Field(None, ge=1)
    max_requests_per_minute: int | None = Field(None, ge=1)
    max_audio_duration_seconds: int | None = Field(None, ge=1)
    retention_days: int | None = Field(None, ge=1)
    max_concurrent_sessions: int | None = Field(None, ge=0)
    max_session_seconds: int | None = Field(None, ge=1)


class NewAccount(_Limits):
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$", max_length=254)
    display_name: str = ""
    tier: str = "free"
    async_enabled: bool = True
    streaming_enabled: bool = True


class AccountChange(_Limits):
    display_name: str | None = None
    tier: str | None = None
    status: Literal["active", "suspended", "disabled"] | None = None
    async_enabled: bool | None = None
    streaming_enabled: bool | None = None


class NewKey(_Body):
    name: str = Field("default", max_length=100)


class KeyInfo(BaseModel):
    key_id: str
    account_id: str
    name: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, row: ApiKeyRow) -> KeyInfo:
        return cls.model_validate(row.model_dump())


class CreatedKey(KeyInfo):
    key: str
    """The plaintext key: shown this once, never stored."""


class ConsoleAccount(BaseModel):
    account: dict[str, Any]
    status: str
    webhook_secret: str | None = None


class ConsoleHandler(BaseHandler):
    def initialize(self, ctx: Any, token: str) -> None:  # type: ignore[override]
        super().initialize(ctx)
        self.token = token

    def prepare(self) -> None:
        super().prepare()
        if not token_matches(bearer_token(self.request.headers.get("Authorization")), self.token):
            raise SessionRequired("The console needs the console token.")

    async def describe(self, row: AccountRow, *, secret: bool = False) -> ConsoleAccount:
        resource = await account_resource(self.ctx, row)
        return ConsoleAccount(account=resource.model_dump(mode="json", by_alias=True),
                              status=row.status,
                              webhook_secret=row.webhook_secret if secret else None)

    async def announce_limits(self, row: AccountRow) -> None:
        await publish(self.ctx, ACCOUNT_EVENTS, row.id,
                                     LimitsChanged(account_id=row.id, limits=row.limits))


class AccountsHandler(ConsoleHandler):
    async def get(self) -> None:
        rows = await self.ctx.accounts.list()
        self.finish({"data": [(await self.describe(r)).model_dump(mode="json") for r in rows]})

    async def post(self) -> None:
        body = self.body_as(NewAccount)
        row = await self.ctx.accounts.create(**body.model_dump())
        self.send(await self.describe(row, secret=True), 201)


class AccountItemHandler(ConsoleHandler):
    async def get(self, account_id: str) -> None:
        self.send(await self.describe(await self.ctx.accounts.get(account_id, fresh=True)))

    async def patch(self, account_id: str) -> None:
        body = self.body_as(AccountChange)
        row = await self.ctx.accounts.update(account_id, **body.model_dump(exclude_none=True))
        await self.announce_limits(row)
        self.send(await self.describe(row))


class KeysHandler(ConsoleHandler):
    async def get(self, account_id: str) -> None:
        keys = await self.ctx.accounts.keys(account_id)
        self.finish({"data": [KeyInfo.of(k).model_dump(mode="json") for k in keys]})

    async def post(self, account_id: str) -> None:
        body = self.body_as(NewKey)
        plaintext, row = await self.ctx.accounts.create_key(account_id, body.name)
        self.send(CreatedKey(key=plaintext, **KeyInfo.of(row).model_dump()), 201)


class KeyItemHandler(ConsoleHandler):
    async def delete(self, key_id: str) -> None:
        self.send(KeyInfo.of(await self.ctx.accounts.revoke_key(key_id)))


class WebhookSecretHandler(ConsoleHandler):
    async def get(self, account_id: str) -> None:
        row = await self.ctx.accounts.get(account_id, fresh=True)
        self.finish({"account_id": row.id, "webhook_secret": row.webhook_secret})

    async def post(self, account_id: str) -> None:
        row = await self.ctx.accounts.rotate_webhook_secret(account_id)
        self.finish({"account_id": row.id, "webhook_secret": row.webhook_secret})


class SweepRequest(_Body):
    now: datetime | None = None
    """Sweep as of this instant (RFC 3339) instead of the clock: what expires by then goes."""


class MaintenanceSweepHandler(ConsoleHandler):
    """``POST /console/v1/maintenance/sweep``: run the retention sweep now (idempotent)."""

    async def post(self) -> None:
        from stores.retention import sweep
        body = self.body_as(SweepRequest) if self.request.body else SweepRequest()
        self.send(await sweep(self.ctx, body.now))


def console_routes(ctx: Any, token: str) -> list[tuple[str, type, dict[str, Any]]]:
    deps = {"ctx": ctx, "token": token}
    return [
        (r"/console/v1/accounts", AccountsHandler, deps),
        (r"/console/v1/accounts/([^/]+)", AccountItemHandler, deps),
        (r"/console/v1/accounts/([^/]+)/keys", KeysHandler, deps),
        (r"/console/v1/keys/([^/]+)", KeyItemHandler, deps),
        (r"/console/v1/accounts/([^/]+)/webhook-secret", WebhookSecretHandler, deps),
        (r"/console/v1/maintenance/sweep", MaintenanceSweepHandler, deps),
    ]
