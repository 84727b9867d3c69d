"""``ops.instance``: who holds a data directory and its ports, with real processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ops.instance import InstanceError, claim, leftovers, port_owner, release
from ops.stack import free_port
from schemas.settings import Settings


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", port=free_port(),  # type: ignore[call-arg]
                    console_port=free_port(),
                    embedded={"kafka": free_port(), "redis": free_port()})


@pytest.fixture()
def sleeper() -> Iterator[Callable[..., int]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(*argv: str) -> int:
        procs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                       *argv]))
        return procs[-1].pid

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_port_owner_finds_the_listener() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert port_owner(sock.getsockname()[1]) == os.getpid()
    assert port_owner(free_port()) is None


def test_claim_records_and_refuses_a_second_instance(settings: Settings, sleeper) -> None:
    assert claim(settings) == []
    record = settings.data_path / "run" / "up.json"
    assert json.loads(record.read_text())["pid"] == os.getpid()
    release(settings)
    assert not record.exists()
    other = sleeper("up")  # a live ``a5s up`` of this data directory
    record.write_text(json.dumps({"pid": other, "ports": {"API": settings.port}}))
    with pytest.raises(InstanceError, match=rf"already running on {settings.data_path} "
                                            rf"\(pid {other}; ports: API {settings.port}\)"):
        claim(settings)


def test_claim_names_the_holder_of_a_port(settings: Settings) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", settings.embedded.kafka))
        sock.listen()
        with pytest.raises(InstanceError, match=rf"port {settings.embedded.kafka} \(broker\) "
                                                rf"is in use by pid {os.getpid()}"):
            claim(settings)


def test_leftovers_are_this_directorys_processes_only(settings: Settings, sleeper) -> None:
    run = settings.data_path / "run"
    run.mkdir(parents=True)
    broker = sleeper("--data-dir", str(settings.data_path / "broker"))
    (run / "broker.pid").write_text(str(broker))
    stranger = sleeper("--data-dir", "/elsewhere/broker")  # a reused pid: not ours
    (run / "redis.pid").write_text(str(stranger))
    (run / "service.pid").write_text("999999999")  # dead
    assert leftovers(settings) == [("broker", broker)]
    assert sorted(p.name for p in run.iterdir()) == ["broker.pid"]
    assert claim(settings) == [("broker", broker)]
    assert leftovers(settings) == []
