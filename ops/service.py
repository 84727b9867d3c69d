"""Process entry point for ``a5s serve/gateway/worker``: the gateway, a worker, or both in one process.

The embedded default runs both in one process because chdb allows one process per
data directory. Distributed deployments run ``a5s gateway`` and ``a5s worker``
replicas against a ClickHouse server. Either way the order is: clients and
schema, topics, then serving. Stopping (SIGINT, SIGTERM or SIGHUP) runs the other
way: the gateway stops admitting requests (503 with the envelope, WebSockets 1013)
and lets the admitted ones finish, then the pipeline stops (offsets committed, so
what it had not finished is taken up on the next start), then the clients close.

Each role lives with its package (:mod:`gateway.serve`, :mod:`pipeline.worker`, also run
by ``python -m gateway`` and ``python -m pipeline``); only the combination is made here,
the one place that may import both.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable

from schemas.settings import Settings
from stores.process import service_process

__all__ = ["run", "ROLES"]

ROLES = {"gateway", "worker"}


def _pidfile(roles: set[str]) -> str:
    return ("service.pid" if roles == ROLES else
            f"worker-{os.getpid()}.pid" if roles == {"worker"} else
            f"{'-'.join(sorted(roles))}.pid")


def run(settings: Settings, roles: set[str]) -> int:
    """Serve ``roles`` (a subset of ``ROLES``) in this process until a stop signal."""
    with service_process(settings, _pidfile(roles)) as (ctx, loop):
        before_stop: Callable[[], Awaitable[None]] | None = None
        if "gateway" in roles:
            from gateway import serve
            loop.run_until_complete(serve.ensure_default_account(ctx))
            serve.start_http(ctx)
            if "worker" not in roles:
                return serve.serve(ctx, loop)
            before_stop = functools.partial(serve.stop_admitting, ctx)
        from pipeline.worker import run_worker
        return run_worker(settings, ctx, loop, before_stop=before_stop)
