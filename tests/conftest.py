"""Shared fixtures: the embedded stack (one per session) and the eval audio server."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from ops.stack import EVAL, EvalServer, Stack

_STARTED = time.monotonic()


@pytest.fixture(scope="session")
def eval_dir():
    assert EVAL.is_dir(), f"{EVAL} is missing: the eval set must sit beside the repository"
    return EVAL


@pytest.fixture(scope="session")
def eval_server() -> Iterator[EvalServer]:
    server = EvalServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One real embedded stack for the whole session (fresh data directory)."""
    env = {"A5S_WEBHOOKS__RETRY_SCHEDULE_S": "[1, 2, 2]", "A5S_WEBHOOKS__ALLOW_LOOPBACK": "true",
           "A5S_WEBHOOKS__TIMEOUT_S": "2"}
    s = Stack(tmp_path_factory.mktemp("stack") / "data", env=env)
    s.data_dir.mkdir(parents=True)
    s.start()
    yield s
    s.stop()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    elapsed = time.monotonic() - _STARTED
    terminalreporter.write_line(f"a5s suite: {elapsed:.1f} s wall on {os.cpu_count()} cores")
