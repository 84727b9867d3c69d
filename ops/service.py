"""Process entry points: the gateway, the pipeline worker, or both in one process.

The embedded default runs both in one process because chdb allows one process per
data directory. Distributed deployments run ``a5s gateway`` and ``a5s worker``
replicas against a ClickHouse server. Either way the order is: clients and
schema, topics, then serving. Stopping (SIGINT, SIGTERM or SIGHUP) runs the other
way: the gateway stops admitting requests (503 with the envelope, WebSockets 1013)
and lets the admitted ones finish, then the pipeline stops (offsets committed, so
what it had not finished is taken up on the next start), then the clients close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from typing import Any

from schemas.settings import Settings
from stores.context import Context
from stores.kafka import ensure_topics, pace_empty_fetches

__all__ = ["run", "ensure_default_account", "ROLES"]

log = logging.getLogger("a5s")
ROLES = {"gateway", "worker"}
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
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


def _start_http(ctx: Context) -> list[Any]:
    from gateway.app import make_app, make_console_app
    from gateway.base import JSON_BODY_LIMIT
    from gateway.console import console_token
    s = ctx.settings
    # JSON bodies are small; the upload handlers stream and raise this limit per request.
    servers = [make_app(ctx).listen(s.port, address=s.host, max_body_size=JSON_BODY_LIMIT,
                                    idle_connection_timeout=120),
               make_console_app(ctx, console_token(s)).listen(s.console_port,
                                                              address="127.0.0.1")]
    log.info("gateway: API on http://%s:%d, console on 127.0.0.1:%d", s.host, s.port,
             s.console_port)
    return servers


def run(settings: Settings, roles: set[str]) -> int:
    logging.basicConfig(level=settings.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # httpx logs every request URL at INFO: audio_url and webhook_url are client data
    # (presigned URLs carry credentials) and must not outlive their transcript in logs.
    quiet = logging.INFO if settings.log_level == "DEBUG" else logging.WARNING
    for noisy in ("aiokafka", "faust", "mode", "kafka", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(quiet)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if settings.embedded_kafka:
        pace_empty_fetches()
    settings.data_path.mkdir(parents=True, exist_ok=True)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    ctx = Context.build(settings)
    loop.run_until_complete(ensure_topics(settings))
    loop.run_until_complete(ctx.start())
    if "gateway" in roles:
        loop.run_until_complete(ensure_default_account(ctx))
        _start_http(ctx)
    # Worker pidfiles carry the pid: several workers may share a data directory, and the
    # supervisor of ``a5s up`` spots one that died without leaving its group (ops.workers).
    pidfile = settings.data_path / "run" / (
        "service.pid" if roles == ROLES else
        f"worker-{os.getpid()}.pid" if roles == {"worker"} else
        f"{'-'.join(sorted(roles))}.pid")
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text(str(os.getpid()))
    try:
        if "worker" in roles:
            return _run_worker(settings, ctx, loop, roles)
        return _run_gateway(ctx, loop)
    finally:
        if loop.is_closed():  # the Faust worker closes the loop it ran on
            ctx.ch.close_now()
        else:
            with contextlib.suppress(Exception):
                loop.run_until_complete(ctx.close())
        with contextlib.suppress(FileNotFoundError):
            pidfile.unlink()


async def _stop_admitting(ctx: Context) -> None:
    from gateway.base import admission
    log.info("stopping: new requests are refused; %d admitted ones finish, %d live sessions "
             "end", admission(ctx).in_flight, len(admission(ctx).sessions))
    left = await admission(ctx).drain(DRAIN_S)
    if left:
        log.warning("stopping: %d requests or sessions did not finish in %.0f s", left,
                    DRAIN_S)


def _run_gateway(ctx: Context, loop: asyncio.AbstractEventLoop) -> int:
    stop = asyncio.Event()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    print("a5s: ready", flush=True)
    loop.run_until_complete(stop.wait())
    loop.run_until_complete(_stop_admitting(ctx))
    return 0


def _run_worker(settings: Settings, ctx: Context, loop: asyncio.AbstractEventLoop,
                roles: set[str]) -> int:
    import faust

    from pipeline.app import Pipeline, create_app
    from pipeline.engines import Engines

    app = create_app(settings)
    engines = Engines(settings, ctx.metrics.registry)
    pipeline = Pipeline(app, ctx, engines)
    pipeline.register()  # every worker node of topologies.GRAPH, by its handler
    threading.Thread(target=engines.warm, name="models-warm", daemon=True).start()

    @app.task
    async def announce() -> None:
        print("a5s: ready", flush=True)

    serves_http = "gateway" in roles

    class Worker(faust.Worker):  # type: ignore[misc]
        """Faust's worker, stopped after the gateway has stopped admitting requests."""

        stopping: asyncio.Task[None] | None = None

        def _install_signal_handlers_unix(self) -> None:
            super()._install_signal_handlers_unix()
            for sig in STOP_SIGNALS:
                self.loop.add_signal_handler(sig, self._stop_in_order)

        def _stop_in_order(self) -> None:
            if self.stopping is None:
                self.stopping = asyncio.ensure_future(self._drain_then_stop())

        async def _drain_then_stop(self) -> None:
            if serves_http:
                await _stop_admitting(ctx)
            self._schedule_shutdown(signal.SIGTERM)

    worker = Worker(app, loop=loop, loglevel=settings.log_level, quiet=True,
                    redirect_stdouts=False, override_logging=False)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        engines.close()
    return 0
