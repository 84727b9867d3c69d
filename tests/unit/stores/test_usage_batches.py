"""Batch usage events against real chdb and Valkey: pending until the usage writer's insert,
counted once by ``GET /v1/usage`` whichever store holds them.

chdb allows one engine per process, so the scenario runs in its own interpreter and prints
what it saw; the assertions are here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, date, datetime
from pathlib import Path

from gateway.usage import add_pending
from ops.stack import REPO
from schemas.rows import UsageEventRow

SCENARIO = """
import asyncio, json, sys
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from gateway.usage import UsageService
from schemas.records import AccountLimits, Finished, Submitted
from schemas.rows import UsageEventRow, usage_of
from stores.clickhouse import ClickHouse
from stores.redis import RedisStore
from stores.transcripts import Transcripts
out = {}

def totals(usage):
    t = usage.totals["a5s-async-v1"]
    s = usage.totals["a5s-v2-streaming"]
    return [t.requests, t.completed, t.failed, t.audio_seconds, s.requests, s.audio_seconds,
            [[k.key_id, k.model, k.requests, k.audio_seconds] for k in usage.by_key]]

async def main():
    ch = ClickHouse("chdb://" + sys.argv[1])
    await ch.start()
    redis = RedisStore(sys.argv[2], prefix="ub:")
    t = Transcripts(ch, redis)
    usage = UsageService(SimpleNamespace(ch=ch, redis=redis))
    now = datetime.now(UTC)
    limits = AccountLimits(usage_limit_seconds=100)
    old = usage_of(Submitted(account_id="acct_1", transcript_id="tr_0", at=now, limits=limits,
                             key_id="key_1"))
    request = usage_of(Submitted(account_id="acct_1", transcript_id="tr_1", at=now,
                                 limits=limits, key_id="key_1"))
    done = usage_of(Finished(account_id="acct_1", transcript_id="tr_1", status="completed",
                             duration=2.5, key_id="key_1", usage_at=now))
    failed = usage_of(Finished(account_id="acct_1", transcript_id="tr_2", status="error",
                               key_id="key_2", usage_at=now))
    out["announced"] = usage_of(Finished(account_id="acct_1", transcript_id="tr_1",
                                         status="completed", duration=2.5)) is None
    stream = UsageEventRow(event_id="sess_1", account_id="acct_1", key_id="key_1",
                           model="a5s-v2-streaming", kind="stream", at=now, audio_seconds=4.0)
    await t.record_usage(stream)
    before = ch.inserts
    await t.write_usage([old])  # written by the usage writer: in ClickHouse only
    out["one_insert"] = ch.inserts - before
    await t.pend_usage(request)  # pending only: the writer has not taken it yet
    await t.pend_usage(done)  # pending, and already inserted (the writer between its steps)
    await ch.insert("usage_events", [done.model_dump()])
    await t.pend_usage(failed)
    await t.pend_usage(UsageEventRow(  # pending, dated before the window
        event_id="tr_9:request", account_id="acct_1", key_id="key_1", model="a5s-async-v1",
        kind="request", at=now - timedelta(days=40), transcript_id="tr_9"))
    withdrawn = usage_of(Submitted(account_id="acct_1", transcript_id="tr_3", at=now,
                                   limits=limits, key_id="key_1"))
    await t.pend_usage(withdrawn)  # a submission that could not be published
    await t.unpend_usage(withdrawn)
    await t.pend_usage(usage_of(Submitted(  # another account's
        account_id="acct_2", transcript_id="tr_5", at=now, limits=limits, key_id="key_5")))
    out["pending"] = sorted(e.event_id for e in await t.pending_usage("acct_1"))
    out["mixed"] = totals(await usage.usage("acct_1", 30, "UTC"))
    before = ch.inserts
    await t.write_usage([request, done, failed])  # the writer's batch: one part
    out["batch_inserts"] = ch.inserts - before
    out["pending_after"] = sorted(e.event_id for e in await t.pending_usage("acct_1"))
    out["written"] = totals(await usage.usage("acct_1", 30, "UTC"))
    await t.write_usage([request, done, failed])  # a replayed batch
    out["replayed"] = totals(await usage.usage("acct_1", 30, "UTC"))
    out["other"] = totals(await usage.usage("acct_2", 30, "UTC"))
    await redis.close()
    await ch.close()
    print(json.dumps(out))

asyncio.run(main())
"""


def test_pending_events_are_counted_once_until_and_after_the_writer_stores_them(
        tmp_path: Path, valkey: str) -> None:
    proc = subprocess.run([sys.executable, "-c", SCENARIO, str(tmp_path / "ch"), valkey],
                          cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["announced"], "a re-announced outcome carries no usage event"
    assert out["one_insert"] == 1 and out["batch_inserts"] == 1
    assert out["pending"] == ["tr_1:finished", "tr_1:request", "tr_2:finished", "tr_9:request"]
    by_key = [["key_1", "a5s-async-v1", 2, 2.5], ["key_1", "a5s-v2-streaming", 1, 4.0],
              ["key_2", "a5s-async-v1", 0, 0.0]]
    # requests tr_0 and tr_1, tr_1 completed (2.5 s, in both stores: counted once), tr_2
    # failed; the stream session; tr_9 outside the window.
    expected = [2, 1, 1, 2.5, 1, 4.0, by_key]
    assert out["mixed"] == expected
    assert out["pending_after"] == ["tr_9:request"], "the writer drops what it stored"
    assert out["written"] == expected and out["replayed"] == expected
    assert out["other"] == [1, 0, 0, 0.0, 0, 0.0, [["key_5", "a5s-async-v1", 1, 0.0]]]


def test_pending_events_fall_on_the_day_of_the_asked_time_zone() -> None:
    late = datetime(2026, 3, 1, 22, 30, tzinfo=UTC)  # 2 March 04:15 in Kathmandu
    event = UsageEventRow(event_id="tr_1:finished", account_id="a", key_id="k",
                          model="a5s-async-v1", kind="completed", at=late, audio_seconds=3.0)
    daily: dict = {("2026-03-02", "a5s-async-v1"): {"requests": 1, "completed": 0,
                                                     "failed": 0, "audio_seconds": 0.0}}
    keys = add_pending(daily, [{"key_id": "k", "model": "a5s-async-v1", "requests": 1,
                                "audio_seconds": 0.0}], [event], "Asia/Kathmandu",
                       date(2026, 3, 1), date(2026, 3, 2))
    assert daily == {("2026-03-02", "a5s-async-v1"): {"requests": 1, "completed": 1,
                                                      "failed": 0, "audio_seconds": 3.0}}
    assert keys == [{"key_id": "k", "model": "a5s-async-v1", "requests": 1,
                     "audio_seconds": 3.0}]
    assert add_pending({}, [], [event], "UTC", date(2026, 3, 2), date(2026, 3, 2)) == []
