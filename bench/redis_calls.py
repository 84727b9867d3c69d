"""What one Redis command costs the event loop, through the service's client.

``python -m bench.redis_calls [--rounds 12] [--calls 1500]``

Starts Valkey alone (the binary ``a5s up`` runs, in a temporary directory) and times, on
this process's one thread, the commands the job path makes most: a ``GET`` of a JSON
value (``RedisStore.get_json``, as the bearer check and every stage's cancel check) and a
script (``RedisStore.list_stamp``, as every list call), one after another as a single
request would. Each is run through ``RedisStore`` with its own pool
(``stores.redis.WaitingPool``) and with redis-py's ``BlockingConnectionPool`` (the pool
it replaced), ``--rounds`` times alternately, ``--calls`` commands a round. Printed: the
thread's CPU time per command, the median and range of the rounds, with the load average.
CPU time, not wall time, so the machine's load moves it less; on a busy machine it still
moves (caches), hence the alternation and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis.asyncio as aioredis

from ops.stack import scratch_valkey
from stores.redis import RedisStore


async def per_call(call: Callable[[], Awaitable[object]], n: int) -> float:
    """Microseconds of this thread's CPU per ``call``."""
    started = time.thread_time()
    for _ in range(n):
        await call()
    return (time.thread_time() - started) / n * 1e6


async def run(url: str, rounds: int, calls: int) -> None:
    ours = RedisStore(url)
    theirs = RedisStore(url, pool_class=aioredis.BlockingConnectionPool)
    try:
        await ours.set_json({"account": "a", "scopes": ["transcripts"]}, "bench", "key")
        kinds: dict[str, Callable[[RedisStore], Callable[[], Awaitable[object]]]] = {
            "GET (get_json)": lambda s: lambda: s.get_json("bench", "key"),
            "script (list_stamp)": lambda s: lambda: s.list_stamp("bench-account"),
        }
        for label, make in kinds.items():
            for store in (ours, theirs):  # warm: connections made, scripts loaded
                await per_call(make(store), 200)
            got: dict[str, list[float]] = {"WaitingPool": [], "BlockingConnectionPool": []}
            for _ in range(rounds):
                got["WaitingPool"].append(await per_call(make(ours), calls))
                got["BlockingConnectionPool"].append(await per_call(make(theirs), calls))
            print(f"{label}: " + "; ".join(
                f"{pool} median {statistics.median(v):.0f} us ({min(v):.0f}-{max(v):.0f})"
                for pool, v in got.items()))
    finally:
        await ours.close()
        await theirs.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_calls", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=1500)
    args = parser.parse_args(argv)
    shown = sys.argv[1:] if argv is None else argv
    print("command: python -m bench.redis_calls " + " ".join(shown))
    print("load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3])
          + f" on {os.cpu_count()} cores; CPU time of the calling thread per command")
    with tempfile.TemporaryDirectory(prefix="a5s-bench-") as tmp, scratch_valkey(Path(tmp)) as url:
        asyncio.run(run(url, args.rounds, args.calls))

if __name__ == "__main__":
    main()
