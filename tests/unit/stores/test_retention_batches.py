"""Retention deletes expired transcripts in batches, on real chdb, Valkey and a file store.

chdb allows one engine per process, so the sweep runs in its own interpreter and prints
what it saw; the assertions are here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ops.stack import REPO

SWEEP = """
import asyncio, json, sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
import stores.retention as R
from schemas.records import TranscriptResult
from schemas.rows import TranscriptRow
from schemas.settings import Settings
from stores.clickhouse import ClickHouse
from stores.context import Context
from stores.objects import FileStore, ObjectMissing
from stores.redis import RedisStore
from stores.transcripts import Transcripts

R.BATCH = 5  # several batches from a dozen transcripts
EXPIRED, KEPT = [f"tr_old{i:02d}" for i in range(12)], ["tr_new", "tr_running"]

async def main():
    root = Path(sys.argv[1])
    ch = ClickHouse("chdb://" + str(root / "ch"))
    await ch.start()
    redis = RedisStore(sys.argv[2], prefix=sys.argv[3])
    ctx = Context(settings=Settings(), ch=ch, redis=redis, objects=FileStore(root / "obj"),
                  producer=None, accounts=None)
    t = Transcripts(ch, redis)
    now = datetime.now(UTC)
    await ch.insert("accounts", [{
        "id": "acct_1", "email": "a@example.com", "display_name": "a", "created_at": now,
        "status": "active", "tier": "free", "usage_limit_seconds": 1.0, "async_enabled": 1,
        "streaming_enabled": 1, "max_concurrent_jobs": 5, "max_queued_jobs": 5,
        "max_requests_per_minute": 5, "max_audio_duration_seconds": 5, "retention_days": 1,
        "max_concurrent_sessions": 5, "max_session_seconds": 5, "webhook_secret": "whsec_x",
        "updated_at": now}])
    for tid in EXPIRED + KEPT:
        old = tid in EXPIRED
        at = now - timedelta(days=3 if old else 0)
        await t.insert(TranscriptRow(
            id=tid, account_id="acct_1", key_id="k", created_at=at, status="queued",
            audio_url="https://example.com/secret.wav", webhook_url="https://h.example/x",
            file_id="file_" + tid, metadata='{"customer":"c"}'))
        await ctx.objects.put_bytes(f"uploads/file_{tid}", b"audio")
        await ctx.objects.put_bytes(f"jobs/{tid}/spec.json", b"{}")
        await redis.set_json("secret", "webhook-auth", tid)
        await redis.set_json({"account_id": "acct_1"}, "upload", "file_" + tid)
        await redis.set_json(tid, "upload-claim", "file_" + tid)
        row = await t.change(tid, "processing", at, account_id="acct_1")
        if tid == "tr_running":
            continue
        await t.save_result(row, TranscriptResult(text="words of " + tid))
        await t.change(tid, "completed", at, account_id="acct_1", audio_duration=1.0)
    report = await R.sweep(ctx, now)
    again = await R.sweep(ctx, now)
    # What one batch costs in ClickHouse statements, for 1 and for 7 transcripts.
    costs = {}
    for n in (1, 7):
        rows = []
        for i in range(n):
            tid = f"tr_cost{n}_{i}"
            await t.insert(TranscriptRow(id=tid, account_id="acct_1", key_id="k",
                                         created_at=now, status="completed"))
            rows.append(await t.get(tid, "acct_1"))
        before = ch.inserts + ch.queries
        await t.delete_many(rows)
        costs[n] = ch.inserts + ch.queries - before
    seen = {}
    for tid in EXPIRED + KEPT:
        versions = await ch.query("SELECT deleted, metadata, audio_url, webhook_url FROM "
                                  "{db}.transcripts WHERE id = {i:String}", {"i": tid})
        results = await ch.query("SELECT count() AS n FROM {db}.transcript_results FINAL "
                                 "WHERE id = {i:String} AND deleted = 0", {"i": tid})
        objects = []
        for key in (f"uploads/file_{tid}", f"jobs/{tid}/spec.json"):
            try:
                await ctx.objects.get_bytes(key)
                objects.append(key)
            except ObjectMissing:
                pass
        redis_keys = [k for k in (("webhook-auth", tid), ("upload", "file_" + tid),
                                  ("upload-claim", "file_" + tid), ("transcript", tid))
                      if await redis.client.exists(redis.k(*k))]
        row = await t.get(tid, "acct_1")
        await redis.row_forget([tid])  # and what ClickHouse alone answers
        stored = await t.get_with_result(tid, "acct_1")
        seen[tid] = {"versions": versions, "results": results[0]["n"], "objects": objects,
                     "redis": [k[0] for k in redis_keys],
                     "row": None if row is None else row.status,
                     "stored": None if stored is None else
                               [stored[0].status, stored[1] and stored[1].text]}
    print(json.dumps({"report": report.transcripts, "again": again.transcripts,
                      "costs": costs, "seen": seen}, default=str))
    await redis.close()
    await ch.close()
asyncio.run(main())
"""


def test_expired_transcripts_are_deleted_in_batches_leaving_only_tombstones(
        tmp_path: Path, valkey: str) -> None:
    proc = subprocess.run([sys.executable, "-c", SWEEP, str(tmp_path), valkey, "ret1:"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["report"] == 12 and out["again"] == 0
    assert out["costs"] == {"1": 4, "7": 4}, "a batch costs the same statements as one"
    for i in range(12):
        seen = out["seen"][f"tr_old{i:02d}"]
        assert seen["versions"] == [{"deleted": 1, "metadata": "{}", "audio_url": None,
                                     "webhook_url": None}], seen
        assert seen["results"] == 0 and seen["objects"] == [] and seen["redis"] == []
        assert seen["row"] is None and seen["stored"] is None
    kept = out["seen"]["tr_new"]
    assert kept["row"] == "completed" and kept["stored"] == ["completed", "words of tr_new"]
    assert kept["results"] == 1 and len(kept["objects"]) == 2
    assert set(kept["redis"]) == {"webhook-auth", "upload", "upload-claim", "transcript"}
    running = out["seen"]["tr_running"]
    # Kept whole; ClickHouse alone holds the row before the live-only ``processing`` one.
    assert running["row"] == "processing" and running["stored"] == ["queued", None]
