"""Extra pipeline workers on one machine, and the stale group members dead workers leave.

``a5s up --workers N`` runs the service (gateway, pipeline and the embedded
ClickHouse) plus N-1 ``a5s worker`` processes that join the same Kafka consumer
group and reach ClickHouse through the service's loopback proxy
(``A5S_CLICKHOUSE_URL=a5s+http://127.0.0.1:<console port>``; see
``gateway.clickhouse_proxy``). The supervisor restarts a worker that dies.

A worker killed without leaving its consumer group (SIGKILL, OOM) stays a member
of the group on the embedded broker, which does not expire members, and the
group cannot rebalance without it. So the supervisor watches every worker
process of the data directory, its own and any started by hand (each writes
``run/worker-<pid>.pid`` and removes it on a clean exit): when one has died
uncleanly, it restarts the broker (log and committed offsets persist; clients
reconnect), which clears the stale member, and the survivors rebalance.
Delivery is at-least-once and every stage is idempotent, so nothing is lost.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from schemas.settings import Settings
from stores.clickhouse import PROXY_SCHEME

from .procstat import alive

__all__ = ["WorkerPool", "worker_env", "dead_worker_pidfiles"]

log = logging.getLogger("a5s.workers")


def worker_env(settings: Settings, base: dict[str, str]) -> dict[str, str]:
    """The environment of an extra worker: the service's, with ClickHouse through the proxy."""
    env = {**base, "A5S_DATA_DIR": str(settings.data_path)}
    if not settings.clickhouse_url:  # embedded chdb: only the service may open it
        env["A5S_CLICKHOUSE_URL"] = f"{PROXY_SCHEME}127.0.0.1:{settings.console_port}"
    return env


def dead_worker_pidfiles(run_dir: Path) -> list[Path]:
    """Pidfiles of worker processes that died without cleaning up (no clean group leave)."""
    dead = []
    for path in sorted(run_dir.glob("worker-*.pid")):
        try:
            pid = int(path.read_text())
        except (OSError, ValueError):
            continue
        if not alive(pid):
            dead.append(path)
    return dead


@dataclass
class _Slot:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    next_start: float = 0.0
    restarts: int = 0
    started: float = 0.0


class WorkerPool:
    """Keeps ``count`` extra workers running beside the service; see the module docstring.

    Args:
        settings: the stack's settings.
        count: extra worker processes (``--workers`` minus one).
        restart_broker: restarts the embedded broker (``None`` with an external Kafka).
        env: the environment the service runs with.
    """

    def __init__(self, settings: Settings, count: int,
                 restart_broker: Callable[[], None] | None, env: dict[str, str]) -> None:
        self.settings = settings
        self.run_dir = settings.data_path / "run"
        self.logs = settings.data_path / "logs"
        self.slots = [_Slot(i + 1) for i in range(max(0, count))]
        self.restart_broker = restart_broker
        self.env = worker_env(settings, env)

    def tick(self) -> None:
        """One look: clear stale members, then (re)start the workers that are due."""
        stale = False
        now = time.monotonic()
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is not None:
                code = slot.proc.returncode
                slot.proc = None
                stale = stale or code != 0
                slot.restarts = slot.restarts + 1 if now - slot.started < 30 else 1
                slot.next_start = now + min(30, 2 ** min(slot.restarts, 5))
                log.warning("worker %d exited with %s; restarting it", slot.index, code)
        for path in dead_worker_pidfiles(self.run_dir):
            path.unlink(missing_ok=True)
            stale = True
        if stale and self.restart_broker is not None:
            log.warning("a worker died without leaving its consumer group; restarting the "
                        "embedded broker to clear the stale member")
            self.restart_broker()
        if not (self.run_dir / "service.pid").exists():
            return  # the proxy (and the schema) come with the service
        for slot in self.slots:
            if slot.proc is None and now >= slot.next_start:
                self._start(slot)

    def _start(self, slot: _Slot) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"worker-{slot.index}.log", "ab") as out:
            slot.proc = subprocess.Popen([sys.executable, "-P", "-m", "ops.cli", "worker"],
                                         env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        slot.started = time.monotonic()
        log.info("worker %d started (pid %d)", slot.index, slot.proc.pid)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM every worker (they leave the group cleanly), then wait for them."""
        procs = [s.proc for s in self.slots if s.proc is not None and s.proc.poll() is None]
        for proc in procs:
            proc.terminate()
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for slot in self.slots:
            slot.proc = None
