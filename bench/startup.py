"""How long the embedded stack takes to answer, to finish a first job, to come back from a
killed service, and to stop.

``python -m bench.startup [--runs 2]``

Each run starts ``a5s up`` on a fresh data directory and prints: seconds until
``/health`` answers 200; until an 11 s file (``real/whisper/jfk.flac``) submitted then has
completed (the models load meanwhile); after a SIGKILL of the service, until ``/health``
answers again and until a second job has completed; and from Ctrl-C (SIGINT to
``a5s up``) until every process of the stack is gone.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time

from ops.procstat import alive
from ops.stack import EVAL, EvalServer, Stack, temporary_stack

__all__ = ["main"]

CLIP = "real/whisper/jfk.flac"


def _job(stack: Stack, key: str, url: str) -> str:
    with stack.client(key) as client:
        tid = client.post("/v1/transcripts", json={"audio_url": url}).json()["id"]
        return str(stack.wait_transcript(client, tid, timeout_s=300)["status"])


def one_run(server: EvalServer) -> str:
    t0 = time.monotonic()
    with temporary_stack() as stack:
        up = time.monotonic() - t0
        key = stack.new_account()[1]
        first_status = _job(stack, key, server.url(CLIP))
        first = time.monotonic() - t0
        t1 = time.monotonic()
        stack.restart_service()
        back = time.monotonic() - t1
        second_status = _job(stack, key, server.url(CLIP))
        again = time.monotonic() - t1
        assert stack.proc is not None
        children = [int(p.read_text()) for p in (stack.data_dir / "run").glob("*.pid")]
        t2 = time.monotonic()
        stack.proc.send_signal(signal.SIGINT)
        while (stack.proc.poll() is None or any(alive(pid) for pid in children)) and \
                time.monotonic() - t2 < 60:
            time.sleep(0.02)
        stopped = time.monotonic() - t2
    return (f"up to /health {up:.1f} s; first job {first_status} at {first:.1f} s; service "
            f"killed: /health again after {back:.1f} s, a job {second_status} after "
            f"{again:.1f} s; Ctrl-C to every process gone {stopped:.1f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args(argv)
    print("command:", shlex.join(["python", "-m", "bench.startup",
                                  *(argv if argv is not None else sys.argv[1:])]))
    print("load average before: %.2f %.2f %.2f" % os.getloadavg())
    server = EvalServer(EVAL)
    try:
        for run in range(args.runs):
            print(f"run {run + 1}: {one_run(server)}", flush=True)
    finally:
        server.close()
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
