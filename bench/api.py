"""REST API load benchmark: create, get and list transcripts on loopback.

``python -m bench.api [--requests 300] [--duration 30] [--concurrency 16]``
``python -m bench.api --url http://127.0.0.1:8000 --key a5s_sk_...``

Without ``--url`` it starts an embedded stack (``a5s up``) in a temporary data directory
on free ports and makes an account whose limits do not throttle the run; with ``--url``
it drives a running gateway with the given key (whose account limits then apply: the
default 600 creates per minute is a ceiling). Jobs point ``audio_url`` at a loopback
port that refuses connections, so the pipeline ends each one at once and the figures
are the gateway's admission path: rate limit, validation, Redis, ClickHouse, Kafka.

Each phase (create, then get, then list, then the operators' health check) stops after
``--requests`` requests or ``--duration`` seconds, whichever comes first, with
``--concurrency`` requests in flight. Printed per operation: requests, requests per
second, p50 and p99 latency, the status codes seen and, on the embedded stack, the CPU
the service process spent per request (its pipeline ends the created jobs meanwhile, so
the create phase's figure includes that; the get phase starts once they have ended).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shlex
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from ops.procstat import cpu_seconds
from ops.stack import Stack, free_port, temporary_stack

__all__ = ["main", "PhaseResult", "run_phase", "percentile", "drain", "unthrottled_stack"]


@dataclass
class PhaseResult:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    wall_s: float = 0.0
    cpu_s: float | None = None
    """CPU the service process spent during the phase, where its pid is known."""

    def cpu_ms_per_request(self) -> float | None:
        n = len(self.latencies_ms)
        return None if self.cpu_s is None or not n else self.cpu_s * 1000 / n

    def line(self) -> str:
        n = len(self.latencies_ms)
        rps = n / self.wall_s if self.wall_s else 0.0
        codes = " ".join(f"{k}x{v}" for k, v in sorted(self.statuses.items()))
        per = self.cpu_ms_per_request()
        cpu = "" if per is None else f"  service CPU {per:.2f} ms/req"
        return (f"{self.name:<7} {n:>6} req  {rps:>8.1f} req/s  p50 "
                f"{percentile(self.latencies_ms, 50):>7.1f} ms  p99 "
                f"{percentile(self.latencies_ms, 99):>7.1f} ms  [{codes}]{cpu}")


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


async def run_phase(name: str, call: Callable[[int], Awaitable[httpx.Response]], *,
                    requests: int, duration_s: float, concurrency: int,
                    service_pid: int | None = None) -> PhaseResult:
    """Up to ``requests`` calls of ``call(i)`` within ``duration_s``, ``concurrency`` at once."""
    result = PhaseResult(name)
    counter = iter(range(requests))
    cpu0 = cpu_seconds(service_pid) if service_pid else None
    started = time.perf_counter()
    deadline = started + duration_s

    async def worker() -> None:
        for i in counter:
            if time.perf_counter() > deadline:
                return
            t0 = time.perf_counter()
            try:
                resp = await call(i)
                result.statuses[resp.status_code] += 1
            except httpx.HTTPError:
                result.statuses[0] += 1
            result.latencies_ms.append((time.perf_counter() - t0) * 1000)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.wall_s = time.perf_counter() - started
    cpu1 = cpu_seconds(service_pid) if service_pid else None
    if cpu0 is not None and cpu1 is not None:
        result.cpu_s = cpu1 - cpu0
    return result


async def bench(url: str, key: str, args: argparse.Namespace,
                service_pid: int | None = None) -> list[PhaseResult]:
    limits = httpx.Limits(max_connections=args.concurrency,
                          max_keepalive_connections=args.concurrency)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"},
                                 timeout=30, limits=limits) as client:
        created: list[str] = []
        dead = f"http://127.0.0.1:{free_port()}/bench.wav"

        async def create(i: int) -> httpx.Response:
            resp = await client.post("/v1/transcripts", json={
                "audio_url": dead, "metadata": {"bench": i}})
            if resp.status_code == 201:
                created.append(resp.json()["id"])
            return resp

        async def get(i: int) -> httpx.Response:
            return await client.get(f"/v1/transcripts/{random.choice(created)}")

        async def list_(i: int) -> httpx.Response:
            return await client.get("/v1/transcripts", params={"limit": 20})

        async def health(i: int) -> httpx.Response:
            return await client.get("/health")

        await client.get("/v1/account")  # warm the key cache and the connection pool
        opts = {"requests": args.requests, "duration_s": args.duration,
                "concurrency": args.concurrency, "service_pid": service_pid}
        results = [await run_phase("create", create, **opts)]
        if not created:
            raise SystemExit("no transcript was created; see the status codes above")
        await drain(client, created, 30.0)  # the next phases' CPU is their own
        results.append(await run_phase("get", get, **opts))
        results.append(await run_phase("list", list_, **opts))
        results.append(await run_phase("health", health, **opts))
        return results


async def drain(client: httpx.AsyncClient, created: list[str],
                timeout_s: float) -> dict[str, Any]:
    """Wait for the last of ``created`` to end (first in, first out: it ends last), so
    what follows is measured on an empty queue: this module's phases after its
    creates, ``bench.load``'s backlog after its sustained phase."""
    started = time.monotonic()
    while created and time.monotonic() - started < timeout_s:
        resp = await client.get(f"/v1/transcripts/{created[-1]}")
        if resp.status_code == 200 and resp.json()["status"] in ("completed", "error"):
            break
        await asyncio.sleep(0.5)
    waited = time.monotonic() - started
    return {"jobs": len(created), "drain_s": round(waited, 1)}


# --- an embedded stack of our own ---------------------------------------------------------------


@contextlib.contextmanager
def unthrottled_stack() -> Iterator[tuple[Stack, str]]:
    """``a5s up`` in a temporary directory, and the key of an account whose limits do not
    throttle a benchmark."""
    with temporary_stack(env={"A5S_LOG_LEVEL": "WARNING"}) as stack:
        yield stack, stack.new_account(max_requests_per_minute=10_000_000,
                                       max_queued_jobs=10_000_000)[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running gateway; default: start an embedded stack")
    parser.add_argument("--key", help="API key for --url")
    parser.add_argument("--requests", type=int, default=300, help="per phase (default 300)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per phase cap")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args(argv)
    if args.url and not args.key:
        parser.error("--url needs --key")
    print("command:", shlex.join(["python", "-m", "bench.api",
                                  *(argv if argv is not None else sys.argv[1:])]))
    print("load average before: %.2f %.2f %.2f" % os.getloadavg())
    with contextlib.ExitStack() as running:
        url, key, pid = args.url, args.key, None
        if not url:
            stack, key = running.enter_context(unthrottled_stack())
            url, pid = stack.url(""), stack.service_pid()
        results = asyncio.run(bench(url, key, args, pid))
    print(f"a5s API bench: {url}, concurrency {args.concurrency}, {os.cpu_count()} cores")
    for r in results:
        print(r.line())
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())
    if args.json:
        print(json.dumps({r.name: {"requests": len(r.latencies_ms),
                                   "rps": round(len(r.latencies_ms) / r.wall_s, 1),
                                   "p50_ms": round(percentile(r.latencies_ms, 50), 1),
                                   "p99_ms": round(percentile(r.latencies_ms, 99), 1),
                                   "statuses": dict(r.statuses),
                                   "service_cpu_ms_per_request": r.cpu_ms_per_request()}
                          for r in results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
