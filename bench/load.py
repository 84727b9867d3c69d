"""Load benchmark: sustained API traffic, then a batch backlog, with memory and latency over time.

``python -m bench.load [--duration 60] [--concurrency 16] [--backlog 300]``

Starts an embedded stack (``a5s up``) in a temporary directory and, while sampling the
resident memory (``VmRSS`` in ``/proc/<pid>/status``, and its anonymous part ``RssAnon``:
the heap, as opposed to mapped files the kernel can drop) of the service, the broker and
Valkey every second (their pids are in ``<data_dir>/run/``):

1. **sustained**: ``--concurrency`` clients for ``--duration`` seconds, each request one
   of create (40 %), get (30 %), list (20 %), account (10 %); creates point ``audio_url``
   at a loopback port that refuses connections, so their jobs fail fast in the pipeline;
   then it waits for the last of those jobs to end (they share the backlog's account);
2. **backlog**: ``--backlog`` jobs submitted at once to one account, then drained by the
   pipeline (five at a time, first in first out) while a reader polls the API; reports
   how fast the backlog drains and each job's time from creation to its end.

Printed: requests, throughput, p50/p99 latency and status codes per phase; p99 per
10-second window (flat is good); peak and first/last RSS per process; backlog drain
rate. Bounded: every loop stops at its count or its deadline. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.api import drain, percentile, unthrottled_stack
from ops.procstat import PROCESSES, memory_kb, pid_of
from ops.stack import free_port

__all__ = ["main"]

WINDOW_S = 10.0


@dataclass
class Samples:
    """(seconds since start, RSS KiB, anonymous RSS KiB) per process, and (time, latency ms,
    status) per call."""

    started: float = field(default_factory=time.monotonic)
    rss: dict[str, list[tuple[float, int, int]]] = field(default_factory=dict)
    calls: list[tuple[float, str, float, int]] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.started

    def record(self, phase: str, t0: float, status: int) -> None:
        self.calls.append((t0 - self.started, phase, (time.monotonic() - t0) * 1000, status))


async def sample_memory(run_dir: Path, samples: Samples, stop: asyncio.Event) -> None:
    while not stop.is_set():
        for name in PROCESSES:
            pid = pid_of(run_dir, name)
            kb = memory_kb(pid) if pid is not None else None
            if kb is not None:
                samples.rss.setdefault(name, []).append((samples.now(), *kb))
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass


async def sustained(client: httpx.AsyncClient, samples: Samples, duration_s: float,
                    concurrency: int) -> list[str]:
    """Mixed traffic for ``duration_s``; returns the ids of the jobs it created."""
    dead = f"http://127.0.0.1:{free_port()}/load.wav"
    created: list[str] = []
    deadline = time.monotonic() + duration_s
    rng = random.Random(1)

    async def one() -> None:
        while time.monotonic() < deadline:
            roll = rng.random()
            t0 = time.monotonic()
            try:
                if roll < 0.4 or not created:
                    resp = await client.post("/v1/transcripts", json={"audio_url": dead})
                    if resp.status_code == 201:
                        created.append(resp.json()["id"])
                elif roll < 0.7:
                    resp = await client.get(f"/v1/transcripts/{rng.choice(created)}")
                elif roll < 0.9:
                    resp = await client.get("/v1/transcripts", params={"limit": 20})
                else:
                    resp = await client.get("/v1/account")
                status = resp.status_code
            except httpx.HTTPError:
                status = 0
            samples.record("sustained", t0, status)

    await asyncio.gather(*(one() for _ in range(concurrency)))
    return created


async def backlog(client: httpx.AsyncClient, samples: Samples, jobs: int,
                  timeout_s: float) -> dict[str, Any]:
    dead = f"http://127.0.0.1:{free_port()}/backlog.wav"
    sem = asyncio.Semaphore(16)

    async def create(i: int) -> str | None:
        async with sem:
            t0 = time.monotonic()
            try:
                resp = await client.post("/v1/transcripts", json={"audio_url": dead,
                                                                  "metadata": {"n": i}})
            except httpx.HTTPError:
                samples.record("backlog-create", t0, 0)
                return None
            samples.record("backlog-create", t0, resp.status_code)
            return resp.json()["id"] if resp.status_code == 201 else None

    submitted = time.monotonic()
    ids = [t for t in await asyncio.gather(*(create(i) for i in range(jobs))) if t]
    wanted = set(ids)
    deadline = time.monotonic() + timeout_s
    done: dict[str, dict[str, Any]] = {}
    while len(done) < len(ids) and time.monotonic() < deadline:
        t0 = time.monotonic()
        try:
            resp = await client.get("/v1/transcripts", params={"limit": 100})
            samples.record("backlog-read", t0, resp.status_code)
            page = resp.json().get("data", []) if resp.status_code == 200 else []
        except httpx.HTTPError:
            samples.record("backlog-read", t0, 0)
            page = []
        for item in page:  # the list holds the sustained phase's jobs too
            if item["id"] in wanted and item["status"] in ("completed", "error"):
                done[item["id"]] = item
        if len(done) < len(ids):  # older pages: ask for each unfinished job directly
            for tid in [t for t in ids if t not in done][:20]:
                t0 = time.monotonic()
                resp = await client.get(f"/v1/transcripts/{tid}")
                samples.record("backlog-read", t0, resp.status_code)
                if resp.status_code == 200 and resp.json()["status"] in ("completed", "error"):
                    done[tid] = resp.json()
        await asyncio.sleep(0.5)
    drained_s = time.monotonic() - submitted
    ends = [(_at(d["completed_at"]) - _at(d["created_at"])).total_seconds()
            for d in done.values() if d.get("completed_at")]
    return {"jobs": len(ids), "finished": len(done), "drain_s": round(drained_s, 1),
            "jobs_per_s": round(len(done) / drained_s, 2) if drained_s else 0.0,
            "job_p50_s": round(percentile(ends, 50), 2),
            "job_p99_s": round(percentile(ends, 99), 2),
            "outcomes": dict(Counter((d.get("error") or {}).get("code", d["status"])
                                     for d in done.values()))}


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def report(samples: Samples, drain: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"phases": {}, "windows_p99_ms": {}, "rss_mib": {}, "backlog": drain}
    for phase in sorted({c[1] for c in samples.calls}):
        calls = [c for c in samples.calls if c[1] == phase]
        lat = [c[2] for c in calls]
        span = (max(c[0] for c in calls) - min(c[0] for c in calls)) or 1.0
        out["phases"][phase] = {
            "requests": len(calls), "rps": round(len(calls) / span, 1),
            "p50_ms": round(percentile(lat, 50), 1), "p99_ms": round(percentile(lat, 99), 1),
            "statuses": dict(Counter(c[3] for c in calls))}
        windows: dict[int, list[float]] = {}
        for t, _, ms, _ in calls:
            windows.setdefault(int(t // WINDOW_S), []).append(ms)
        out["windows_p99_ms"][phase] = [round(percentile(v, 99), 1)
                                        for _, v in sorted(windows.items())]
    for name, series in samples.rss.items():
        kb = [v for _, v, _ in series]
        anon = [a for _, _, a in series]
        out["rss_mib"][name] = {"first": round(kb[0] / 1024, 1), "peak": round(max(kb) / 1024, 1),
                                "last": round(kb[-1] / 1024, 1), "samples": len(kb),
                                "anon_first": round(anon[0] / 1024, 1),
                                "anon_peak": round(max(anon) / 1024, 1),
                                "anon_last": round(anon[-1] / 1024, 1),
                                "every_30_s": [round(v / 1024) for v in
                                               {int(t // 30): v for t, v, _ in series}.values()],
                                "anon_every_30_s": [round(a / 1024) for a in
                                                    {int(t // 30): a for t, _, a in series}.values()]}
    return out


async def run(url: str, key: str, run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    samples = Samples()
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_memory(run_dir, samples, stop))
    limits = httpx.Limits(max_connections=args.concurrency + 4,
                          max_keepalive_connections=args.concurrency + 4)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"},
                                 timeout=30, limits=limits) as client:
        await client.get("/v1/account")
        created = await sustained(client, samples, args.duration, args.concurrency)
        after = await drain(client, created, args.backlog_timeout)
        queued = await backlog(client, samples, args.backlog, args.backlog_timeout)
    stop.set()
    await sampler
    figures = report(samples, queued)
    figures["sustained_jobs"] = after
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="sustained phase, s")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--backlog", type=int, default=300, help="jobs in the backlog phase")
    parser.add_argument("--backlog-timeout", type=float, default=600.0,
                        help="give the backlog at most this long to drain, s")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = parser.parse_args(argv)
    with unthrottled_stack() as (stack, key):
        figures = asyncio.run(run(stack.url(""), key, stack.data_dir / "run", args))
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"a5s load bench: {os.cpu_count()} cores, concurrency {args.concurrency}, "
          f"{args.duration:g} s sustained, backlog of {args.backlog}")
    for phase, f in figures["phases"].items():
        print(f"{phase:<15} {f['requests']:>6} req {f['rps']:>7.1f} req/s  p50 "
              f"{f['p50_ms']:>7.1f} ms  p99 {f['p99_ms']:>7.1f} ms  {f['statuses']}")
    for phase, w in figures["windows_p99_ms"].items():
        print(f"p99 per {WINDOW_S:g} s, {phase}: {w}")
    for name, m in figures["rss_mib"].items():
        print(f"RSS {name:<8} first {m['first']:>7.1f} MiB  peak {m['peak']:>7.1f} MiB  "
              f"last {m['last']:>7.1f} MiB  ({m['samples']} samples); every 30 s: "
              f"{m['every_30_s']}")
        print(f"    anonymous    first {m['anon_first']:>7.1f} MiB  peak {m['anon_peak']:>7.1f} MiB  "
              f"last {m['anon_last']:>7.1f} MiB; every 30 s: {m['anon_every_30_s']}")
    a = figures["sustained_jobs"]
    print(f"sustained phase: {a['jobs']} jobs created; the last ended {a['drain_s']} s after "
          f"the phase ({a['jobs'] / (args.duration + a['drain_s']):.1f} jobs/s through the "
          f"pipeline)")
    b = figures["backlog"]
    print(f"backlog: {b['finished']}/{b['jobs']} jobs ended in {b['drain_s']} s "
          f"({b['jobs_per_s']} jobs/s); creation to end p50 {b['job_p50_s']} s, "
          f"p99 {b['job_p99_s']} s; {b['outcomes']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
