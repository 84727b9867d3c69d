"""A lone job on the idle service, and what the idle service costs.

``python -m bench.lone [--repeat 5] [--idle-s 30]``

Starts an embedded stack (as ``bench.pipeline`` does), runs one warm-up job, leaves the
service idle for ``--idle-s`` and prints the CPU its process used per second, then runs
``bench.pipeline``'s probes (three real recordings of 3, 11 and 25 s, each submitted alone
and polled to completion) ``--repeat`` times and prints each one's median time from
submission to completion. The latency of a lone job is what the stack's own hops add to the
models: on a quiet service nothing else hides them.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.pipeline import DEFAULT_EVAL, run_probes, warm_up
from ops.procstat import cpu_seconds, pid_of


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.lone", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eval", type=Path, default=DEFAULT_EVAL, help="eval set directory")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--idle-s", type=float, default=30.0)
    args = parser.parse_args(argv)
    from ops.stack import EvalServer, temporary_stack

    print("command: python -m bench.lone " + " ".join(argv or []))
    print("load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    server = EvalServer(args.eval)
    with temporary_stack() as stack:
        try:
            key = stack.new_account()[1]
            base_url = stack.url("")
            warm_up(base_url, key, server.url("real/whisper/jfk.flac"))
            time.sleep(10)  # the warm-up job's webhook scan, merges and commits settle
            pid = pid_of(stack.data_dir / "run", "service")
            if pid is None:
                raise SystemExit("the stack wrote no service pid")
            before = cpu_seconds(pid) or 0.0
            time.sleep(args.idle_s)
            idle = ((cpu_seconds(pid) or 0.0) - before) / args.idle_s
            print(f"idle service: {idle * 1000:.1f} ms of CPU a second ({args.idle_s:g} s)")
            times: dict[str, list[float]] = {}
            for _ in range(args.repeat):
                for path, seconds in run_probes(base_url, key, server.url).items():
                    times.setdefault(path, []).append(seconds)
            for path, values in times.items():
                print(f"{path}: median {statistics.median(values):.2f} s "
                      f"({', '.join(f'{v:.2f}' for v in values)})")
        finally:
            server.close()
    print("load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3]))


if __name__ == "__main__":
    main()
