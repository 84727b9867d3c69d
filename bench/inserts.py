"""What one job-path insert costs the embedded ClickHouse, with its small parts full or packed.

Each round writes N one-row inserts of a transcript row (a queued row, then its outcome,
as the job path does) through ``stores.clickhouse.ClickHouse`` on a fresh chdb data
directory, waits for the merges they start, and prints the CPU of the whole process
(chdb's own threads included) per insert, and how many files the parts left behind hold.
``full`` is the engine's default (about ten files a part), ``packed`` the service's
(``ClickHouse.set_table_settings``, one file a part). Rounds alternate, each in a process of
its own (chdb allows one engine a process):

    python -m bench.inserts --n 600 --rounds 2

File creation is where a full part's cost goes on a file system that scans for free
inodes (ext4 without a journal checks each candidate for a recent deletion), so the
figures depend on the file system of ``--dir`` (default: the temporary directory).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import load_average

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import asyncio, json, os, resource, sys, time
from datetime import UTC, datetime
from schemas.rows import TranscriptRow
from stores.clickhouse import ClickHouse

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

async def main(root, n, packed):
    ch = ClickHouse("chdb://" + root)
    if packed:
        await ch.start()
    else:  # the schema alone, as a server gets it
        await ch._run(lambda c: None)
        await ch.migrate()
    now = datetime.now(UTC)
    started = cpu()
    for i in range(n):
        status, version = ("queued", 1) if i % 2 == 0 else ("completed", 2)
        row = TranscriptRow(id=f"tr_{i // 2:08d}", account_id="acct_1", key_id="k",
                            created_at=now, status=status, version=version,
                            audio_url="https://example.com/a.wav", metadata='{"ref": 1}')
        await ch.insert("transcripts", [row.model_dump()])
    await asyncio.sleep(3.0)  # the merges the inserts started
    spent = cpu() - started
    parts = await ch.query("SELECT DISTINCT part_storage_type AS s FROM system.parts "
                           "WHERE database = 'a5s' AND table = 'transcripts' AND active")
    await ch.close()
    files = sum(len(f) for _, _, f in os.walk(os.path.join(root, "store")))
    print(json.dumps({"ms_per_insert": spent * 1000 / n, "storage": [p["s"] for p in parts],
                      "files": files}))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "packed"))
"""


def one_round(variant: str, n: int, parent: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory(dir=parent) as root:
        proc = subprocess.run([sys.executable, "-c", CHILD, str(Path(root) / "ch"), str(n),
                               variant], cwd=REPO, capture_output=True, text=True,
                              timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})
    if proc.returncode != 0:
        raise SystemExit(f"{variant}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=600, help="inserts a round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each variant")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the scratch data directories go")
    args = parser.parse_args(argv)
    print(f"$ python -m bench.inserts {shlex.join(argv or sys.argv[1:])}")
    print(f"load average {load_average()}")
    for r in range(args.rounds):
        for variant in ("full", "packed"):
            got = one_round(variant, args.n, args.dir)
            print(f"round {r + 1} {variant:6s}: {got['ms_per_insert']:.2f} ms of process CPU "
                  f"an insert; parts {','.join(got['storage'])}; {got['files']} files in the "
                  f"engine's store after the merges")
    print(f"load average {load_average()}")


if __name__ == "__main__":
    main()
