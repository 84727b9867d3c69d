"""Scale-out on one machine: an extra worker shares the load, then is SIGKILLed mid-load.

The extra worker (``a5s worker``) reaches the service's embedded ClickHouse
through the loopback proxy (``a5s+http://``), joins the consumer group and takes
partitions; killed without leaving the group, it is noticed by the supervisor of
``a5s up``, which restarts the broker to clear the stale member. Every job must
still end exactly once, completed, with its audio counted once in the ledger and
in the usage report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ops.stack import EVAL, REPO, EvalServer, Stack

pytestmark = [pytest.mark.stack, pytest.mark.timeout(420)]

JOBS_BEFORE_KILL = 18
JOBS_AFTER_KILL = 4


@pytest.fixture(scope="module")
def scale_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack of its own: this test restarts the broker under it."""
    env = {"A5S_MODELS__WHISPER": "tiny.en", "A5S_MODELS__BATCH_SIZE": "4"}
    s = Stack(tmp_path_factory.mktemp("scale") / "data", env=env)
    s.data_dir.mkdir(parents=True)
    s.start()
    yield s
    s.stop()


def short_clips(n: int) -> list[tuple[str, float]]:
    items = json.loads((EVAL / "manifest.json").read_text())["items"]
    clips = sorted(((i["path"], i["duration"]) for i in items
                    if i["path"].startswith("real/asterisk_16k/") and i["duration"] <= 4.0),
                   key=lambda c: c[0])
    return clips[:: max(1, len(clips) // n)][:n]


def start_worker(stack: Stack, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **stack.env,
           "A5S_CLICKHOUSE_URL": f"a5s+http://127.0.0.1:{stack.console_port}"}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "ops.cli", "worker"], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT)


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise TimeoutError(what)


def test_worker_joins_and_dies_mid_load_without_losing_a_job(scale_stack: Stack,
                                                             tmp_path: Path) -> None:
    stack = scale_stack
    clips = short_clips(JOBS_BEFORE_KILL + JOBS_AFTER_KILL)
    accounts = [stack.new_account() for _ in range(3)]  # 5 jobs at a time each
    clients = [stack.client(key) for _, key in accounts]
    server = EvalServer()
    jobs: dict[str, tuple[int, float]] = {}  # id -> (client index, clip duration)

    def submit(batch: list[tuple[str, float]]) -> None:
        for n, (path, duration) in enumerate(batch):
            k = (len(jobs) + n) % len(clients)
            resp = clients[k].post("/v1/transcripts", json={"audio_url": server.url(path)})
            assert resp.status_code in (200, 201), resp.text
            jobs[resp.json()["id"]] = (k, duration)

    log = tmp_path / "worker.log"
    worker = start_worker(stack, log)
    try:
        # The worker joins while the service is idle: on the embedded broker a join during
        # heavy load can keep the group rebalancing (docs/scaling.md, "Known limits").
        wait_for(lambda: log.exists() and "a5s: ready" in log.read_text(errors="replace"),
                 150, "the extra worker did not start")
        submit(clips[:JOBS_BEFORE_KILL])
        # It joined the group and did pipeline work (through the ClickHouse proxy).
        def worked() -> bool:
            text = log.read_text(errors="replace") if log.exists() else ""
            return " decode tr_" in text

        wait_for(worked, 150, "the extra worker did no work")
        assert list((stack.data_dir / "run").glob(f"worker-{worker.pid}.pid"))
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        submit(clips[JOBS_BEFORE_KILL:])
        # The supervisor clears the stale member: the pidfile goes, the broker restarts.
        wait_for(lambda: not list((stack.data_dir / "run").glob(f"worker-{worker.pid}.pid")),
                 30, "the supervisor did not notice the dead worker")
        done = {tid: stack.wait_transcript(clients[k], tid, timeout_s=240)
                for tid, (k, _) in jobs.items()}
    finally:
        if worker.poll() is None:
            worker.kill()
        server.close()

    assert {b["status"] for b in done.values()} == {"completed"}, \
        {t: (b["status"], b.get("error")) for t, b in done.items() if b["status"] != "completed"}
    for k, client in enumerate(clients):
        mine = [tid for tid, (owner, _) in jobs.items() if owner == k]
        listed = [t["id"] for t in client.get("/v1/transcripts", params={"limit": 100})
                  .json()["data"]]
        assert sorted(listed) == sorted(mine)  # each job once, none lost, none doubled
        expected = sum(done[tid]["audio_duration"] for tid in mine)
        stack.wait_settled(client, expected)
        totals = client.get("/v1/usage").json()["totals"]["a5s-async-v1"]
        assert totals["completed"] == len(mine) and totals["failed"] == 0
        assert abs(totals["audio_seconds"] - expected) < 1e-2
