"""ClickHouse through clickhouse-connect: in-process chdb (``chdb://path``) or a server (``http://``).

The driver is blocking, so every call runs on one dedicated thread: chdb wants a
single owner, and it keeps the event loop free. Inserts into one table that wait
for that thread are written together (group commit: one part instead of many,
and each caller still returns only once its rows are stored). On the embedded engine
the job path's rows (:data:`LOGGED_TABLES`) are kept in an insert log and inserted
once a ``batch_s`` (:mod:`stores.insert_log`); every statement first inserts what the
log holds, so a read sees every row taken before it. Schema comes from
the versioned DDL files in ``stores/ddl`` applied once each, in order; the embedded
engine's tables then get the settings of :data:`EMBEDDED_TABLE_SETTINGS`
(:meth:`ClickHouse.set_table_settings`): small parts packed, one file each, and outdated
parts removed on one thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from schemas.errors import InternalError, UpstreamTimeout, UpstreamUnavailable

from .insert_log import InsertLog

__all__ = ["ClickHouse", "RemoteClickHouse", "map_clickhouse_errors", "MIGRATIONS",
           "PROXY_SCHEME", "LOGGED_TABLES", "INSERT_LOG_DIR", "EMBEDDED_TABLE_SETTINGS"]

log = logging.getLogger(__name__)
MIGRATIONS = "ddl"
PROXY_SCHEME = "a5s+http://"
"""ClickHouse through the loopback proxy of the process that owns an embedded chdb."""
PACKED_PART_BYTES = 10 * 1024 * 1024
"""Embedded parts under this many bytes (uncompressed) are written as one file: the size
under which ClickHouse writes a part compact (``min_bytes_for_wide_part``)."""
EMBEDDED_TABLE_SETTINGS = {"min_bytes_for_full_part_storage": PACKED_PART_BYTES,
                           "concurrent_part_removal_threshold": 1_000_000_000}
"""What every MergeTree table of the embedded engine is altered to (a server's tables are
its operator's).

``min_bytes_for_full_part_storage``: parts under :data:`PACKED_PART_BYTES` are packed.
Every insert writes a part, and a full part is ten files (data, marks, index, checksums
and six of metadata): on the job path's five inserts a job, and the merges after them,
creating and deleting those files took the engine's threads more CPU than the rows did.
A packed part is one file; larger parts stay full, so a large table reads as before.

``concurrent_part_removal_threshold``: outdated parts are removed on the cleaning thread,
however many there are. At 100 or more at once (a table's parts merged after a busy
minute), ClickHouse removes them on up to 128 threads of its global pool, which keeps
idle threads for the life of the process (it cannot be told to keep fewer on chdb), and
an idle thread that later runs a statement's work keeps three files open for its
profile counters (``/proc/<pid>/task/<tid>/stat``, ``schedstat``, ``io``): the service's
open descriptors grew by about one every fifteen jobs, towards some 400 more, with 130
threads doing nothing (``python -m bench.soak``; docs/operations.md, *Over days*)."""
LOGGED_TABLES = frozenset({"transcripts", "transcript_results", "usage_events"})
"""The job path's tables: a few rows a job each, written through the insert log."""
INSERT_LOG_DIR = "a5s_insert_log"
"""The insert log's directory, in the embedded engine's data directory."""
LOG_ROWS_MAX = 5_000
"""Rows in the insert log that start a batch before its time."""


@contextlib.contextmanager
def map_clickhouse_errors() -> Iterator[None]:
    from clickhouse_connect.driver import exceptions as ch_exc
    try:
        yield
    except ch_exc.OperationalError as exc:
        msg = str(exc)
        if "timed out" in msg.lower() or "timeout" in msg.lower():
            raise UpstreamTimeout(log=msg) from exc
        raise UpstreamUnavailable(log=msg) from exc
    except ch_exc.ClickHouseError as exc:
        raise InternalError(log=f"clickhouse: {exc}") from exc


def _insert_statement(table: str, names: Sequence[str]) -> str:
    """The rows travel in the statement, as JSON: with chdb, clickhouse-connect's own
    insert writes them to a temporary file for ``INSERT ... FROM INFILE``, which cost the
    process about 6.6 ms of CPU per one-row insert, against 4.8 ms this way. A few rows
    are parsed faster on the calling thread than handed to a parsing pool (5.5 ms with it)."""
    columns = ", ".join(f"`{n}`" for n in names)
    return (f"INSERT INTO {table} ({columns}) SETTINGS date_time_input_format='best_effort', "
            "input_format_parallel_parsing=0 FORMAT JSONCompactEachRow")


def _json_row(row: Sequence[Any]) -> str:
    return json.dumps(row, ensure_ascii=False, default=_json_value)


def _json_value(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    raise TypeError(f"a {type(value).__name__} is not a ClickHouse column value")


def _nothing(client: Any) -> None:
    """A statement-less call: what runs first on the ClickHouse thread runs alone."""


class _PendingInsert:
    """Rows for one table and column list, gathered until the ClickHouse thread takes them."""

    def __init__(self, data: list[list[Any]]) -> None:
        self.data = data
        self.done: asyncio.Future[Any] | None = None


class ClickHouse:
    """Async facade over one clickhouse-connect client; tables are ``{database}.{name}``."""

    def __init__(self, dsn: str, database: str = "a5s", batch_s: float = 0.0) -> None:
        self.dsn = dsn
        self.database = database
        self.batch_s = batch_s
        """On the embedded engine, how long the job path's rows wait in the insert log
        (0: inserted at once, each caller waiting for its part)."""
        self._log: InsertLog | None = None
        self._stopping = threading.Event()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="clickhouse")
        self._client: Any = None
        self._pending: dict[tuple[int, str, tuple[str, ...]], _PendingInsert] = {}
        self._pending_lock = threading.Lock()
        self.inserts = 0
        """Insert statements run (several callers' rows may share one)."""
        self.queries = 0
        """Other statements run: queries and commands."""
        self.cpu_s = 0.0
        """CPU time of the ClickHouse thread in the driver and the engine's own work on
        it (chdb runs a statement on the calling thread; its merges are not counted)."""

    @property
    def logged_rows(self) -> int:
        """Rows in the insert log, taken and not yet inserted."""
        return self._log.pending if self._log is not None else 0

    @property
    def embedded(self) -> bool:
        return self.dsn.startswith("chdb://")

    def _connect(self) -> Any:
        import clickhouse_connect
        if self._client is None:
            if self.embedded:
                Path(urlsplit(self.dsn).path).mkdir(parents=True, exist_ok=True)
                # The pipeline asks for a row or writes a few at a time, on a machine whose
                # cores run the models: one thread per query costs less than a parallel plan.
                self._client = clickhouse_connect.get_client(dsn=self.dsn,
                                                             settings={"max_threads": 1})
            else:
                self._client = clickhouse_connect.get_client(
                    dsn=self.dsn, connect_timeout=5, send_receive_timeout=30)
        return self._client

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """On the ClickHouse thread: the insert log's rows first, then ``fn(client, ...)``."""
        started = time.thread_time()
        try:
            if self._log is not None and self._log.pending:
                self._insert_log()
            with map_clickhouse_errors():
                return fn(self._connect(), *args, **kwargs)
        finally:
            self.cpu_s += time.thread_time() - started

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, lambda: self._call(fn, *args, **kwargs))

    def table(self, name: str) -> str:
        return f"{self.database}.{name}"

    async def start(self) -> None:
        await self._run(_nothing)
        await self.migrate()
        if self.embedded:
            await self.set_table_settings()
            if self.batch_s > 0 and self._log is None:
                self._log = InsertLog(Path(urlsplit(self.dsn).path) / INSERT_LOG_DIR)
                await self.flush()  # what an earlier process left, before anything reads
                threading.Thread(target=self._insert_log_every, name="clickhouse-log",
                                 daemon=True).start()

    async def flush(self) -> None:
        """Insert what the insert log holds now (every statement does so first)."""
        await self._run(_nothing)

    def _insert_log_every(self) -> None:
        while not self._stopping.wait(self.batch_s):
            if self._log is not None and self._log.pending:
                try:
                    self._pool.submit(self._call, _nothing).result()
                except RuntimeError:  # the pool was shut down
                    return
                except Exception as exc:  # the engine unreachable: the rows stay in the log
                    log.warning("clickhouse: the insert log's batch waits: %r", exc)

    def _insert_log(self) -> None:
        """On the ClickHouse thread: the insert log's rows, one statement a table. A batch
        that fails goes back to the log whole (inserted twice, its rows replace
        themselves); a row the engine refuses on its own is kept aside."""
        from clickhouse_connect.driver.exceptions import ClickHouseError, OperationalError
        assert self._log is not None
        batch = self._log.take()
        if batch is None:
            return
        try:
            client = self._connect()
            for (table, names), rows in batch.rows.items():
                try:
                    self._insert_rows(client, table, names, rows)
                except ClickHouseError as exc:
                    if isinstance(exc, OperationalError):
                        raise
                    for row in rows:  # which row is refused: each alone
                        try:
                            self._insert_rows(client, table, names, [row])
                        except ClickHouseError as refused:
                            if isinstance(refused, OperationalError):
                                raise
                            self._log.reject(table, names, row, str(refused))
        except Exception as exc:  # the rows stay in the log, for the next statement or tick
            self._log.give_back(batch)
            log.warning("clickhouse: %d logged rows not inserted yet: %r", len(batch), exc)
            return
        self._log.done(batch)

    def _insert_rows(self, client: Any, table: str, names: Sequence[str],
                     rows: Sequence[str]) -> None:
        """``rows``: each a JSON array of ``names``' values (``_json_row``)."""
        self.inserts += 1
        client.command(_insert_statement(self.table(table), names), data="\n".join(rows))

    async def set_table_settings(self) -> list[str]:
        """Give the embedded engine's MergeTree tables :data:`EMBEDDED_TABLE_SETTINGS` where
        they lack one (an ``ALTER TABLE ... MODIFY SETTING``); returns the tables changed."""
        rows = await self.query(
            "SELECT name, engine_full FROM system.tables WHERE database = {d:String} "
            "AND engine LIKE '%MergeTree'", {"d": self.database})
        wanted = [f"{k} = {v}" for k, v in EMBEDDED_TABLE_SETTINGS.items()]
        changed = []
        for row in rows:
            missing = [s for s in wanted if s not in row["engine_full"]]
            if missing:
                await self.command(f"ALTER TABLE {self.table(row['name'])} MODIFY SETTING "
                                   + ", ".join(missing))
                changed.append(row["name"])
        return changed

    async def close(self) -> None:
        def shut(c: Any) -> None:
            c.close()
        self._stopping.set()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._run(shut)  # inserts the log's rows first
            self._client = None
        self._pool.shutdown(wait=True)
        self._close_log()

    def close_now(self) -> None:
        """Close without an event loop (at process exit), so chdb flushes its files."""
        def shut(c: Any) -> None:
            c.close()
        self._stopping.set()
        if self._client is not None:
            with contextlib.suppress(Exception):  # RuntimeError: the pool is shut down
                self._pool.submit(self._call, shut).result(timeout=30)  # the log first
            self._client = None
        self._pool.shutdown(wait=True)
        self._close_log()

    def _close_log(self) -> None:
        """Rows the log still holds (an insert that failed) stay in its segments, for the
        next start."""
        if self._log is not None:
            self._log.close()
            self._log = None

    async def command(self, sql: str, params: dict[str, Any] | None = None) -> Any:
        self.queries += 1
        return await self._run(lambda c: c.command(sql.replace("{db}", self.database),
                                                   parameters=params))

    async def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rows as dicts; ``{db}`` in the SQL becomes the database, ``{name:Type}`` binds params."""
        self.queries += 1

        def run(c: Any) -> list[dict[str, Any]]:
            result = c.query(sql.replace("{db}", self.database), parameters=params)
            names = result.column_names
            return [dict(zip(names, row)) for row in result.result_rows]
        return await self._run(run)

    async def insert(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """Store ``rows`` (dicts with the same keys); returns once they are written, or,
        for a table of :data:`LOGGED_TABLES` on the embedded engine, once they are in the
        insert log, which every later statement inserts first.

        Rows for the same table and columns that arrive while earlier work holds the
        ClickHouse thread join one pending insert, so a busy service writes one part per
        table per turn of that thread instead of one per row: with chdb, the insert itself
        (a new part on disk) costs far more than its rows.
        """
        if not rows:
            return
        names = tuple(rows[0])
        data = [[row[n] for n in names] for row in rows]
        if self._log is not None and table in LOGGED_TABLES:
            self._log.append(table, names, [_json_row(row) for row in data])
            if self._log.pending >= LOG_ROWS_MAX:
                self._pool.submit(self._call, _nothing)
            return
        key = (id(asyncio.get_running_loop()), table, names)  # a future serves one loop
        with self._pending_lock:
            pending = self._pending.get(key)
            if pending is not None:
                pending.data.extend(data)
            else:
                pending = self._pending[key] = _PendingInsert(data)
        if pending.done is None:  # the first caller sends it; later ones wait for it
            pending.done = asyncio.ensure_future(self._run(self._insert_pending, key, pending))
        await asyncio.shield(pending.done)

    def _insert_pending(self, client: Any, key: tuple[int, str, tuple[str, ...]],
                        pending: _PendingInsert) -> None:
        with self._pending_lock:  # from here on, new rows start a pending insert of their own
            if self._pending.get(key) is pending:
                del self._pending[key]
        _, table, names = key
        self._insert_rows(client, table, names, [_json_row(row) for row in pending.data])

    async def ping(self) -> float:
        started = time.perf_counter()
        await self._run(lambda c: c.command("SELECT 1"))
        return (time.perf_counter() - started) * 1000

    async def migrate(self) -> list[str]:
        """Apply the DDL files not yet recorded in ``schema_migrations``; returns those applied."""
        await self.command(f"CREATE DATABASE IF NOT EXISTS {self.database}")
        await self.command("CREATE TABLE IF NOT EXISTS {db}.schema_migrations "
                           "(version String, applied_at DateTime64(3, 'UTC')) "
                           "ENGINE = ReplacingMergeTree ORDER BY version")
        done = {r["version"] for r in await self.query(
            "SELECT version FROM {db}.schema_migrations FINAL")}
        applied = []
        files = sorted((p for p in resources.files("stores").joinpath(MIGRATIONS).iterdir()
                        if p.name.endswith(".sql")), key=lambda p: p.name)
        for item in files:
            version = item.name.removesuffix(".sql")
            if version in done:
                continue
            for statement in _statements(item.read_text()):
                await self.command(statement)
            await self.command("INSERT INTO {db}.schema_migrations VALUES "
                               "({v:String}, now64(3))", {"v": version})
            applied.append(version)
            log.info("clickhouse: applied migration %s", version)
        return applied


class RemoteClickHouse:
    """The :class:`ClickHouse` facade over the owner's loopback proxy (``a5s+http://host:port``).

    Extra embedded workers use it: chdb allows one process per data directory, so the
    service process serves its ClickHouse (``gateway.clickhouse_proxy``). The interface
    and the exceptions are the facade's; migrations are the owner's job, so
    :meth:`start` only waits for the proxy to answer.

    Args:
        dsn: ``a5s+http://127.0.0.1:<console port>``.
        database: the owner's database name (``{db}`` is filled in by the owner).
        token: returns the console token (read when first needed: the owner
            writes it on its first start).
    """

    def __init__(self, dsn: str, database: str, token: Any, timeout_s: float = 30.0) -> None:
        self.dsn = dsn
        self.database = database
        self._token = token
        self._base = "http://" + dsn.removeprefix(PROXY_SCHEME).rstrip("/") + \
            "/internal/clickhouse/v1/"
        self._timeout_s = timeout_s
        self._client: Any = None

    embedded = False

    def table(self, name: str) -> str:
        return f"{self.database}.{name}"

    async def _call(self, operation: str, body: dict[str, Any]) -> Any:
        import httpx

        from .clickhouse_wire import decode, encode
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout_s)
        try:
            resp = await self._client.post(
                self._base + operation, content=json.dumps(encode(body)),
                headers={"Authorization": f"Bearer {self._token()}",
                         "Content-Type": "application/json"})
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(log=f"clickhouse proxy: {exc!r}") from exc
        except (httpx.HTTPError, OSError) as exc:
            raise UpstreamUnavailable(log=f"clickhouse proxy: {exc!r}") from exc
        try:
            data = resp.json()
        except ValueError as exc:
            raise UpstreamUnavailable(log=f"clickhouse proxy: HTTP {resp.status_code}") from exc
        if resp.status_code != 200:
            err = data.get("error", {})
            kind = _WIRE_ERRORS.get(err.get("type"), UpstreamUnavailable)
            raise kind(log=f"clickhouse proxy: {err.get('log')}")
        return decode(data.get("result"))

    async def start(self, timeout_s: float = 120.0) -> None:
        """Wait for the owner's proxy (it may still be starting)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await self.ping()
                return
            except (UpstreamUnavailable, UpstreamTimeout, FileNotFoundError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def close_now(self) -> None:
        self._client = None  # nothing of the owner's to flush

    async def command(self, sql: str, params: dict[str, Any] | None = None) -> Any:
        return await self._call("command", {"sql": sql, "params": params})

    async def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return await self._call("query", {"sql": sql, "params": params})

    async def insert(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            await self._call("insert", {"table": table, "rows": list(rows)})

    async def ping(self) -> float:
        started = time.perf_counter()
        await self._call("ping", {})
        return (time.perf_counter() - started) * 1000

    async def migrate(self) -> list[str]:
        return []  # the owner applies migrations


_WIRE_ERRORS: dict[Any, type[Exception]] = {
    "UpstreamUnavailable": UpstreamUnavailable, "UpstreamTimeout": UpstreamTimeout,
    "InternalError": InternalError}


def _statements(sql: str) -> list[str]:
    sql = re.sub(r"--[^\n]*", "", sql)
    return [s.strip() for s in sql.split(";") if s.strip()]
