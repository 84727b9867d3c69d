"""``a5s sql``: read-only SQL through ClickHouse's HTTP interface, printed as a table.

The same command serves both deployments: with ``a5s up`` it talks to the service's
own engine on the console listener (``http://127.0.0.1:<console port>/``, the port found
as ``a5s up`` was given it or recorded it, :func:`ops.instance.located`; the console
token as the password; ``gateway/sql_http.py``); with a ClickHouse server
(``A5S_CLICKHOUSE_URL=http://...``) it talks to that server. ``--url`` names any other
(``http://user:password@host:8123``).

Saved queries (``ops/queries/*.sql``) use ``{db}`` for the database and
``{name:Type}`` parameters; ``--param name=value`` binds them, and ``from`` / ``to``
default to the last 7 days.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import click

from schemas.settings import Settings, SettingsError, load_settings

from .instance import InstanceError, client_token, located

__all__ = ["sql", "SqlTarget", "sql_target", "format_table", "bind_parameters"]

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*):\s*([^}]+)\}")
DEFAULT_DAYS = 7


@dataclass(frozen=True)
class SqlTarget:
    url: str
    username: str
    password: str
    database: str


def sql_target(settings: Settings, url: str | None) -> SqlTarget:
    """Where ``a5s sql`` sends queries: ``url``, else the configured ClickHouse server,
    else the embedded stack's console listener (with the console token)."""
    if not url and settings.clickhouse_url.startswith(("http://", "https://")):
        url = settings.clickhouse_url
    parts = urlsplit(url or settings.console_url)
    password = unquote(parts.password or "")
    if not url and not password:
        password = client_token(settings)
    port = parts.port or (443 if parts.scheme == "https" else 8123)
    base = f"{parts.scheme}://{parts.hostname}:{port}"
    return SqlTarget(base, unquote(parts.username or "default"), password,
                     settings.clickhouse_database)


def bind_parameters(query: str, given: dict[str, str], now: datetime) -> dict[str, Any]:
    """Values for the query's ``{name:Type}`` parameters: ``given``, else ``from``/``to``
    as the last :data:`DEFAULT_DAYS` days; any other missing one is a usage error."""
    values: dict[str, Any] = {}
    for name, kind in _PARAM.findall(query):
        if name in given:
            values[name] = given[name]
        elif name == "from":
            values[name] = now - timedelta(days=DEFAULT_DAYS)
        elif name == "to":
            values[name] = now
        else:
            raise click.UsageError(f"the query needs --param {name}=VALUE ({kind.strip()})")
    return values


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    return str(value)


def format_table(names: list[str], rows: list[tuple[Any, ...]]) -> str:
    """An aligned text table; numbers are right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    numeric = [all(isinstance(row[i], (int, float, Decimal)) and not isinstance(row[i], bool)
                   for row in rows if row[i] is not None) and bool(rows)
               for i in range(len(names))]
    widths = [max([len(n)] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()
    out = [line(names), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _one_line(exc: BaseException) -> str:
    """ClickHouse's own message (``Code: N. DB::Exception: ...``), or the socket error."""
    text = " ".join(str(exc).split())
    found = text.find("Code: ")
    if found >= 0:
        return text[found:]
    errno = re.search(r"\[Errno -?\d+\] ([^\"')]+)", text)
    return errno.group(1).strip() if errno else text


@click.command("sql")
@click.argument("query", required=False)
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False),
              help="Run the query in this file (e.g. ops/queries/daily_usage.sql).")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="A {name:Type} parameter; from/to default to the last 7 days.")
@click.option("--url", envvar="A5S_SQL_URL", default=None,
              help="ClickHouse HTTP URL (default: the configured server, else the running "
                   "a5s up on the console port).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row instead.")
@click.option("--data-dir", envvar="A5S_DATA_DIR", show_envvar=True, default=None,
              help="Data directory of the a5s up to query (default ./a5s-data).")
def sql(query: str | None, path: str | None, params: tuple[str, ...], url: str | None,
        as_json: bool, data_dir: str | None) -> None:
    """Run a read-only SQL query against the service's ClickHouse and print a table."""
    if bool(query) == bool(path):
        raise click.UsageError("give a QUERY or --file, not both")
    text = Path(path).read_text() if path else query or ""
    given = {}
    for item in params:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.UsageError(f"--param {item!r}: expected NAME=VALUE")
        given[name.strip()] = value
    try:
        target = sql_target(located(load_settings(data_dir)), url)
    except (SettingsError, InstanceError) as exc:
        raise click.ClickException(str(exc)) from exc
    text = text.replace("{db}", target.database)
    values = bind_parameters(text, given, datetime.now(UTC))
    import clickhouse_connect
    from clickhouse_connect.driver.exceptions import ClickHouseError, OperationalError
    logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)  # errors are ours to say
    parts = urlsplit(target.url)
    try:
        client = clickhouse_connect.get_client(
            host=parts.hostname, port=parts.port, username=target.username,
            password=target.password, database=target.database,
            secure=parts.scheme == "https", connect_timeout=5, send_receive_timeout=300)
        result = client.query(text, parameters=values or None)
    except OperationalError as exc:
        raise click.ClickException(f"cannot reach ClickHouse at {target.url} (is a5s running?): "
                                   f"{_one_line(exc)}") from exc
    except ClickHouseError as exc:
        raise click.ClickException(_one_line(exc)) from exc
    names = list(result.column_names)
    if as_json:
        for row in result.result_rows:
            click.echo(json.dumps(dict(zip(names, row)), default=_json_default))
        return
    click.echo(format_table(names, list(result.result_rows)))


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    return str(value)
