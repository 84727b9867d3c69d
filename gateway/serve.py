"""The gateway role: the API and console listeners, the first account, stopping in order.

Stopping (SIGINT, SIGTERM or SIGHUP): the gateway stops admitting requests (503 with
the envelope, WebSockets 1013) and lets the admitted ones finish within ``DRAIN_S``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from schemas.settings import Settings
from stores.context import Context
from stores.process import STOP_SIGNALS, service_process

from .app import make_app, make_console_app
from .base import JSON_BODY_LIMIT, admission
from .console import console_token

__all__ = ["DRAIN_S", "ensure_default_account", "run", "serve", "start_http", "stop_admitting"]

log = logging.getLogger("a5s")
DRAIN_S = 10.0
"""How long admitted requests may take to finish once stopping has begun."""


async def ensure_default_account(ctx: Context) -> None:
    """On an empty data directory: one account and one key, printed once."""
    if not ctx.settings.create_default_account or await ctx.accounts.list():
        return
    account = await ctx.accounts.create(email="admin@localhost", display_name="Default account")
    key, _ = await ctx.accounts.create_key(account.id, "default")
    banner = (f"\n  a5s: created the default account {account.id}\n"
              f"  API key (shown once, store it now): {key}\n"
              f"  try: curl -H 'Authorization: Bearer {key}' {ctx.settings.base_url}/v1/account\n")
    print(banner, flush=True)
    keyfile = ctx.settings.data_path / "first-key.txt"
    keyfile.write_text(key + "\n")
    keyfile.chmod(0o600)


def start_http(ctx: Context) -> list[Any]:
    """Listen: the API on ``host:port``, the console on loopback only."""
    s = ctx.settings
    # JSON bodies are small; the upload handlers stream and raise this limit per request.
    servers = [make_app(ctx).listen(s.port, address=s.host, max_body_size=JSON_BODY_LIMIT,
                                    idle_connection_timeout=120),
               make_console_app(ctx, console_token(s)).listen(s.console_port,
                                                              address="127.0.0.1")]
    log.info("gateway: API on http://%s:%d, console on 127.0.0.1:%d", s.host, s.port,
             s.console_port)
    return servers


async def stop_admitting(ctx: Context) -> None:
    """Refuse new requests and wait (at most ``DRAIN_S``) for the admitted ones."""
    log.info("stopping: new requests are refused; %d admitted ones finish, %d live sessions "
             "end", admission(ctx).in_flight, len(admission(ctx).sessions))
    left = await admission(ctx).drain(DRAIN_S)
    if left:
        log.warning("stopping: %d requests or sessions did not finish in %.0f s", left,
                    DRAIN_S)


def serve(ctx: Context, loop: asyncio.AbstractEventLoop) -> int:
    """Run until a stop signal, then drain (the gateway alone; a worker drains it itself)."""
    stop = asyncio.Event()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    print("a5s: ready", flush=True)
    loop.run_until_complete(stop.wait())
    loop.run_until_complete(stop_admitting(ctx))
    return 0


def run(settings: Settings) -> int:
    """The gateway alone (``python -m gateway``, ``a5s gateway``)."""
    with service_process(settings, "gateway.pid") as (ctx, loop):
        loop.run_until_complete(ensure_default_account(ctx))
        start_http(ctx)
        return serve(ctx, loop)
