"""What the benchmarks read of the stack's processes, and how the embedded broker is started."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from ops.embedded import BROKER_MALLOC, EmbeddedStack
from ops.procstat import (Demand, cpu_seconds, fd_kind, memory_kb, open_fds, stack_cpu,
                          thread_count, thread_demand, unwanted_core_seconds)
from schemas.settings import Settings


def test_cpu_and_memory_of_a_live_process_and_none_for_a_gone_one(tmp_path: Path) -> None:
    before = cpu_seconds(os.getpid())
    sum(i * i for i in range(3_000_000))
    after = cpu_seconds(os.getpid())
    assert before is not None and after is not None and after > before
    rss, anon = memory_kb(os.getpid()) or (0, 0)
    assert rss >= anon > 0

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert cpu_seconds(int(gone)) is None and memory_kb(int(gone)) is None
    (tmp_path / "service.pid").write_text(str(os.getpid()))
    (tmp_path / "broker.pid").write_text(gone)
    (tmp_path / "redis.pid").write_text("not a pid")
    assert set(stack_cpu(tmp_path)) == {"service"}


def test_the_embedded_broker_runs_with_the_allocator_settings(tmp_path: Path) -> None:
    plan = {c.name: c for c in EmbeddedStack(Settings(data_dir=str(tmp_path))).plan()}
    assert plan["broker"].env == BROKER_MALLOC
    assert "MALLOC_MMAP_THRESHOLD_" in plan["broker"].env
    assert plan["redis"].env == {}


def test_unwanted_cores_count_what_the_threads_did_not_ask_for() -> None:
    """Two threads busy for a second want both cores; then one alone leaves one unwanted;
    samples outside the window do not count."""
    s = 1_000_000_000
    samples = [(0.0, {"1": 0, "2": 0}), (1.0, {"1": s, "2": s}),
               (2.0, {"1": 2 * s, "2": s}), (3.0, {"1": 2 * s, "2": s, "3": 0})]
    assert unwanted_core_seconds(samples, 2, 0.0, 2.0) == (1.0, 2.0)
    assert unwanted_core_seconds(samples, 2, 0.0, 3.0) == (3.0, 3.0)  # a new thread, idle


def test_demand_of_this_process_grows_while_it_computes() -> None:
    with Demand(os.getpid(), interval_s=0.05) as demand:
        sum(i * i for i in range(3_000_000))
    assert len(demand.samples) >= 2
    first, last = demand.samples[0][1], demand.samples[-1][1]
    assert sum(last.values()) > sum(first.values())
    assert str(os.getpid()) in thread_demand(os.getpid())


def test_open_descriptors_by_kind_name_the_peer_and_the_directory(tmp_path: Path) -> None:
    """A listener, a connection to it (both ends), a file under a named root, a pipe: each
    counted under its kind, and gone again once closed."""
    before = open_fds(os.getpid()) or {}
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    (tmp_path / "logs").mkdir()
    held = open(tmp_path / "logs" / "a.log", "w")  # noqa: SIM115 - held open on purpose
    r, w = os.pipe()
    try:
        fds = open_fds(os.getpid(), {port: "the API"}, {str(tmp_path): "<data>"})
        assert fds is not None
        new = fds - Counter(before)
        assert new["socket listening on the API"] == 1
        assert new["socket from a client of the API"] == 1  # the accepted end
        assert new["socket to the API"] == 1  # the client's end
        assert new["file <data>/logs"] == 1
        assert new["pipe"] >= 2
    finally:
        for sock in (listener, client, accepted):
            sock.close()
        held.close()
        os.close(r)
        os.close(w)
    after = open_fds(os.getpid(), {port: "the API"}, {str(tmp_path): "<data>"}) or {}
    assert not any(k.endswith("the API") or k == "file <data>/logs" for k in after)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert open_fds(int(gone)) is None and thread_count(int(gone)) is None


def test_descriptor_kinds_of_links_the_kernel_gives() -> None:
    peers = {"11": ("tcp", 40000, 9092), "12": ("unix", 0, 0)}
    assert fd_kind("socket:[11]", peers, {9092: "the broker"}, {}) == "socket to the broker"
    assert fd_kind("socket:[11]", peers, {}, {}) == "socket to 9092"
    assert fd_kind("socket:[12]", peers, {}, {}) == "socket unix"
    assert fd_kind("socket:[13]", peers, {}, {}) == "socket other"
    assert fd_kind("anon_inode:[eventfd]", {}, {}, {}) == "eventfd"
    assert fd_kind("/data/objects/x/y.json (deleted)", {}, {}, {"/data": "<data>"}) == \
        "file <data>/objects/x (deleted)"
    assert fd_kind("/dev/null", {}, {}, {}) == "/dev/null"


def test_threads_of_this_process_counted() -> None:
    stop = threading.Event()
    before = thread_count(os.getpid()) or 0
    extra = threading.Thread(target=stop.wait)
    extra.start()
    try:
        assert thread_count(os.getpid()) == before + 1
    finally:
        stop.set()
        extra.join()
