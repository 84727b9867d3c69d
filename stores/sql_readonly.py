"""Read-only SQL on the embedded ClickHouse engine, for operators and dashboards.

chdb runs one engine per process and data directory, owned by the service, so
nothing outside the service can open it. The engine accepts any number of
connections, each with its own session settings; every request gets a fresh one:
the caller's settings are applied with ``SET``, then ``SET readonly = 1`` locks
the session, so ClickHouse itself refuses writes, DDL, further settings changes and
table functions (``file``, ``url``) with its own ``READONLY`` error (code 164).
Settings from the request are accepted before the lock (Grafana's data source sets
``max_execution_time`` on every query), which a ClickHouse ``readonly = 1`` user
would be refused; nothing else of ``readonly`` is relaxed.

Three things ``readonly`` lets through act on the service itself, so they are
refused before the engine sees the query (:func:`check_read_only`): more than one
statement (chdb runs them all), ``INTO OUTFILE`` (a file written by the service
process) and ``KILL`` (the service's own queries run as the same user). Only a
statement that starts with ``SELECT``, ``WITH``, ``SHOW``, ``DESCRIBE``, ``EXISTS``
or ``EXPLAIN`` runs.

Queries run on a pool of their own, never on the thread the pipeline's ClickHouse
calls use, with one thread per query (``max_threads = 1`` unless the request says
otherwise): the cores belong to the models.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ReadOnlySql", "SqlRequest", "SqlResult", "SqlError", "check_read_only",
           "output_format", "http_status", "READ_STATEMENTS"]

READ_STATEMENTS = frozenset({"SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXISTS", "EXPLAIN"})
DEFAULT_SETTINGS = {"max_threads": "1", "max_execution_time": "300",
                    "max_result_bytes": str(512 << 20)}
"""Applied unless the request sets them: one core, five minutes, a result of at most
512 MiB (it is held in the service's memory until sent)."""

_TOKEN = re.compile(r"""
      (?P<space>\s+)
    | (?P<comment>--[^\n]*|\#[^\n]*|/\*.*?(?:\*/|\Z))
    | (?P<string>'(?:[^'\\]|\\.|'')*(?:'|\Z))
    | (?P<quoted>"(?:[^"\\]|\\.|"")*(?:"|\Z)|`(?:[^`\\]|\\.|``)*(?:`|\Z))
    | (?P<heredoc>\$(?P<tag>[A-Za-z0-9_]*)\$.*?(?:\$(?P=tag)\$|\Z))
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<other>.)
""", re.VERBOSE | re.DOTALL)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class SqlError(Exception):
    """A ClickHouse-style error: its numeric code, its name and the message."""

    code: int
    name: str
    message: str

    def text(self, version: str = "") -> str:
        """The body a ClickHouse server sends: ``Code: N. DB::Exception: ... (NAME)``."""
        tail = f" (version {version})" if version else ""
        return f"Code: {self.code}. DB::Exception: {self.message}. ({self.name}){tail}\n"

    @classmethod
    def from_engine(cls, exc: BaseException) -> SqlError:
        """The engine's own error text, parsed (chdb nests ``Code: N. DB::Exception:``)."""
        text = str(exc).strip()
        code = re.search(r"Code: (\d+)\.", text)
        name = re.search(r"\(([A-Z][A-Z0-9_]+)\)(?: \(version [^)]*\))?\.?\s*$", text)
        message = text[text.find("Code:"):] if "Code:" in text else text
        while True:
            stripped = re.sub(r"^Code: \d+\. DB::Exception: ", "", message)
            if stripped == message:
                break
            message = stripped
        message = re.sub(r"(?:\s*\([A-Z][A-Z0-9_]+\)(?: \(version [^)]*\))?\.?)+\s*$", "",
                         message).rstrip(". ")
        return cls(int(code.group(1)) if code else 1002,
                   name.group(1) if name else "UNKNOWN_EXCEPTION", message or text)


READONLY = 164
SYNTAX_ERROR = 62
UNKNOWN_SETTING = 115
UNKNOWN_FORMAT = 73
INTO_OUTFILE_NOT_ALLOWED = 358


def _tokens(sql: str) -> list[tuple[str, str, int]]:
    """Significant tokens as ``(kind, text, parenthesis depth)``; comments and space dropped."""
    out, depth = [], 0
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup if m.lastgroup != "tag" else "heredoc"
        if kind in ("space", "comment"):
            continue
        text = m.group()
        if text == ")":
            depth = max(0, depth - 1)
        out.append((kind or "other", text, depth))
        if text == "(":
            depth += 1
    return out


def check_read_only(sql: str) -> None:
    """Refuse what ``readonly`` would let reach the service itself (see the module doc).

    Raises:
        SqlError: ``SYNTAX_ERROR`` for no statement or several, ``READONLY`` for a
            statement that is not a read, ``INTO_OUTFILE_NOT_ALLOWED``.
    """
    tokens = _tokens(sql)
    while tokens and tokens[-1][1] == ";":
        tokens.pop()
    if not tokens:
        raise SqlError(SYNTAX_ERROR, "SYNTAX_ERROR", "Syntax error: Empty query")
    if any(text == ";" for _, text, _ in tokens):
        raise SqlError(SYNTAX_ERROR, "SYNTAX_ERROR",
                       "Syntax error (Multi-statements are not allowed)")
    first = tokens[0][1].upper() if tokens[0][0] == "word" else tokens[0][1]
    if first not in READ_STATEMENTS and first != "(":
        raise SqlError(READONLY, "READONLY",
                       f"Cannot execute query in readonly mode: {first} is not a read "
                       "(SELECT, WITH, SHOW, DESCRIBE, EXISTS, EXPLAIN)")
    words = [text.upper() for kind, text, _ in tokens if kind == "word"]
    if any(a == "INTO" and b == "OUTFILE" for a, b in zip(words, words[1:])):
        raise SqlError(INTO_OUTFILE_NOT_ALLOWED, "INTO_OUTFILE_NOT_ALLOWED",
                       "INTO OUTFILE is not allowed")


def output_format(sql: str, known: frozenset[str]) -> str | None:
    """The format a top-level ``FORMAT name`` clause asks for, if ``name`` is in ``known``."""
    tokens = _tokens(sql)
    found = None
    for (kind, text, depth), nxt in zip(tokens, tokens[1:]):
        if kind == "word" and depth == 0 and text.upper() == "FORMAT" and nxt[0] == "word" \
                and nxt[1] in known:
            found = nxt[1]
    return found


_BAD_REQUEST = ("SYNTAX_ERROR", "CANNOT_PARSE", "TYPE_MISMATCH", "ILLEGAL_", "BAD_ARGUMENTS",
                "NUMBER_OF_ARGUMENTS", "INCORRECT_", "BAD_QUERY_PARAMETER",
                "UNKNOWN_QUERY_PARAMETER", "EMPTY_QUERY")


def http_status(name: str) -> int:
    """The HTTP status a ClickHouse server answers an error with (its HTTP handler's map)."""
    if name in ("AUTHENTICATION_FAILED", "REQUIRED_PASSWORD"):
        return 401
    if name in ("READONLY", "ACCESS_DENIED", "QUERY_IS_PROHIBITED", "INTO_OUTFILE_NOT_ALLOWED",
                "FUNCTION_NOT_ALLOWED"):
        return 403
    if name in ("UNKNOWN_QUERY_PARAMETER",):
        return 400
    if name.startswith("UNKNOWN_"):
        return 404
    if name.startswith(_BAD_REQUEST):
        return 400
    if name == "QUERY_IS_TOO_LARGE":
        return 413
    if name == "NOT_IMPLEMENTED":
        return 501
    return 500


@dataclass(frozen=True)
class SqlRequest:
    query: str
    format: str = "TabSeparated"
    """Used when the query has no ``FORMAT`` clause (the HTTP ``default_format``)."""
    database: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    """``{name:Type}`` values, in ClickHouse's escaped text form (HTTP ``param_<name>``)."""
    settings: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SqlResult:
    body: bytes
    format: str
    rows_read: int
    bytes_read: int
    elapsed_s: float


class ReadOnlySql:
    """Read-only queries on the embedded engine at ``path`` (one connection per query).

    Args:
        path: the chdb data directory the service's engine uses (exactly as it opened it).
        database: the database a query uses when the request names none.
        threads: queries that run at once; more wait for a thread.
        before: awaited before each query: the service's engine inserts the rows its
            insert log holds, so a query sees every row the service has taken.
    """

    def __init__(self, path: str, database: str, threads: int = 2,
                 before: Callable[[], Awaitable[None]] | None = None) -> None:
        self.path = path
        self.database = database
        self._before = before
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="sql")
        self._catalog_lock = threading.Lock()
        self._settings: frozenset[str] = frozenset()
        self._formats: frozenset[str] = frozenset()
        self.version = ""
        self.timezone = "UTC"

    @classmethod
    def for_dsn(cls, dsn: str, database: str,
                before: Callable[[], Awaitable[None]] | None = None) -> ReadOnlySql:
        """From the service's ``chdb://path`` DSN."""
        return cls(dsn.removeprefix("chdb://"), database, before=before)

    async def run(self, request: SqlRequest) -> SqlResult:
        if self._before is not None:
            await self._before()
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._run, request)

    async def describe(self) -> tuple[str, str]:
        """The engine's version and time zone (for response headers)."""
        await asyncio.get_running_loop().run_in_executor(self._pool, self._catalog)
        return self.version, self.timezone

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _connect(self) -> Any:
        import chdb
        try:
            return chdb.connect(f"file:{self.path}")
        except Exception as exc:  # chdb raises plain RuntimeErrors for engine errors
            raise SqlError.from_engine(exc) from exc

    def _catalog(self) -> None:
        with self._catalog_lock:
            if self._formats:
                return
            conn = self._connect()
            try:
                self._settings = frozenset(conn.query(
                    "SELECT name FROM system.settings", "TabSeparated").bytes().decode().split())
                self._formats = frozenset(conn.query(
                    "SELECT name FROM system.formats WHERE is_output",
                    "TabSeparated").bytes().decode().split())
                self.version, self.timezone = conn.query(
                    "SELECT version(), timezone()", "TabSeparated").bytes().decode().split()
            finally:
                conn.close()

    def _run(self, request: SqlRequest) -> SqlResult:
        self._catalog()
        check_read_only(request.query)
        fmt = output_format(request.query, self._formats) or request.format
        if fmt not in self._formats:
            raise SqlError(UNKNOWN_FORMAT, "UNKNOWN_FORMAT", f"Unknown output format {fmt}")
        settings = {**DEFAULT_SETTINGS, **request.settings}
        for name in settings:
            if not _NAME.match(name) or name not in self._settings \
                    and not name.startswith("custom_"):
                raise SqlError(UNKNOWN_SETTING, "UNKNOWN_SETTING",
                               f"Setting {name} is neither a builtin setting nor started "
                               "with the prefix 'custom_'")
        started = time.perf_counter()
        conn = self._connect()
        try:
            for name, value in settings.items():
                conn.query(f"SET {name} = {_literal(value)}", "TabSeparated")
            conn.query("SET readonly = 1", "TabSeparated")
            conn.query(f"USE {_identifier(request.database or self.database)}", "TabSeparated")
            result = conn.query(request.query, request.format, params=request.params)
            body = result.bytes()
            return SqlResult(body=body, format=fmt, rows_read=int(result.rows_read()),
                             bytes_read=int(result.bytes_read()),
                             elapsed_s=time.perf_counter() - started)
        except SqlError:
            raise
        except Exception as exc:  # the engine's errors, translated once, here
            raise SqlError.from_engine(exc) from exc
        finally:
            conn.close()


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"
