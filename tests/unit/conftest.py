"""A real Valkey server (the binary ``a5s up`` runs) for the store and retention tests, and
a runner for store scenarios that need their own interpreter (chdb allows one engine per
process)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from ops.stack import REPO, scratch_valkey


@pytest.fixture(scope="module")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with scratch_valkey(tmp_path_factory.mktemp("valkey")) as url:
        yield url


def _run_scenario(script: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", script, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def own_process() -> Callable[..., dict]:
    """Runs a script (``python -c script *args``) from the repository root and gives the JSON
    object it printed last."""
    return _run_scenario
