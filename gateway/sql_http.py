"""ClickHouse's HTTP interface, read-only, on the console listener (embedded stack).

Enough of it for ``clickhouse-connect``, ``curl`` and Grafana's ClickHouse data
source (HTTP protocol) to run reads on the service's own engine (``stores.sql_readonly``)::

    GET  /ping                          -> Ok.
    GET  /?query=SELECT+1               -> the result, TabSeparated unless asked otherwise
    POST /  (the query in the body, or ``query`` + body, or a form with ``query``)

Parameters, as a ClickHouse server reads them: ``database``, ``default_format``,
``param_<name>`` (``{name:Type}`` values), ``query_id`` (echoed), any ClickHouse setting
(e.g. ``max_execution_time``); the session and transport parameters clients send
(``session_id``, ``wait_end_of_query``, ``compress``, ``client_protocol_version`` ...)
are accepted and ignored: every query runs in a session of its own. Answers carry
``X-ClickHouse-Format``, ``-Timezone``, ``-Query-Id`` and ``-Summary``; errors carry
``X-ClickHouse-Exception-Code`` and ClickHouse's text (``Code: 164. DB::Exception: ...
(READONLY)``) with the status a ClickHouse server would give. The response is
gzip- or deflate-compressed when the client sets ``enable_http_compression=1`` and
accepts that encoding; request bodies are read uncompressed.

Authentication: the console token as the password (HTTP Basic with any user name,
``X-ClickHouse-Key``, or ``password=``), or as a bearer token.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import socket
import uuid
import zlib
from typing import Any

import tornado.web

from security.tokens import bearer_token, token_matches
from stores.sql_readonly import ReadOnlySql, SqlError, SqlRequest, http_status

__all__ = ["ClickHouseHttpHandler", "PingHandler", "sql_routes", "parse_sql_request",
           "content_type"]

_IGNORED = frozenset({
    "query", "database", "default_format", "user", "password", "query_id", "session_id",
    "session_timeout", "session_check", "compress", "decompress", "enable_http_compression",
    "wait_end_of_query", "send_progress_in_http_headers", "http_headers_progress_interval_ms",
    "client_protocol_version", "quota_key", "role", "buffer_size", "readonly",
    "cancel_http_readonly_queries_on_client_close", "http_wait_end_of_query",
    "http_response_buffer_size", "add_http_cors_header", "stacktrace"})
"""Parameters that are not engine settings of the query (or that a per-query session
makes moot); ``readonly`` is always 1 here."""


def parse_sql_request(arguments: dict[str, list[bytes]], body: bytes,
                      form: dict[str, list[bytes]] | None = None) -> SqlRequest:
    """One request's parameters (URL, then form fields) and body, as a :class:`SqlRequest`.

    The query is the ``query`` parameter followed by the body (a ClickHouse server
    reads INSERT data that way), or the ``query`` form field.
    """
    merged: dict[str, str] = {}
    for source in (arguments, form or {}):
        for name, values in source.items():
            if values:
                merged[name] = values[-1].decode("utf-8", "replace")
    query = merged.get("query", "")
    text = "" if form else body.decode("utf-8", "replace")
    query = f"{query}\n{text}" if query and text.strip() else (query or text)
    settings = {k: v for k, v in merged.items()
                if k not in _IGNORED and not k.startswith("param_")}
    params = {k.removeprefix("param_"): v for k, v in merged.items() if k.startswith("param_")}
    return SqlRequest(query=query, format=merged.get("default_format") or "TabSeparated",
                      database=merged.get("database") or None, params=params,
                      settings=settings)


def content_type(fmt: str) -> str:
    """The Content-Type a ClickHouse server sends for an output format."""
    f = fmt.lower()
    if f.startswith(("tabseparated", "tsv")):
        return "text/tab-separated-values; charset=UTF-8"
    if f.startswith("csv"):
        return "text/csv; charset=UTF-8; header=" + ("present" if "names" in f else "absent")
    if f.endswith("eachrow") or "eachrowwith" in f:
        return "application/x-ndjson; charset=UTF-8"
    if f.startswith("json"):
        return "application/json; charset=UTF-8"
    if f == "xml":
        return "application/xml; charset=UTF-8"
    if f.startswith(("pretty", "vertical", "values", "markdown", "raw", "lineasstring",
                     "template", "custom", "prometheus")):
        return "text/plain; charset=UTF-8"
    return "application/octet-stream"


def _given_token(request: Any) -> str:
    headers = request.headers
    auth = headers.get("Authorization", "")
    token = bearer_token(auth)
    if token is not None:
        return token
    if auth.startswith("Basic "):
        try:
            return base64.b64decode(auth[6:].strip()).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return ""
    if "X-ClickHouse-Key" in headers:
        return headers["X-ClickHouse-Key"]
    return request.arguments.get("password", [b""])[-1].decode("utf-8", "replace")


class _ClickHouseStyle(tornado.web.RequestHandler):
    def check_xsrf_cookie(self) -> None:  # credentials travel in headers, not cookies
        pass

    def compute_etag(self) -> None:  # query results are not cacheable documents
        return None

    def set_default_headers(self) -> None:
        self.set_header("X-ClickHouse-Server-Display-Name", socket.gethostname())
        self.set_header("X-Content-Type-Options", "nosniff")


class PingHandler(_ClickHouseStyle):
    """``/ping``: liveness, as a ClickHouse server answers it (no credentials)."""

    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.finish("Ok.\n")

    head = get


class ClickHouseHttpHandler(_ClickHouseStyle):
    """``/``: one read-only query per request (see the module doc)."""

    def initialize(self, sql: ReadOnlySql, token: str) -> None:
        self.sql = sql
        self.token = token

    async def get(self) -> None:
        if "query" not in self.request.arguments:
            self.set_header("Content-Type", "text/html; charset=UTF-8")
            self.finish("Ok.\n")  # what a ClickHouse server answers on its root
            return
        await self._query()

    async def post(self) -> None:
        await self._query()

    async def _query(self) -> None:
        query_id = self.get_argument("query_id", "") or str(uuid.uuid4())
        self.set_header("X-ClickHouse-Query-Id", query_id)
        try:
            version, timezone = await self.sql.describe()
        except SqlError as exc:
            return self._error(exc, "")
        self.set_header("X-ClickHouse-Timezone", timezone)
        given = _given_token(self.request)
        if not token_matches(given, self.token):
            user = self.get_argument("user", "") or "default"
            return self._error(SqlError(516, "AUTHENTICATION_FAILED",
                                        f"{user}: Authentication failed: the password is the "
                                        "console token (<data_dir>/console.token)"), version)
        form = self.request.body_arguments if self._is_form() else None
        try:
            request = parse_sql_request(self.request.query_arguments, self.request.body, form)
            result = await self.sql.run(request)
        except SqlError as exc:
            return self._error(exc, version)
        self.set_header("X-ClickHouse-Format", result.format)
        self.set_header("Content-Type", content_type(result.format))
        self.set_header("X-ClickHouse-Summary", json.dumps({
            "read_rows": str(result.rows_read), "read_bytes": str(result.bytes_read),
            "written_rows": "0", "written_bytes": "0", "total_rows_to_read": "0",
            "result_rows": "0", "result_bytes": str(len(result.body)),
            "elapsed_ns": str(int(result.elapsed_s * 1e9))}))
        encoding, body = self._compressed(result.body)
        if encoding:
            self.set_header("Content-Encoding", encoding)
        self.finish(body)

    def _compressed(self, body: bytes) -> tuple[str | None, bytes]:
        """gzip or deflate when asked for (``enable_http_compression=1`` and Accept-Encoding);
        ClickHouse's own block compression (``compress=1``, lz4/zstd) is not offered."""
        if self.get_argument("enable_http_compression", "0") != "1":
            return None, body
        accepted = [e.split(";")[0].strip().lower()
                    for e in self.request.headers.get("Accept-Encoding", "").split(",")]
        if "gzip" in accepted:
            return "gzip", gzip.compress(body, compresslevel=3)
        if "deflate" in accepted:
            return "deflate", zlib.compress(body, 3)
        return None, body

    def _is_form(self) -> bool:
        kind = self.request.headers.get("Content-Type", "")
        return kind.startswith(("multipart/form-data", "application/x-www-form-urlencoded"))

    def _error(self, exc: SqlError, version: str) -> None:
        self.set_status(http_status(exc.name))
        if exc.name == "AUTHENTICATION_FAILED":
            self.set_header("WWW-Authenticate", 'Basic realm="a5s ClickHouse"')
        self.set_header("X-ClickHouse-Exception-Code", str(exc.code))
        self.set_header("Content-Type", "text/plain; charset=UTF-8")
        self.finish(exc.text(version))


def sql_routes(sql: ReadOnlySql, token: str) -> list[tuple[str, type, dict[str, Any]]]:
    """The routes of the ClickHouse HTTP interface, for the console listener."""
    return [(r"/", ClickHouseHttpHandler, {"sql": sql, "token": token}),
            (r"/ping", PingHandler, {})]
