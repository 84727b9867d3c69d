"""How fast the retention sweep deletes expired transcripts (transcripts/s).

Builds a fresh embedded ClickHouse (chdb), a Valkey server and a file object store,
fills them with N transcripts finished past their account's retention (row versions,
result, upload, job spec, Redis records) and as many still kept, then times one
``stores.retention.sweep``. ``--compare REV`` runs the same on the code of a git
revision too (exported to a temporary directory), so the figures sit side by side:

    python -m bench.retention --n 500 --compare f9f9302

Prints the load average and the command line beside the figures: on a busy machine the
wall-clock rate is noisy; the CPU seconds per transcript (the process's, chdb's threads
included) much less so.
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

from ops.stack import scratch_valkey

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import asyncio, json, os, resource, sys, time
from datetime import UTC, datetime, timedelta
from pathlib import Path

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

async def main(root, redis_url, n, keep):
    try:
        from stores import retention
    except ImportError:  # a revision from before retention moved to stores/
        from pipeline import retention
    from schemas.rows import TranscriptRow
    from schemas.settings import Settings
    from stores.clickhouse import ClickHouse
    from stores.context import Context
    from stores.objects import FileStore
    from stores.redis import RedisStore
    ch = ClickHouse("chdb://" + str(root / "ch"))
    await ch.start()
    redis = RedisStore(redis_url)
    ctx = Context(settings=Settings(), ch=ch, redis=redis, objects=FileStore(root / "obj"),
                  producer=None, accounts=None)
    now = datetime.now(UTC)
    await ch.insert("accounts", [{
        "id": "acct_1", "email": "a@example.com", "display_name": "a", "created_at": now,
        "status": "active", "tier": "free", "usage_limit_seconds": 1e9, "async_enabled": 1,
        "streaming_enabled": 1, "max_concurrent_jobs": 5, "max_queued_jobs": 5,
        "max_requests_per_minute": 5, "max_audio_duration_seconds": 5, "retention_days": 30,
        "max_concurrent_sessions": 5, "max_session_seconds": 5, "webhook_secret": "whsec_x",
        "updated_at": now}])
    rows, results = [], []
    for i in range(n + keep):
        tid = f"tr_{i:026d}"
        done = now - timedelta(days=31 if i < n else 1)
        for status, version in (("queued", 1), ("processing", 2), ("completed", 3)):
            rows.append(TranscriptRow(
                id=tid, account_id="acct_1", key_id="k", created_at=done, status=status,
                started_at=done, completed_at=done if status == "completed" else None,
                audio_url="https://example.com/a.wav", file_id="file_" + tid,
                metadata='{"customer":"c"}', audio_duration=2.0, version=version,
                ).model_dump())
        results.append({"id": tid, "account_id": "acct_1", "completed_at": done,
                        "text": "some words", "result": '{"text":"some words"}',
                        "deleted": 0, "version": 1})
        await ctx.objects.put_bytes(f"uploads/file_{tid}", b"audio")
        await ctx.objects.put_bytes(f"jobs/{tid}/spec.json", b"{}")
        await redis.set_json({"account_id": "acct_1"}, "upload", "file_" + tid)
        await redis.set_json(tid, "upload-claim", "file_" + tid)
        await redis.set_json("secret", "webhook-auth", tid)
    for start in range(0, len(rows), 3000):
        await ch.insert("transcripts", rows[start:start + 3000])
    await ch.insert("transcript_results", results)
    statements = lambda: ch.inserts + getattr(ch, "queries", 0)
    s0, c0, t0 = statements(), cpu(), time.perf_counter()
    report = await retention.sweep(ctx, now)
    wall, used, count = time.perf_counter() - t0, cpu() - c0, statements() - s0
    left = (await ch.query("SELECT count() AS n FROM {db}.transcripts FINAL "
                           "WHERE deleted = 0"))[0]["n"]
    print(json.dumps({"deleted": report.transcripts, "wall_s": wall, "cpu_s": used,
                      "statements": count if hasattr(ch, "queries") else None,
                      "kept": left}))
    await redis.close()
    await ch.close()

asyncio.run(main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
"""


def _run(code: Path, root: Path, redis_url: str, n: int, keep: int) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), redis_url, str(n), str(keep)],
                          cwd=code, env=os.environ | {"PYTHONPATH": str(code)},
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"the sweep failed ({code}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _export(rev: str, into: Path) -> Path:
    into.mkdir()
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=500, help="expired transcripts")
    parser.add_argument("--keep", type=int, default=None,
                        help="transcripts not yet expired (default: as many as --n)")
    parser.add_argument("--compare", metavar="REV",
                        help="also run the sweep of this git revision (e.g. f9f9302)")
    args = parser.parse_args(argv)
    keep = args.n if args.keep is None else args.keep
    print("command:", shlex.join([Path(sys.executable).name, "-m", "bench.retention",
                                  *(argv if argv is not None else sys.argv[1:])]))
    print("load average before: %.2f %.2f %.2f" % os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="a5s-bench-retention-") as tmp:
        tmp_path = Path(tmp)
        with scratch_valkey(tmp_path) as redis_url:
            runs: list[tuple[str, Path]] = []
            if args.compare:
                runs.append((args.compare, _export(args.compare, tmp_path / "rev")))
            runs.append(("this tree", REPO))
            for i, (label, code) in enumerate(runs):
                (tmp_path / f"run{i}").mkdir()
                out = _run(code, tmp_path / f"run{i}", redis_url, args.n, keep)
                rate = out["deleted"] / out["wall_s"] if out["wall_s"] else float("inf")
                stmts = out["statements"]
                print(f"{label:>12}: {out['deleted']} expired deleted ({out['kept']} kept) in "
                      f"{out['wall_s']:.2f} s: {rate:.1f} transcripts/s, "
                      f"{1000 * out['cpu_s'] / max(1, out['deleted']):.1f} ms CPU each"
                      + (f", {stmts} ClickHouse statements" if stmts is not None else ""))
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
