"""Soak benchmark: hours of a steady mix below capacity, and whether anything grows.

``python -m bench.soak --minutes 60 [--warmup-minutes 10] [--rate 20] [--sample-s 30]``

Starts an embedded stack (``a5s up`` in a temporary directory) and, for the warm-up and
then ``--minutes``, keeps a steady mix going at a fixed rate (open loop: a job starts every
``60 / --rate`` seconds whatever the service does), spread over three accounts:

* jobs: short prompts (asterisk_16k, under 6 s) and, one in ``--long-every``, a long file
  (30 to 97 s); two in three by ``audio_url`` (the eval set served on loopback), one in three
  uploaded first (``POST /v1/files``); one in three with a ``webhook_url`` on a local
  receiver, which answers 200 and counts deliveries;
* a live session every ``--live-every-s`` seconds: a prompt streamed at real-time pace
  over ``/v1/realtime``, until ``finished``;
* every 5 s, a list (``GET /v1/transcripts``), a usage read (``GET /v1/usage``) and an
  account read.

Every ``--sample-s`` seconds it samples each process of the stack (service, broker,
Valkey): resident memory, open descriptors by kind (``ops.procstat.open_fds``: sockets by
the port they listen on or connect to, files by directory, pipes, event and epoll
descriptors) and threads; ClickHouse's active parts (``system.parts``, through the
console's read-only SQL); Valkey's ``used_memory`` and key count; and the bytes on disk of
each top-level directory of the data directory (the broker's log, the object store,
ClickHouse).

Printed per ``--window-minutes`` window (by submission time): jobs, job latency p50/p95
(``created_at`` to ``completed_at``), errors (an HTTP answer other than 2xx, a job that
ended in ``error`` or did not end, a webhook not delivered, a live session without
``finished``), and the last sample of the window. Then a verdict on the time after the
warm-up, per process: RSS growth (mean of the last window's samples against the first's),
open descriptors and threads (median of the last window against the first), the kinds of
descriptor that changed, and p95 of the last window against the first, each against the
targets of a 60-minute soak (RSS <= 5 %, fds within +-10, threads no more, p95 within
20 %, no errors). The command and the load average are printed; on a shared machine latency
moves with the load, the counts do not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.server
import io
import json
import os
import random
import shlex
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench import load_average
from bench.api import percentile
from ops.procstat import PROCESSES, memory_kb, open_fds, pid_of, thread_count
from ops.stack import EVAL, REPO, EvalServer, Stack, temporary_stack

__all__ = ["main"]

TARGETS = {"rss_pct": 5.0, "fds": 10, "threads": 0, "p95_pct": 20.0}
"""What a 60-minute soak after its warm-up must show (issue: hours without growth)."""


# --- the mix ------------------------------------------------------------------------------------

def clips() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(short prompts, long files) of the eval set."""
    items = [i for i in json.loads((EVAL / "manifest.json").read_text())["items"]
             if i["kind"] in ("real", "synthetic") and i.get("duration")]
    short = sorted((i for i in items if "asterisk_16k" in i["path"] and i["duration"] < 6),
                   key=lambda i: i["path"])
    long = sorted((i for i in items if 30 <= i["duration"] <= 100), key=lambda i: i["path"])
    return short, long


@dataclass
class Job:
    submitted: float
    """Seconds since the start of the run."""
    client: httpx.AsyncClient
    webhook: bool
    id: str = ""
    latency_s: float | None = None
    status: str = ""
    asked: float = 0.0


@dataclass
class Run:
    started: float = field(default_factory=time.monotonic)
    jobs: list[Job] = field(default_factory=list)
    errors: list[tuple[float, str]] = field(default_factory=list)
    live: list[tuple[float, bool]] = field(default_factory=list)
    reads: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.started

    def error(self, at: float, what: str) -> None:
        self.errors.append((at, what))
        if len(self.errors) <= 20:
            print(f"  !! {at:7.0f} s  {what}", flush=True)


class Receiver:
    """A webhook receiver on loopback: answers 200 and keeps each delivery's transcript id."""

    def __init__(self) -> None:
        self.ids: Counter[str] = Counter()
        lock = threading.Lock()
        ids = self.ids

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock, contextlib.suppress(ValueError, KeyError):
                    ids[json.loads(body)["id"]] += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def close(self) -> None:
        self.httpd.shutdown()


async def submit(run: Run, job: Job, item: dict[str, Any], upload: bool, server: EvalServer,
                 receiver: Receiver, n: int) -> None:
    body: dict[str, Any] = {"metadata": {"soak": n}}
    if job.webhook:
        body["webhook_url"] = receiver.url()
    try:
        if upload:
            resp = await job.client.post("/v1/files", content=(EVAL / item["path"]).read_bytes())
            if resp.status_code // 100 != 2:
                run.error(job.submitted, f"upload {resp.status_code} {resp.text[:200]}")
                return
            body["file_id"] = resp.json()["id"]
        else:
            body["audio_url"] = server.url(item["path"]) + f"?n={n}"
        resp = await job.client.post("/v1/transcripts", json=body)
    except httpx.HTTPError as exc:
        run.error(job.submitted, f"create: {exc!r}")
        return
    if resp.status_code != 201:
        run.error(job.submitted, f"create {resp.status_code} {resp.text[:200]}")
        return
    job.id = resp.json()["id"]
    run.jobs.append(job)


async def poll(run: Run, stop: asyncio.Event) -> None:
    """Each unfinished job's state, every second, until ``stop`` and none is left."""
    while not stop.is_set() or any(not j.status for j in run.jobs):
        # at most ten a second, the longest unasked first: a backlog is not made worse
        for job in sorted((j for j in run.jobs if not j.status), key=lambda j: j.asked)[:10]:
            job.asked = time.monotonic()
            try:
                resp = await job.client.get(f"/v1/transcripts/{job.id}")
            except httpx.HTTPError as exc:
                run.error(run.now(), f"get {job.id}: {exc!r}")
                continue
            if resp.status_code != 200:
                run.error(run.now(), f"get {job.id} {resp.status_code}")
                continue
            body = resp.json()
            if body["status"] in ("completed", "error"):
                job.status = body["status"]
                job.latency_s = (_at(body["completed_at"]) - _at(body["created_at"])
                                 ).total_seconds()
                if job.status == "error":
                    run.error(job.submitted, f"job {job.id} ended in error: {body.get('error')}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


async def reads(run: Run, clients: list[httpx.AsyncClient], stop: asyncio.Event) -> None:
    k = 0
    while not stop.is_set():
        client = clients[k % len(clients)]
        k += 1
        for path, params in (("/v1/transcripts", {"limit": 20}),
                             ("/v1/usage", {"days": 7, "timezone": "UTC"}),
                             ("/v1/account", {})):
            try:
                resp = await client.get(path, params=params)
            except httpx.HTTPError as exc:
                run.error(run.now(), f"GET {path}: {exc!r}")
                continue
            run.reads += 1
            if resp.status_code != 200:
                run.error(run.now(), f"GET {path} {resp.status_code} {resp.text[:200]}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 5.0)


async def live_session(run: Run, url: str, key: str, pcm: bytes) -> None:
    """One session: the prompt at real-time pace in 20 ms frames, then ``finish``."""
    import websockets
    at = run.now()
    ok = False
    try:
        async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {key}"},
                                      open_timeout=30) as ws:
            await ws.send(json.dumps({"type": "start"}))
            while json.loads(await asyncio.wait_for(ws.recv(), 60))["type"] != "ready":
                pass
            frame, paced = 640, time.monotonic()
            for k in range(0, len(pcm), frame):
                await ws.send(pcm[k:k + frame])
                paced += 0.02
                await asyncio.sleep(max(0.0, paced - time.monotonic()))
            await ws.send(json.dumps({"type": "finish"}))
            while True:
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, str):
                    kind = json.loads(message)["type"]
                    if kind == "finished":
                        ok = True
                        break
                    if kind == "error":
                        run.error(at, f"live session: {message[:200]}")
                        break
    except Exception as exc:  # noqa: BLE001 - any failure of the session is an error counted
        run.error(at, f"live session: {exc!r}")
    run.live.append((at, ok))


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _pcm(path: Path, silence_s: float = 1.0) -> bytes:
    from pipeline.audio import decode_to_pcm
    out = io.BytesIO()
    decode_to_pcm(path, out)
    return out.getvalue() + bytes(int(32000 * silence_s))


# --- samples ------------------------------------------------------------------------------------

def _tree_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def sample(stack: Stack, ports: dict[int, str], at: float) -> dict[str, Any]:
    """One look at every process of the stack, ClickHouse's parts, Valkey and the disk."""
    run_dir = stack.data_dir / "run"
    roots = {str(stack.data_dir): "<data>", str(REPO): "<repo>", sys.prefix: "<venv>"}
    out: dict[str, Any] = {"t": at, "proc": {}}
    for name in PROCESSES:
        pid = pid_of(run_dir, name)
        kb = memory_kb(pid) if pid else None
        fds = open_fds(pid, ports, roots) if pid else None
        threads = thread_count(pid) if pid else None
        if kb is not None and fds is not None and threads is not None:
            out["proc"][name] = {"pid": pid, "rss_kb": kb[0], "fds": fds, "threads": threads}
    with contextlib.suppress(httpx.HTTPError, ValueError, OSError):
        token = (stack.data_dir / "console.token").read_text().strip()
        resp = httpx.get(f"http://127.0.0.1:{stack.console_port}/",
                         params={"query": "SELECT count() FROM system.parts WHERE active"},
                         headers={"Authorization": f"Bearer {token}"}, timeout=30)
        out["parts"] = int(resp.text.strip()) if resp.status_code == 200 else None
    with contextlib.suppress(Exception):
        import redis
        r = redis.Redis(port=int(stack.env["A5S_EMBEDDED__REDIS"]), socket_timeout=5)
        try:
            out["redis_mem"] = int(r.info("memory")["used_memory"])
            out["redis_keys"] = int(r.dbsize())
            out["redis_kinds"] = key_kinds(r)
        finally:
            r.close()
    out["disk"] = {p.name: _tree_bytes(p) for p in sorted(stack.data_dir.iterdir()) if p.is_dir()}
    out["disk_within"] = {f"{top.name}/{p.name}": _tree_bytes(p)
                          for top in sorted(stack.data_dir.iterdir()) if top.is_dir()
                          for p in sorted(top.iterdir()) if p.is_dir()}
    return out


def key_kinds(r: Any) -> Counter[str]:
    """Valkey's keys counted by pattern (a part of the key that is a number, or an id or a
    hash of 12 characters or more with a digit in it, is ``*``), those without an expiry
    apart."""
    keys = list(r.scan_iter(count=1000))
    pipe = r.pipeline(transaction=False)
    for key in keys:
        pipe.pttl(key)
    kinds: Counter[str] = Counter()
    for key, ttl in zip(keys, pipe.execute()):
        pattern = ":".join("*" if part.isdigit() or (len(part) >= 12 and any(
            c.isdigit() for c in part)) else part
                           for part in key.decode(errors="replace").split(":"))
        kinds[pattern + (" (no expiry)" if ttl == -1 else "")] += 1
    return kinds


def progress(run: Run) -> str:
    """One line of how the run goes, after each sample."""
    last = run.samples[-1]
    procs = "  ".join(f"{name} {p['rss_kb'] / 1024:,.0f} MiB {sum(p['fds'].values())} fds "
                      f"{p['threads']} thr" for name, p in last["proc"].items())
    return (f"  {last['t']:6.0f} s  jobs {len(run.jobs)} ({sum(bool(j.status) for j in run.jobs)} "
            f"ended)  errors {len(run.errors)}  {procs}  parts {last.get('parts')}  "
            f"load {load_average()}")


async def sampler(run: Run, stack: Stack, ports: dict[int, str], every_s: float,
                  stop: asyncio.Event) -> None:
    while not stop.is_set():
        run.samples.append(await asyncio.to_thread(sample, stack, ports, run.now()))
        print(progress(run), flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
    run.samples.append(await asyncio.to_thread(sample, stack, ports, run.now()))


# --- the run ------------------------------------------------------------------------------------

async def drive(stack: Stack, args: argparse.Namespace, run: Run) -> None:
    server, receiver = EvalServer(EVAL), Receiver()
    ports = {stack.port: "the API", stack.console_port: "the console",
             int(stack.env["A5S_EMBEDDED__KAFKA"]): "the broker",
             int(stack.env["A5S_EMBEDDED__REDIS"]): "Valkey", server.port: "the eval server",
             receiver.port: "the webhook receiver"}
    keys = [stack.new_account(max_requests_per_minute=100_000, usage_limit_seconds=1e9,
                              max_concurrent_jobs=10)[1] for _ in range(3)]
    clients = [httpx.AsyncClient(base_url=stack.url(""), timeout=60,
                                 headers={"Authorization": f"Bearer {k}"}) for k in keys]
    short, long = clips()
    rng = random.Random(7)
    live_pcm = [_pcm(EVAL / i["path"]) for i in rng.sample(short, 4)]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(poll(run, stop)), asyncio.create_task(reads(run, clients, stop)),
             asyncio.create_task(sampler(run, stack, ports, args.sample_s, stop))]
    pending: set[asyncio.Task[None]] = set()
    end = (args.warmup_minutes + args.minutes) * 60
    every = 60.0 / args.rate
    next_live = 30.0
    n = 0
    try:
        while (at := run.now()) < end:
            upload = n % 3 == 2
            item = long[(n // args.long_every) % len(long)] if n % args.long_every == 0 \
                else short[rng.randrange(len(short))]
            job = Job(at, clients[n % len(clients)], webhook=n % 3 == 1)
            task = asyncio.create_task(submit(run, job, item, upload, server, receiver, n))
            pending.add(task)
            task.add_done_callback(pending.discard)
            if at >= next_live:
                task = asyncio.create_task(live_session(run, stack.ws_url, keys[n % len(keys)],
                                                        live_pcm[n % len(live_pcm)]))
                pending.add(task)
                task.add_done_callback(pending.discard)
                next_live += args.live_every_s
            n += 1
            await asyncio.sleep(max(0.0, n * every - run.now()))
        await asyncio.gather(*pending)
        stop.set()
        await asyncio.wait_for(tasks[0], args.grace_s)  # the last jobs end
        await asyncio.gather(*tasks[1:])
        deadline = time.monotonic() + 30  # the last webhooks arrive
        while time.monotonic() < deadline and any(
                j.webhook and j.status and not receiver.ids[j.id] for j in run.jobs):
            await asyncio.sleep(1)
    except TimeoutError:
        pass
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        for job in run.jobs:
            if not job.status:
                run.error(job.submitted, f"job {job.id} did not end")
            elif job.webhook and not receiver.ids[job.id]:
                run.error(job.submitted, f"job {job.id}: no webhook delivered")
        for client in clients:
            await client.aclose()
        server.close()
        receiver.close()


# --- the report ---------------------------------------------------------------------------------

def _mib(kb: float) -> str:
    return f"{kb / 1024:,.0f}"


def _window_of(samples: list[dict[str, Any]], lo: float, hi: float) -> list[dict[str, Any]]:
    return [s for s in samples if lo <= s["t"] < hi]


def _proc_series(samples: list[dict[str, Any]], name: str, key: str) -> list[float]:
    return [s["proc"][name][key] if key != "fds" else sum(s["proc"][name]["fds"].values())
            for s in samples if name in s["proc"]]


def report(run: Run, args: argparse.Namespace) -> bool:
    """Print the windows and the verdict; whether every target was met."""
    window = args.window_minutes * 60
    warm = args.warmup_minutes * 60
    end = warm + args.minutes * 60
    print(f"\n{'window':>13} {'jobs':>5} {'p50 s':>6} {'p95 s':>6} {'err':>4} "
          + " ".join(f"{n + ' MiB/fds/thr':>20}" for n in PROCESSES)
          + f" {'parts':>5} {'valkey MiB/keys':>16} disk MiB")
    bounds = [0.0, *(warm + k * window for k in range(int(-(-args.minutes * 60 // window)) + 1))]
    if warm == 0:
        bounds = bounds[1:]
    rows: list[tuple[float, float, float]] = []
    for lo, hi in zip(bounds, bounds[1:]):
        hi = min(hi, end)
        jobs = [j for j in run.jobs if lo <= j.submitted < hi]
        lat = [j.latency_s for j in jobs if j.latency_s is not None and j.status == "completed"]
        errors = sum(lo <= at < hi for at, _ in run.errors)
        in_window = _window_of(run.samples, lo, hi + 1)
        last = in_window[-1] if in_window else {"proc": {}}
        procs = " ".join(
            f"{_mib(p['rss_kb']) + '/' + str(sum(p['fds'].values())) + '/' + str(p['threads']):>20}"
            if (p := last["proc"].get(n)) else f"{'-':>20}" for n in PROCESSES)
        disk = " ".join(f"{k} {v / 2**20:.0f}" for k, v in last.get("disk", {}).items())
        label = f"{lo / 60:.0f}-{hi / 60:.0f} min" + (" (w)" if hi <= warm else "")
        p50, p95 = percentile(lat, 50), percentile(lat, 95)
        print(f"{label:>13} {len(jobs):>5} {p50:>6.2f} {p95:>6.2f} {errors:>4} {procs} "
              f"{last.get('parts', '-')!s:>5} "
              f"{(_mib(last['redis_mem'] / 1024) + '/' + str(last['redis_keys'])) if 'redis_mem' in last else '-':>16} "
              f"{disk}")
        if lo >= warm:
            rows.append((lo, hi, p95))
    live_ok = sum(ok for _, ok in run.live)
    print(f"\n{len(run.jobs)} jobs, {sum(j.status == 'completed' for j in run.jobs)} completed, "
          f"{len(run.errors)} errors; {live_ok}/{len(run.live)} live sessions finished; "
          f"{run.reads} reads")
    if len(rows) < 2:
        print("verdict: not enough windows after the warm-up (at least two are needed)")
        return False
    (f_lo, f_hi, f_p95), (l_lo, l_hi, l_p95) = rows[0], rows[-1]
    first, last = _window_of(run.samples, f_lo, f_hi), _window_of(run.samples, l_lo, l_hi + 1)
    ok = True
    for name in PROCESSES:
        rss = [statistics.mean(_proc_series(w, name, "rss_kb")) for w in (first, last)]
        fds = [statistics.median(_proc_series(w, name, "fds")) for w in (first, last)]
        thr = [statistics.median(_proc_series(w, name, "threads")) for w in (first, last)]
        growth = 100 * (rss[1] - rss[0]) / rss[0]
        good = growth <= TARGETS["rss_pct"] and abs(fds[1] - fds[0]) <= TARGETS["fds"] and \
            thr[1] - thr[0] <= TARGETS["threads"]
        ok &= good
        kinds = Counter(last[-1]["proc"][name]["fds"]) if name in last[-1]["proc"] else Counter()
        kinds.subtract(first[0]["proc"].get(name, {}).get("fds", {}))
        moved = ", ".join(f"{k} {v:+d}" for k, v in kinds.most_common() if v) or "none"
        print(f"verdict {name:<8} RSS {_mib(rss[0])} -> {_mib(rss[1])} MiB ({growth:+.1f} %), "
              f"fds {fds[0]:.0f} -> {fds[1]:.0f} ({fds[1] - fds[0]:+.0f}), threads {thr[0]:.0f} "
              f"-> {thr[1]:.0f}: {'ok' if good else 'GROWS'}; descriptors changed: {moved}")
    p95_pct = 100 * (l_p95 / f_p95 - 1) if f_p95 else float("nan")
    errors = sum(at >= warm for at, _ in run.errors)
    good = p95_pct <= TARGETS["p95_pct"] and errors == 0
    ok &= good
    print(f"verdict latency p95 {f_p95:.2f} s (first window) -> {l_p95:.2f} s (last) "
          f"({p95_pct:+.0f} %), errors after the warm-up {errors}: {'ok' if good else 'NOT MET'}")
    for key, label in (("parts", "ClickHouse active parts"), ("redis_keys", "Valkey keys"),
                       ("redis_mem", "Valkey used_memory")):
        values = [s[key] for s in (first[0], last[-1]) if s.get(key) is not None]
        if len(values) == 2:
            print(f"         {label}: {values[0]:,} -> {values[1]:,}")
    kinds = Counter(last[-1].get("redis_kinds", {}))
    kinds.subtract(first[0].get("redis_kinds", {}))
    print("         Valkey keys changed: "
          + (", ".join(f"{k} {v:+d}" for k, v in kinds.most_common() if v) or "none"))
    for name in first[0].get("disk", {}):
        a, b = first[0]["disk"][name], last[-1].get("disk", {}).get(name, 0)
        a_in, b_in = first[0].get("disk_within", {}), last[-1].get("disk_within", {})
        within = {k: b_in.get(k, 0) - a_in.get(k, 0) for k in {*a_in, *b_in}
                  if k.startswith(name + "/")}
        grew = ", ".join(f"{k.split('/', 1)[1]} {v / 2**20:+,.1f}" for k, v in
                         sorted(within.items(), key=lambda kv: -kv[1])[:5] if v > 0)
        print(f"         disk {name}: {a / 2**20:,.1f} -> {b / 2**20:,.1f} MiB"
              + (f" (most: {grew})" if grew else ""))
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="measured, after the warm-up")
    parser.add_argument("--warmup-minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=20.0, help="jobs a minute")
    parser.add_argument("--sample-s", type=float, default=30.0)
    parser.add_argument("--window-minutes", type=float, default=5.0)
    parser.add_argument("--long-every", type=int, default=20, help="one job in N is a long file")
    parser.add_argument("--live-every-s", type=float, default=120.0)
    parser.add_argument("--grace-s", type=float, default=300.0,
                        help="how long the last jobs may take to end")
    parser.add_argument("--log-level", default="WARNING", help="the stack's A5S_LOG_LEVEL")
    args = parser.parse_args(argv)
    print("$ python -m bench.soak " + shlex.join(sys.argv[1:] if argv is None else argv))
    print(f"load average before: {load_average()} on {os.cpu_count()} cores; {args.rate:g} jobs "
          f"a minute, {args.warmup_minutes:g} min warm-up + {args.minutes:g} min, a sample "
          f"every {args.sample_s:g} s", flush=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    run = Run()
    env = {"A5S_WEBHOOKS__ALLOW_LOOPBACK": "true", "A5S_LOG_LEVEL": args.log_level}
    with temporary_stack(env) as stack:
        run.started = time.monotonic()
        try:
            asyncio.run(drive(stack, args, run))
        except (KeyboardInterrupt, SystemExit):
            print("stopped early: the figures so far")
        print(f"load average after: {load_average()}")
        ok = report(run, args)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
