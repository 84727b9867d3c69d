"""What the benchmarks read of the stack's processes, and how the embedded broker is started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ops.embedded import BROKER_MALLOC, EmbeddedStack
from ops.procstat import (Demand, cpu_seconds, memory_kb, stack_cpu, thread_demand,
                          unwanted_core_seconds)
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
