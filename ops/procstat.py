"""What a benchmark reads of the embedded stack's processes: memory and CPU time.

The embedded stack writes one pid file per process under ``<data_dir>/run/``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PROCESSES", "pid_of", "alive", "memory_kb", "cpu_seconds", "stack_cpu"]

PROCESSES = ("service", "broker", "redis")
_TICKS = os.sysconf("SC_CLK_TCK")


def pid_of(run_dir: Path, name: str) -> int | None:
    try:
        return int((run_dir / f"{name}.pid").read_text())
    except (FileNotFoundError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a killed child its parent has not reaped yet (a zombie) is dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return Path(f"/proc/{pid}").exists()
    return state not in ("Z", "X")


def memory_kb(pid: int) -> tuple[int, int] | None:
    """(resident, anonymous resident) memory of ``pid`` in KiB, or None when it is gone."""
    try:
        fields = dict(line.split(":", 1) for line in
                      Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
        return int(fields["VmRSS"].split()[0]), int(fields["RssAnon"].split()[0])
    except (FileNotFoundError, ProcessLookupError, ValueError, KeyError):
        return None


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time ``pid`` has used, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


def stack_cpu(run_dir: Path) -> dict[str, float]:
    """CPU seconds used so far by each process of the stack that is running."""
    used = {}
    for name in PROCESSES:
        pid = pid_of(run_dir, name)
        seconds = cpu_seconds(pid) if pid is not None else None
        if seconds is not None:
            used[name] = seconds
    return used
