"""The embedded engine's insert log: the job path's rows kept in a file, inserted in batches,
seen by every read, and not lost when the process dies before their insert.

The log itself is driven without an engine. The engine's side runs chdb, which allows one
engine per process, so each step runs in its own interpreter, as two starts of the
service would; "the process dies" is ``os._exit`` with rows still in the log.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ops.stack import REPO
from stores.clickhouse import INSERT_LOG_DIR
from stores.insert_log import Batch, InsertLog


def _append(log: InsertLog, table: str, rows: list[list]) -> None:
    log.append(table, ["a", "b"], [json.dumps(row) for row in rows])


def _rows(batch: Batch) -> dict[tuple[str, tuple[str, ...]], list[list]]:
    return {key: [json.loads(row) for row in rows] for key, rows in batch.rows.items()}


def test_a_batch_takes_every_row_and_its_segments_go_once_inserted(tmp_path: Path) -> None:
    log = InsertLog(tmp_path)
    _append(log, "t1", [[1, "x"]])
    _append(log, "t2", [[2, "y"]])
    _append(log, "t1", [[3, "z"], [4, "w"]])
    assert log.pending == 4
    batch = log.take()
    assert batch is not None and len(batch) == 4
    assert _rows(batch) == {("t1", ("a", "b")): [[1, "x"], [3, "z"], [4, "w"]],
                          ("t2", ("a", "b")): [[2, "y"]]}
    assert log.pending == 0 and log.take() is None
    _append(log, "t1", [[5, "v"]])  # after the take: a segment of its own
    assert all(p.exists() for p in batch.segments)
    log.done(batch)
    assert not any(p.exists() for p in batch.segments)
    assert len(list(tmp_path.glob("segment-*"))) == 1, "the newer row's segment stays"
    log.close()


def test_a_failed_batch_goes_back_before_newer_rows(tmp_path: Path) -> None:
    log = InsertLog(tmp_path)
    _append(log, "t1", [[1, "x"]])
    first = log.take()
    assert first is not None
    _append(log, "t1", [[2, "y"]])
    log.give_back(first)
    assert log.pending == 2
    again = log.take()
    assert again is not None
    assert _rows(again) == {("t1", ("a", "b")): [[1, "x"], [2, "y"]]}
    assert set(first.segments) <= set(again.segments), "its segments go with the retry"
    log.done(again)
    assert list(tmp_path.glob("segment-*")) == [tmp_path / "segment-00000002.jsonl"]
    log.close()


def test_a_new_log_takes_what_an_earlier_one_left_and_a_torn_line_is_left_out(
        tmp_path: Path) -> None:
    log = InsertLog(tmp_path)
    _append(log, "t1", [[1, "x"]])
    _append(log, "t1", [[2, "y"]])
    log.close()  # the process died: nothing was inserted
    segment = next(tmp_path.glob("segment-*"))
    with segment.open("ab") as f:
        f.write(b'["t1", ["a", "b"], [[3, ')  # died inside this write: never acknowledged
    again = InsertLog(tmp_path)
    assert again.pending == 2
    batch = again.take()
    assert batch is not None and _rows(batch) == {("t1", ("a", "b")): [[1, "x"], [2, "y"]]}
    assert segment in batch.segments
    again.done(batch)
    assert list(tmp_path.glob("segment-*")) == [tmp_path / "segment-00000002.jsonl"]
    again.close()


def test_a_failed_write_keeps_its_bytes_away_from_the_rows_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk cannot be made here, so ``os.write`` stands in for it: half a line
    written, then ENOSPC."""
    log = InsertLog(tmp_path)
    _append(log, "t1", [[1, "x"]])
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        real_write(fd, bytes(data[:len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("stores.insert_log.os.write", full)
    with pytest.raises(OSError):
        _append(log, "t1", [[2, "y"]])
    monkeypatch.undo()
    _append(log, "t1", [[3, "z"]])
    assert log.pending == 2
    log.close()  # the process died
    again = InsertLog(tmp_path)
    batch = again.take()
    assert batch is not None
    assert _rows(batch) == {("t1", ("a", "b")): [[1, "x"], [3, "z"]]}, \
        "the refused row is not kept, and the row after it is not lost in its bytes"
    again.done(batch)
    again.close()


def test_empty_segments_of_an_earlier_process_are_removed(tmp_path: Path) -> None:
    InsertLog(tmp_path).close()
    InsertLog(tmp_path).close()
    log = InsertLog(tmp_path)
    assert log.pending == 0
    assert list(tmp_path.glob("segment-*")) == [tmp_path / "segment-00000002.jsonl"]
    log.close()


WRITE_AND_DIE = """
import asyncio, json, os, sys, time
from stores.clickhouse import ClickHouse
def event(i, version=None):
    return {"event_id": f"tr_{i}:request", "account_id": "acct_1", "key_id": "k",
            "model": "base", "kind": "request", "at": "2026-12-01T10:00:00+00:00",
            "audio_seconds": 1.5 if version is None else version, "transcript_id": f"tr_{i}"}
COUNT = "SELECT count() AS n FROM {db}.usage_events FINAL"
async def main():
    ch = ClickHouse("chdb://" + sys.argv[1], batch_s=float(sys.argv[2]))
    await ch.start()
    out = {}
    before = ch.inserts
    for i in range(3):
        await ch.insert("usage_events", [event(i)])
    out["statements_while_logged"] = ch.inserts - before
    out["logged"] = ch.logged_rows
    out["read"] = (await ch.query(COUNT))[0]["n"]
    out["statements_for_three"] = ch.inserts - before
    await ch.insert("usage_events", [event(3)])
    await ch.insert("usage_events", [{**event(4), "audio_seconds": "not a number"}])
    await ch.insert("usage_events", [event(5)])
    if sys.argv[3] == "wait":
        time.sleep(float(sys.argv[2]) * 3)  # the timer's batch, no read asking for it
        out["logged_after_wait"] = ch.logged_rows
        out["statements_after_wait"] = ch.inserts - before
    print(json.dumps(out), flush=True)
    os._exit(0)  # dies: no close, no last insert
asyncio.run(main())
"""

READ = """
import asyncio, json, sys
from stores.clickhouse import ClickHouse
async def main():
    ch = ClickHouse("chdb://" + sys.argv[1], batch_s=1.0)
    await ch.start()
    rows = await ch.query("SELECT transcript_id FROM {db}.usage_events FINAL ORDER BY 1")
    print(json.dumps({"ids": [r["transcript_id"] for r in rows], "logged": ch.logged_rows}))
    await ch.close()
asyncio.run(main())
"""


def _run(script: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", script, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_rows_in_the_log_are_read_at_once_and_survive_the_process(tmp_path: Path) -> None:
    path = tmp_path / "clickhouse"
    first = _run(WRITE_AND_DIE, str(path), "60", "die")
    assert first["statements_while_logged"] == 0, "the rows wait in the log"
    assert first["logged"] == 3
    assert first["read"] == 3, "a read inserts what the log holds first"
    assert first["statements_for_three"] == 1, "three callers' rows, one insert"
    log_dir = path / INSERT_LOG_DIR
    assert any(p.stat().st_size for p in log_dir.glob("segment-*")), "the last rows are logged"
    second = _run(READ, str(path))
    assert second["ids"] == ["tr_0", "tr_1", "tr_2", "tr_3", "tr_5"], \
        "rows logged before the process died are inserted at the next start"
    assert second["logged"] == 0
    assert not any(p.stat().st_size for p in log_dir.glob("segment-*"))
    rejected = [json.loads(line) for line in (log_dir / "rejected.jsonl").read_text().splitlines()]
    assert [r[2][0][7] for r in rejected] == ["tr_4"], \
        "the row the engine refuses is kept aside, not retried before every read"


def test_the_timer_inserts_the_log_without_a_read(tmp_path: Path) -> None:
    out = _run(WRITE_AND_DIE, str(tmp_path / "clickhouse"), "0.3", "wait")
    assert out["logged_after_wait"] == 0
    assert out["statements_after_wait"] >= 2, "the rows after the read went in on the timer"
