"""Bearer tokens: one reader of ``Authorization`` and one constant-time comparison, used by
every handler that checks a token."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from gateway.base import BaseHandler
from gateway.clickhouse_proxy import ClickHouseProxyHandler
from gateway.console import ConsoleHandler
from gateway.files import PresignedUploadHandler
from gateway.sql_http import ClickHouseHttpHandler
from security.tokens import bearer_token, token_matches


@pytest.mark.parametrize("header, token", [
    ("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("BEARER abc", "abc"), ("Bearer", ""),
    ("Bearer ", ""), ("Basic abc", None), ("abc", None), ("", None), (None, None),
])
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_token_matches_refuses_missing_and_empty() -> None:
    assert token_matches("s3cret", "s3cret")
    assert not token_matches("s3cre", "s3cret")
    assert not token_matches("", "s3cret")
    assert not token_matches(None, "s3cret")
    assert not token_matches("", "")


@pytest.mark.parametrize("method, shared", [
    (BaseHandler.authenticate, "bearer_token"),
    (ConsoleHandler.prepare, "token_matches"),
    (ClickHouseProxyHandler.post, "token_matches"),
    (ClickHouseHttpHandler._query, "token_matches"),
    (PresignedUploadHandler.admit, "upload_signature_matches"),
], ids=lambda v: getattr(v, "__qualname__", v))
def test_handlers_check_through_the_shared_functions(method, shared: str) -> None:
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    called = {n.func.id for n in ast.walk(tree)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert shared in called
