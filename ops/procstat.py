"""What a benchmark reads of the embedded stack's processes: memory, CPU time, open
descriptors, threads, and how many of a process's threads want a core.

The embedded stack writes one pid file per process under ``<data_dir>/run/``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

__all__ = ["PROCESSES", "pid_of", "alive", "memory_kb", "cpu_seconds", "stack_cpu",
           "thread_count", "open_fds", "socket_peers", "fd_kind", "thread_demand", "Demand",
           "unwanted_core_seconds"]

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


def thread_count(pid: int) -> int | None:
    """How many threads ``pid`` runs, or None when it is gone."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None


def socket_peers(pid: int) -> dict[str, tuple[str, int, int]]:
    """Each socket inode seen in ``pid``'s network namespace: (protocol, local port, remote
    port) for TCP (remote port 0 for a listener), (``unix``, 0, 0) for Unix sockets."""
    out: dict[str, tuple[str, int, int]] = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) < 10:
                continue
            local, remote = int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16)
            out[f[9]] = ("tcp", local, 0 if f[3] == "0A" else remote)
    try:
        for line in Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]:
            f = line.split()
            if len(f) >= 7:
                out[f[6]] = ("unix", 0, 0)
    except OSError:
        pass
    return out


def fd_kind(target: str, peers: Mapping[str, tuple[str, int, int]],
            ports: Mapping[int, str], roots: Mapping[str, str]) -> str:
    """What one descriptor is, from its ``/proc/<pid>/fd`` link: ``socket ...`` (a TCP
    listener on, a connection to or from, a port named in ``ports`` or by number; a Unix
    socket), ``file <directory>`` (a path under one of ``roots`` is shown from its name; a
    thread's ``/proc/<pid>/task/<tid>`` files as one directory, marked where the thread has
    exited),
    ``pipe``, or the kernel's own name (``anon_inode:[eventfd]``, ``/dev/null``)."""
    if target.startswith("socket:["):
        proto, local, remote = peers.get(target[8:-1], ("other", 0, 0))
        if proto != "tcp":
            return f"socket {proto}"
        if not remote:
            return f"socket listening on {ports.get(local, local)}"
        if local in ports:
            return f"socket from a client of {ports[local]}"
        return f"socket to {ports.get(remote, remote)}"
    if target.startswith("pipe:"):
        return "pipe"
    if target.startswith("anon_inode:"):
        return target.split(":", 1)[1].strip("[]")
    if target.startswith("/dev/"):
        return target
    if target.startswith("/proc/"):  # a thread's own statistics files, under its task id
        parts = target.split("/")
        if len(parts) > 5 and parts[3] == "task":
            gone = "" if os.path.isdir("/".join(parts[:5])) else " (of an exited thread)"
            return f"file /proc/<pid>/task/<tid>{gone}"
    if target.startswith("/"):
        directory = str(Path(target.removesuffix(" (deleted)")).parent)
        for root, name in sorted(roots.items(), key=lambda r: -len(r[0])):
            if directory == root or directory.startswith(root + "/"):
                directory = name + directory[len(root):]
                break
        return f"file {directory}" + (" (deleted)" if target.endswith(" (deleted)") else "")
    return target


def open_fds(pid: int, ports: Mapping[int, str] | None = None,
             roots: Mapping[str, str] | None = None) -> Counter[str] | None:
    """``pid``'s open descriptors counted by kind (``fd_kind``), or None when it is gone."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    targets = []
    for name in names:
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{name}"))
        except OSError:  # closed meanwhile
            continue
    peers = socket_peers(pid) if any(t.startswith("socket:") for t in targets) else {}
    return Counter(fd_kind(t, peers, ports or {}, roots or {}) for t in targets)


def stack_cpu(run_dir: Path) -> dict[str, float]:
    """CPU seconds used so far by each process of the stack that is running."""
    used = {}
    for name in PROCESSES:
        pid = pid_of(run_dir, name)
        seconds = cpu_seconds(pid) if pid is not None else None
        if seconds is not None:
            used[name] = seconds
    return used


def thread_demand(pid: int) -> dict[str, int]:
    """Nanoseconds each thread of ``pid`` has run or waited in the run queue (schedstat).

    Read with plain ``os`` calls, unbuffered: a benchmark samples a busy service's sixty
    threads with it, and through ``pathlib`` a sample cost 2-4 ms of the benchmark's CPU
    (about 9 ms beside a loaded service), taken from the machine it measures."""
    out = {}
    tasks = f"/proc/{pid}/task/"
    try:
        names = os.listdir(tasks)
    except OSError:
        return out
    for name in names:
        try:
            with open(f"{tasks}{name}/schedstat", "rb", buffering=0) as fh:
                run, wait, _ = fh.read().split()
        except (OSError, ValueError):
            continue
        out[name] = int(run) + int(wait)
    return out


def unwanted_core_seconds(samples: list[tuple[float, dict[str, int]]], cores: int,
                          start: float, end: float) -> tuple[float, float]:
    """Core-seconds in ``[start, end)`` that the sampled process did not want, and the window.

    Between two samples, the threads' run plus run-queue time over the interval is how many
    cores the process wanted, whoever else used the machine: what it left unwanted is what
    a quiet machine would have left idle (stages waiting on each other, a lone tail).
    """
    unwanted = window = 0.0
    for (t0, a), (t1, b) in zip(samples, samples[1:]):
        if t0 < start or t1 > end or t1 <= t0:
            continue
        wanted = sum(v - a[k] for k, v in b.items() if k in a) / 1e9 / (t1 - t0)
        unwanted += max(0.0, cores - wanted) * (t1 - t0)
        window += t1 - t0
    return unwanted, window


class Demand:
    """Samples ``thread_demand(pid)`` every ``interval_s`` on a thread of its own, and once
    more on entry and on exit, so the window's edges are there however the thread was
    scheduled (reading a busy process's threads can take longer than the interval)."""

    def __init__(self, pid: int, interval_s: float = 1.0) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demand", daemon=True)

    def __enter__(self) -> "Demand":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        self.samples.append((time.time(), thread_demand(self.pid)))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()
