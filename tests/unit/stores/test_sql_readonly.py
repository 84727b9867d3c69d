"""What the read-only SQL path refuses before the engine sees a query, and how it
reads the engine's errors (no engine needed: the queries never reach one)."""

from __future__ import annotations

import pytest

from stores.sql_readonly import SqlError, check_read_only, http_status, output_format

FORMATS = frozenset({"JSON", "TabSeparated", "Native", "CSVWithNames"})


@pytest.mark.parametrize("sql", [
    "SELECT 1", "select 1;", "  -- note\nWITH 1 AS a SELECT a", "SHOW TABLES", "DESC t",
    "DESCRIBE TABLE t", "EXISTS TABLE t", "EXPLAIN SELECT 1", "(SELECT 1) UNION ALL (SELECT 2)",
    "SELECT ';' AS a, 'INTO OUTFILE' AS b, `x;y` FROM t /* ; */ -- ;",
    "SELECT $$ ; INTO OUTFILE $$", "SELECT 1 AS into, 2 AS outfile"])
def test_reads_pass(sql: str) -> None:
    check_read_only(sql)


@pytest.mark.parametrize(("sql", "code"), [
    ("INSERT INTO t VALUES (1)", 164), ("insert into t select 1", 164), ("DROP TABLE t", 164),
    ("KILL QUERY WHERE 1", 164), ("SET readonly = 0", 164), ("OPTIMIZE TABLE t", 164),
    ("SYSTEM FLUSH LOGS", 164), ("/* c */ ALTER TABLE t DELETE WHERE 1", 164),
    ("SELECT 1; DROP TABLE t", 62), ("SELECT 1;;SELECT 2", 62), ("", 62), (" ; -- x", 62),
    ("SELECT 1 INTO OUTFILE 'x'", 358), ("select 1 into\n  outfile 'x'", 358)])
def test_what_is_refused(sql: str, code: int) -> None:
    with pytest.raises(SqlError) as caught:
        check_read_only(sql)
    assert caught.value.code == code
    assert caught.value.text("26.9").startswith(f"Code: {code}. DB::Exception: ")


def test_output_format_is_the_top_level_clause() -> None:
    assert output_format("SELECT 1 FORMAT JSON", FORMATS) == "JSON"
    assert output_format("SELECT 1\n FORMAT Native", FORMATS) == "Native"
    assert output_format("SELECT format FROM t", FORMATS) is None
    assert output_format("SELECT x AS format FROM t", FORMATS) is None
    assert output_format("SELECT * FROM (SELECT 1 FORMAT JSON)", FORMATS) is None
    assert output_format("SELECT 'FORMAT JSON'", FORMATS) is None


def test_engine_errors_keep_their_code_name_and_words() -> None:
    err = SqlError.from_engine(RuntimeError(
        "Code: 73. DB::Exception: Code: 73. DB::Exception: Unknown format X. (UNKNOWN_FORMAT) "
        "(version 26.9.2.1). (UNKNOWN_FORMAT)"))
    assert (err.code, err.name, err.message) == (73, "UNKNOWN_FORMAT", "Unknown format X")
    err = SqlError.from_engine(RuntimeError(
        "Code: 60. DB::Exception: Unknown table expression identifier 'x'. (UNKNOWN_TABLE)"))
    assert err.text("1.2") == ("Code: 60. DB::Exception: Unknown table expression identifier "
                               "'x'. (UNKNOWN_TABLE) (version 1.2)\n")


def test_http_status_follows_clickhouse() -> None:
    assert http_status("READONLY") == 403 and http_status("AUTHENTICATION_FAILED") == 401
    assert http_status("UNKNOWN_TABLE") == 404 and http_status("SYNTAX_ERROR") == 400
    assert http_status("TIMEOUT_EXCEEDED") == 500
