"""``a5s sql``'s pure parts: where it connects, how it binds, how it prints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import pytest

from ops.sql_cli import bind_parameters, format_table, sql_target
from schemas.settings import Settings


def test_target_is_the_console_listener_then_a_server_then_a_given_url(tmp_path: Path) -> None:
    (tmp_path / "console.token").write_text("tok\n")
    embedded = sql_target(Settings(data_dir=tmp_path, console_port=8101), None)
    assert (embedded.url, embedded.password, embedded.database) == \
        ("http://127.0.0.1:8101", "tok", "a5s")
    server = sql_target(Settings(data_dir=tmp_path, clickhouse_url="http://ro:secret@ch:8123",
                                 clickhouse_database="prod"), None)
    assert (server.url, server.username, server.password, server.database) == \
        ("http://ch:8123", "ro", "secret", "prod")
    given = sql_target(Settings(data_dir=tmp_path), "https://u:p%40ss@example.com")
    assert (given.url, given.username, given.password) == ("https://example.com:443", "u", "p@ss")


def test_parameters_default_to_the_last_week() -> None:
    now = datetime(2026, 3, 2, tzinfo=UTC)
    sql = "SELECT 1 WHERE at >= {from:DateTime64(3)} AND at < {to:DateTime64(3)} AND k = {k:String}"
    values = bind_parameters(sql, {"k": "x"}, now)
    assert values == {"from": now - timedelta(days=7), "to": now, "k": "x"}
    assert bind_parameters(sql, {"k": "x", "from": "2026-01-01"}, now)["from"] == "2026-01-01"
    with pytest.raises(click.UsageError, match="--param k=VALUE"):
        bind_parameters(sql, {}, now)


def test_table_aligns_numbers_right() -> None:
    out = format_table(["day", "jobs", "share"],
                       [(datetime(2026, 3, 2), 12, 0.25), (datetime(2026, 3, 3), 3, None)])
    lines = out.splitlines()
    assert lines[0].split() == ["day", "jobs", "share"]
    assert lines[2].endswith("12   0.25") and lines[3].endswith(" 3   NULL")
    assert lines[-1] == "(2 rows)"
    assert format_table(["x"], []).splitlines()[-1] == "(0 rows)"
