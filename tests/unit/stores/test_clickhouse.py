"""ClickHouse through chdb: versioned DDL, and rows written by one process read by the next.

chdb allows one engine per process, so each step runs in its own interpreter, as
two starts of the service would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ops.stack import REPO

WRITE = """
import asyncio, json, sys
from datetime import UTC, datetime
from stores.clickhouse import ClickHouse
from stores.transcripts import Transcripts
from schemas.rows import TranscriptRow
async def main():
    ch = ClickHouse("chdb://" + sys.argv[1])
    await ch.start()
    again = await ch.migrate()
    t = Transcripts(ch)
    now = datetime.now(UTC)
    await t.insert(TranscriptRow(id="tr_a", account_id="acct_1", key_id="k", created_at=now,
                                 status="queued", metadata='{"x": 1}'))
    await t.change("tr_a", "processing", now)
    await t.change("tr_a", "completed", now, audio_duration=3.5)
    await t.change("tr_a", "processing", now)   # a replayed, older state loses
    foreign = await t.change("tr_a", "deleted", now, account_id="acct_2")  # not its owner
    tables = [r["name"] for r in await ch.query(
        "SELECT name FROM system.tables WHERE database = 'a5s' ORDER BY name")]
    storage = [r["s"] for r in await ch.query(
        "SELECT DISTINCT part_storage_type AS s FROM system.parts "
        "WHERE database = 'a5s' AND table = 'transcripts' AND active")]
    print(json.dumps({"second_migrate": again, "tables": tables, "foreign": foreign is None,
                      "storage": storage}))
    await ch.close()
asyncio.run(main())
"""

READ = """
import asyncio, json, sys
from stores.clickhouse import ClickHouse
from stores.transcripts import Transcripts
async def main():
    ch = ClickHouse("chdb://" + sys.argv[1])
    await ch.start()
    row = await Transcripts(ch).get("tr_a", "acct_1")
    other = await Transcripts(ch).get("tr_a", "acct_2")
    print(json.dumps({"status": row.status, "duration": row.audio_duration,
                      "metadata": row.metadata, "other_account": other is None,
                      "applied": await ch.migrate(), "repacked": await ch.set_table_settings()}))
    await ch.close()
asyncio.run(main())
"""


def _run(script: str, path: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", script, str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_rows_survive_a_process_restart(tmp_path: Path) -> None:
    path = tmp_path / "clickhouse"
    first = _run(WRITE, path)
    assert first["second_migrate"] == [], "migrations apply once"
    assert first["foreign"], "a change scoped to another account finds nothing"
    assert {"accounts", "api_keys", "transcripts", "transcript_results", "usage_events",
            "schema_migrations"} <= set(first["tables"])
    assert first["storage"] == ["Packed"], "a small part is one file on the embedded engine"
    second = _run(READ, path)
    assert second == {"status": "completed", "duration": 3.5, "metadata": '{"x": 1}',
                      "other_account": True, "applied": [], "repacked": []}


GROUP_COMMIT = """
import asyncio, json, sys
from datetime import UTC, datetime
from stores.clickhouse import ClickHouse
from schemas.rows import UsageEventRow
async def main():
    ch = ClickHouse("chdb://" + sys.argv[1])
    await ch.start()
    now = datetime.now(UTC)
    before = ch.inserts
    seen = []
    async def one(n):
        await ch.insert("usage_events", [UsageEventRow(
            event_id=f"e{n}", account_id="acct_1", key_id="k", model="a5s-async-v1",
            kind="completed", at=now, audio_seconds=1.0, transcript_id=f"tr_{n}").model_dump()])
        # read-your-writes: a caller returns only once its own row is stored
        rows = await ch.query("SELECT count() AS n FROM {db}.usage_events "
                              "WHERE event_id = {e:String}", {"e": f"e{n}"})
        seen.append(rows[0]["n"])
    async def query_load():  # keeps the ClickHouse thread busy, as a loaded service does
        for _ in range(5):
            await ch.query("SELECT count() FROM numbers(2000000)")
    await asyncio.gather(query_load(), *(one(n) for n in range(40)))
    bad = ch.insert("no_such_table", [{"x": 1}])
    try:
        await bad
        failed = False
    except Exception:
        failed = True
    await one(40)  # alone, after the batch
    total = (await ch.query("SELECT count() AS n FROM {db}.usage_events"))[0]["n"]
    threads = (await ch.query("SELECT value FROM system.settings WHERE name = 'max_threads'"))
    print(json.dumps({"statements": ch.inserts - before, "seen": seen, "total": total,
                      "failed": failed, "max_threads": threads[0]["value"]}))
    await ch.close()
asyncio.run(main())
"""


def test_concurrent_inserts_share_statements_and_each_caller_reads_its_row(
        tmp_path: Path) -> None:
    out = _run(GROUP_COMMIT, tmp_path / "clickhouse")
    assert out["total"] == 41 and out["seen"] == [1] * 41
    assert out["statements"] < 41, out  # rows that waited for the thread went in together
    assert out["failed"], "an insert that fails raises in its caller"
    assert out["max_threads"] == "1"  # the embedded engine runs each statement on one thread


VALUES = """
import asyncio, json, sys
from datetime import UTC, datetime
from stores.clickhouse import ClickHouse
from stores.transcripts import Transcripts
from schemas.rows import TranscriptRow
async def main():
    ch = ClickHouse("chdb://" + sys.argv[1])
    await ch.start()
    row = TranscriptRow(
        id="tr_v", account_id="acct_1", key_id="k", status="completed",
        created_at=datetime(2026, 11, 27, 21, 5, 9, 123000, tzinfo=UTC),
        completed_at=datetime(2026, 11, 27, 23, 59, 59, 999000, tzinfo=UTC),
        audio_url="https://example.com/a.wav?x='1'&y=\\"2\\"",
        metadata=json.dumps({"k": "it's {not} a \\"format\\"\\n\\\\ ü 😀"}),
        audio_duration=1 / 3, webhook_status_code=None, error_message="Ünïcode — fine\\n2nd line",
        version=30_000_001_234_567)
    await Transcripts(ch).insert(row)
    back = await Transcripts(ch).get("tr_v", "acct_1")
    print(json.dumps({"sent": row.model_dump(mode="json"), "back": back.model_dump(mode="json")}))
    await ch.close()
asyncio.run(main())
"""


def test_every_kind_of_value_comes_back_as_it_was_written(tmp_path: Path) -> None:
    """Rows travel to ClickHouse as JSON in the statement: quotes, braces, backslashes,
    new lines, non-ASCII text, NULLs, float digits and times come back unchanged."""
    out = _run(VALUES, tmp_path / "clickhouse")
    sent, back = out["sent"], out["back"]
    assert {k: back[k] for k in sent if k != "version"} == \
        {k: v for k, v in sent.items() if k != "version"}
    assert "😀" in json.loads(back["metadata"])["k"] and back["audio_duration"] == 1 / 3



OUTDATED_PARTS = """
import asyncio, json, os, sys, time
from stores.clickhouse import ClickHouse
from ops.procstat import open_fds, thread_count
async def main():
    ch = ClickHouse("chdb://" + sys.argv[1])
    await ch.start()
    table = "{db}.usage_events"
    await ch.command(f"ALTER TABLE {table} MODIFY SETTING cleanup_delay_period = 1, "
                     "max_cleanup_delay_period = 1, cleanup_delay_period_random_add = 0")
    await ch.command(f"SYSTEM STOP MERGES {table}")
    for n in range(150):  # a part each
        await ch.command(f"INSERT INTO {table} (event_id, account_id) VALUES ('e{n}', 'a')")
    files = lambda: open_fds(os.getpid())["file /proc/<pid>/task/<tid>"]
    threads, thread_files = thread_count(os.getpid()), files()
    await ch.command(f"SYSTEM START MERGES {table}")
    await ch.command(f"OPTIMIZE TABLE {table} FINAL")  # 150 parts outdated at once
    outdated = -1
    for _ in range(120):  # the cleaning thread's turn: every second here
        outdated = (await ch.query("SELECT count() AS n FROM system.parts WHERE database = "
                                   "'a5s' AND table = 'usage_events' AND NOT active"))[0]["n"]
        if not outdated:
            break
        await asyncio.sleep(0.5)
    for n in range(50):  # statements that would run on whatever threads the pool keeps
        await ch.query(f"SELECT count() FROM {table}")
    print(json.dumps({"outdated": outdated, "threads": [threads, thread_count(os.getpid())],
                      "thread_files": [thread_files, files()]}))
    await ch.close()
asyncio.run(main())
"""


def test_outdated_parts_are_removed_without_a_crowd_of_threads_left_behind(
        tmp_path: Path, own_process) -> None:
    """150 parts outdated at once (ClickHouse removes 100 or more on up to 128 threads of
    a pool that keeps them for the life of the process, each then holding three files once
    it has run a statement's work): removed, and the process has a few threads more at most."""
    out = own_process(OUTDATED_PARTS, str(tmp_path / "clickhouse"))
    assert out["outdated"] == 0, out
    (before, after), (files, files_after) = out["threads"], out["thread_files"]
    assert after - before <= 8, out
    assert files_after - files <= 3 * 8, out  # three a thread
