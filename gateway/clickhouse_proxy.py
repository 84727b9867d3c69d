"""The loopback ClickHouse proxy: extra embedded workers use the owner's chdb.

chdb allows one process per data directory, so in the embedded stack the service
process owns ClickHouse and serves its facade's four operations on the console
listener (127.0.0.1, console token), one route per operation::

    POST /internal/clickhouse/v1/{command|query|insert|ping}

Bodies are JSON in the tagged form of ``stores.clickhouse_wire`` (datetimes,
bytes and mappings survive the trip). Workers started with
``A5S_CLICKHOUSE_URL=a5s+http://127.0.0.1:<console port>`` use it through
``stores.clickhouse.RemoteClickHouse``. Migrations stay with the owner: the
proxy has no route for them.
"""

from __future__ import annotations

import json
from typing import Any

import tornado.web

from schemas.errors import A5sError
from security.tokens import bearer_token, token_matches
from stores.clickhouse_wire import ERRORS, OPERATIONS, decode, encode
from stores.context import Context

__all__ = ["ClickHouseProxyHandler", "clickhouse_proxy_routes"]


class ClickHouseProxyHandler(tornado.web.RequestHandler):
    """One ClickHouse operation of the owner's facade, for a worker on this machine."""

    def initialize(self, ctx: Context, token: str) -> None:
        self.ctx = ctx
        self.token = token

    def check_xsrf_cookie(self) -> None:  # a bearer-token API, not a browser form
        pass

    async def post(self, operation: str) -> None:
        if not token_matches(bearer_token(self.request.headers.get("Authorization")), self.token):
            return self._reply(401, {"error": {"type": "Unauthorized", "log": "bad token"}})
        try:
            args = decode(json.loads(self.request.body or b"{}"))
            result = await self._call(operation, args)
        except A5sError as exc:
            name = type(exc).__name__ if type(exc).__name__ in ERRORS else "InternalError"
            return self._reply(502 if name != "InternalError" else 500, {"error": {
                "type": name, "log": exc.log or exc.message}})
        except (ValueError, TypeError, KeyError) as exc:
            return self._reply(400, {"error": {"type": "InternalError",
                                               "log": f"bad proxy request: {exc!r}"}})
        self._reply(200, {"result": encode(result)})

    async def _call(self, operation: str, args: dict[str, Any]) -> Any:
        ch = self.ctx.ch
        if operation == "command":
            result = await ch.command(args["sql"], args.get("params"))
            # A statement answers a QuerySummary; its counters are what crosses the wire.
            return getattr(result, "summary", result)
        if operation == "query":
            return await ch.query(args["sql"], args.get("params"))
        if operation == "insert":
            return await ch.insert(args["table"], args["rows"])
        return await ch.ping()

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))


def clickhouse_proxy_routes(ctx: Context, token: str) -> list[tuple[str, type, dict[str, Any]]]:
    """The proxy's routes, for the console application of the process that owns chdb."""
    pattern = r"/internal/clickhouse/v1/(" + "|".join(OPERATIONS) + ")"
    return [(pattern, ClickHouseProxyHandler, {"ctx": ctx, "token": token})]
