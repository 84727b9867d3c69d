"""How the ClickHouse HTTP interface reads a request (no server needed)."""

from __future__ import annotations

from gateway.sql_http import content_type, parse_sql_request


def test_query_parameters_settings_and_body() -> None:
    req = parse_sql_request(
        {"query": [b"SELECT {a:UInt8}"], "param_a": [b"7"], "database": [b"a5s"],
         "default_format": [b"JSON"], "max_execution_time": [b"60"], "session_id": [b"s"],
         "wait_end_of_query": [b"1"], "query_id": [b"q"], "readonly": [b"1"]}, b"")
    assert req.query == "SELECT {a:UInt8}" and req.params == {"a": "7"}
    assert req.database == "a5s" and req.format == "JSON"
    assert req.settings == {"max_execution_time": "60"}


def test_query_in_the_body_or_parameter_plus_body_or_a_form() -> None:
    assert parse_sql_request({}, b"SELECT 1 FORMAT Native").query == "SELECT 1 FORMAT Native"
    assert parse_sql_request({"query": [b"INSERT INTO t FORMAT TSV"]}, b"1\n").query == \
        "INSERT INTO t FORMAT TSV\n1\n"
    req = parse_sql_request({}, b"ignored", {"query": [b"SELECT {x:String}"], "param_x": [b"y"]})
    assert (req.query, req.params, req.format) == ("SELECT {x:String}", {"x": "y"}, "TabSeparated")


def test_content_types() -> None:
    assert content_type("TabSeparated").startswith("text/tab-separated-values")
    assert content_type("CSVWithNames") == "text/csv; charset=UTF-8; header=present"
    assert content_type("JSONEachRow").startswith("application/x-ndjson")
    assert content_type("JSONCompact").startswith("application/json")
    assert content_type("Native") == content_type("RowBinaryWithNamesAndTypes") == \
        "application/octet-stream"
