"""What one job costs the accounts agent's own work, on a new account and an aged one.

Every job sends the accounts agent three events (``Submitted``, ``DurationKnown``,
``Finished``). For each, the agent reads the account's state from its tables
(``pipeline.account_tables.AccountTables``: the state, and the pages of ids that left it),
applies the event (``pipeline.accounts.apply``) and writes the new state back, with a page
when one is full; each write is also a changelog record. An account that has run
``RECENT_MAX`` jobs remembers that many finished ids, so this work could grow with the
account's age; the whole-mix benchmark (``bench.pipeline``) only sees new accounts.

    python -m bench.accounts [--jobs 300]

Prints, per account age, the CPU time of the three events of a job (process time, one
thread, no I/O) and the bytes of state written per job, with the load average and the
command line. The new account's state grows with the jobs run (their ids are remembered
too), so its figures are an average over its first ``--jobs`` jobs. The aged account is
one whose state was stored with all ``RECENT_MAX`` ids in it (as before pages existed):
its first event moves them to pages, outside the timing.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from datetime import UTC, datetime

from pipeline.account_tables import AccountTables
from pipeline.accounts import RECENT_MAX, AccountState, apply
from schemas.ids import transcript_id
from schemas.records import AccountLimits, DurationKnown, Finished, Submitted

LIMITS = AccountLimits(usage_limit_seconds=1e9, max_concurrent_jobs=4)


def job_events(account_id: str, tid: str) -> list[object]:
    now = datetime.now(UTC)
    return [Submitted(account_id=account_id, transcript_id=tid, at=now, limits=LIMITS),
            DurationKnown(account_id=account_id, transcript_id=tid, duration=2.0),
            Finished(account_id=account_id, transcript_id=tid, status="completed", duration=2.0)]


def run_jobs(tables: AccountTables, jobs: int) -> tuple[float, int]:
    """CPU seconds and bytes written (states and pages) for ``jobs`` jobs of account "a",
    as the agent does each event."""
    now = datetime.now(UTC)
    events = [e for _ in range(jobs) for e in job_events("a", transcript_id())]
    written = 0
    started = time.process_time()
    for event in events:
        new, fx = apply(tables.state("a"), event, now)  # type: ignore[arg-type]
        tables.put("a", new, fx.pages)
        written += len(tables.states["a"]) + sum(len(p.to_stored()) for p in fx.pages)
    return time.process_time() - started, written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300, help="jobs timed per account age")
    args = parser.parse_args(argv)
    print(f"$ python -m bench.accounts {shlex.join(sys.argv[1:] if argv is None else argv)}")
    print("load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + " on "
          f"{os.cpu_count()} cores; {args.jobs} jobs per account age, 3 events a job")
    aged = AccountState(recent=[transcript_id() for _ in range(RECENT_MAX)])
    for label, state in ((f"new account (its first {args.jobs} jobs)", AccountState()),
                         (f"aged account ({RECENT_MAX} finished ids)", aged)):
        run_jobs(AccountTables({"a": state.to_stored()}, {}), 5)  # warm up
        tables = AccountTables({"a": state.to_stored()}, {})
        run_jobs(tables, 1)  # an aged state moves its ids to pages
        cpu, written = run_jobs(tables, args.jobs)
        print(f"  {label:40} {1000 * cpu / args.jobs:7.3f} ms of CPU a job, "
              f"{written / args.jobs / 1024:7.1f} KiB of state written a job")


if __name__ == "__main__":
    main()
