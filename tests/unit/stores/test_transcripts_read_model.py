"""The transcripts' Redis read model against real chdb and Valkey.

chdb allows one engine per process, so each scenario runs in its own interpreter and
prints what it saw; the assertions are here. ``queries`` counts the ClickHouse
statements a step ran: 0 means the read model answered.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

_PRELUDE = """
import asyncio, json, sys
from datetime import UTC, datetime, timedelta
import stores.redis as redis_mod
import stores.transcripts as T
from schemas.records import TranscriptResult
from schemas.rows import TranscriptRow
from stores.clickhouse import ClickHouse
from stores.redis import RedisStore
out = {}
def seen(name, value):
    out[name] = value
async def stores():
    ch = ClickHouse("chdb://" + sys.argv[1])
    await ch.start()
    redis = RedisStore(sys.argv[2], prefix=sys.argv[3])
    return ch, redis, T.Transcripts(ch, redis)
def scenario(main):  # runs main(ch, redis, t, now) on fresh stores, then prints what it saw
    async def run():
        ch, redis, t = await stores()
        try:
            await main(ch, redis, t, datetime.now(UTC))
        finally:
            await redis.close()
            await ch.close()
        print(json.dumps(out))
    asyncio.run(run())
async def counted(ch, call):
    before = ch.queries
    value = await call
    return value, ch.queries - before
def page(rows):
    return [[r.id, r.status] for r in rows]
def lister(ch, t):  # listed(name, account, **list args): a page and its ClickHouse queries
    async def listed(name, account="acct_1", **kw):
        rows, q = await counted(ch, t.list(account, limit=kw.pop("limit", 10), **kw))
        seen(name, [page(rows), q])
    return listed
def brief(row):
    return None if row is None else {"status": row.status, "deleted": row.deleted,
                                     "metadata": row.metadata, "version": row.version,
                                     "duration": row.audio_duration}
"""

LIFECYCLE = _PRELUDE + """
async def main(ch, redis, t, now):
    plain = T.Transcripts(ch)  # ClickHouse only
    await t.insert(TranscriptRow(id="tr_a", account_id="acct_1", key_id="k", created_at=now,
                                 status="queued", metadata='{"x":1}'))
    row, q = await counted(ch, t.get("tr_a", "acct_1"))
    seen("queued", [brief(row), q, brief(await plain.get("tr_a", "acct_1"))])
    await t.change("tr_a", "processing", now, account_id="acct_1")
    row, q = await counted(ch, t.get("tr_a", "acct_1"))
    seen("processing", [brief(row), q, brief(await plain.get("tr_a", "acct_1"))])
    await t.save_result(row, TranscriptResult(text="hello there"))
    # Still processing: the row says so, and the result is not shown before completion.
    found, q = await counted(ch, t.get_with_result("tr_a", "acct_1"))
    seen("result_before_completed", [brief(found[0]), found[1] is None, q])
    await t.change("tr_a", "completed", now, account_id="acct_1", audio_duration=2.5)
    found, q = await counted(ch, t.get_with_result("tr_a", "acct_1"))
    seen("completed", [brief(found[0]), found[1].text, q,
                       brief(await plain.get("tr_a", "acct_1"))])
    await t.change("tr_a", "processing", now, account_id="acct_1")  # a replay: loses
    row, q = await counted(ch, t.get("tr_a", "acct_1"))
    seen("replayed_older_state", [brief(row), q])
    # Another account's id: not found, from the read model as from ClickHouse.
    other, q = await counted(ch, t.get("tr_a", "acct_2"))
    other_full, q2 = await counted(ch, t.get_with_result("tr_a", "acct_2"))
    other_change = await t.change("tr_a", "deleted", now, account_id="acct_2")
    seen("other_account", [other, q, other_full, q2, other_change,
                           brief(await t.get("tr_a", "acct_1"))])
    # The read model's entry ends: ClickHouse answers the same.
    await redis.row_forget(["tr_a"])
    found, q = await counted(ch, t.get_with_result("tr_a", "acct_1"))
    seen("expired", [brief(found[0]), found[1].text, q])
    # An entry mid-write (a writer between begin and end, or one that died there) is not
    # used; nor is one from before a Redis restart (another run_id).
    await t.change("tr_a", "completed", now, account_id="acct_1", audio_duration=2.5)
    await t.set_webhook_status("tr_a", 204, "acct_1")
    await redis.row_begin("tr_a", 60)
    row, q = await counted(ch, t.get("tr_a", "acct_1"))
    seen("mid_write", [brief(row), q])
    await redis.row_end("tr_a", 1, "{}", 60, False)  # an older version: not stored
    row, q = await counted(ch, t.get("tr_a", "acct_1"))
    seen("older_end", [brief(row), q, row.webhook_status_code])
    await redis.client.hset(redis.k("transcript", "tr_a"), "run", "0" * 40)
    row, q = await counted(ch, t.get("tr_a", "acct_1"))
    seen("other_run", [brief(row), q])
    # Deleted stays deleted: in the read model, in ClickHouse after expiry, and after a
    # replayed change.
    await t.change("tr_a", "completed", now, account_id="acct_1")
    await t.delete(await t.get("tr_a", "acct_1"))
    gone, q = await counted(ch, t.get("tr_a", "acct_1"))
    tomb = await t.get("tr_a", include_deleted=True)
    full, q2 = await counted(ch, t.get_with_result("tr_a", "acct_1"))
    result, q3 = await counted(ch, t.result("tr_a", "acct_1"))
    seen("deleted", [gone, q, brief(tomb), full, q2, result, q3])
    await t.change("tr_a", "completed", now, account_id="acct_1")
    await t.set_webhook_status("tr_a", 500)
    await redis.row_forget(["tr_a"])
    seen("deleted_after_expiry", [await t.get("tr_a", "acct_1"),
                                  await t.get_with_result("tr_a", "acct_1"),
                                  brief(await t.get("tr_a", include_deleted=True))])
    # Entries expire: a live job's after LIVE_TTL_S, an ended one's after DONE_TTL_S.
    await t.insert(TranscriptRow(id="tr_b", account_id="acct_1", key_id="k", created_at=now,
                                 status="queued"))
    live_ttl = await redis.client.ttl(redis.k("transcript", "tr_b"))
    await t.change("tr_b", "error", now, account_id="acct_1", error_code="x",
                   error_message="y")
    done_ttl = await redis.client.ttl(redis.k("transcript", "tr_b"))
    seen("ttl", [live_ttl, done_ttl])
scenario(main)
"""

LISTS = _PRELUDE + """
async def main(ch, redis, t, now):
    listed = lister(ch, t)
    for tid in ("tr_1", "tr_2"):
        await t.insert(TranscriptRow(id=tid, account_id="acct_1", key_id="k", created_at=now,
                                     status="queued"))
    await listed("first")
    await listed("again")
    await listed("other_account", "acct_2")
    await listed("other_filter", status="queued")
    await t.change("tr_1", "processing", now, account_id="acct_1")
    await listed("after_change")
    await listed("after_change_again")
    # A writer between its ClickHouse write and its end: no page is reused or kept.
    await redis.row_begin("tr_1", 60, "acct_1")
    await listed("mid_write")
    await listed("mid_write_again")
    await redis.row_end("tr_1", 1, "{}", 60, False, "acct_1")
    await listed("ended")
    await listed("ended_again")
    # A restarted Redis (another run_id): the stamp starts again, no page from before.
    await redis.client.hset(redis.k("transcripts", "acct_1"), "run", "0" * 40)
    await listed("other_run")
    # Batch deletion (retention) moves the stamp too.
    await t.delete_many([await t.get("tr_2", "acct_1")])
    await listed("after_delete_many")
    # Redis unreachable: ClickHouse answers.
    down = T.Transcripts(ch, RedisStore("redis://127.0.0.1:1", prefix="x:"))
    rows, q = await counted(ch, down.list("acct_1", limit=10))
    seen("redis_down", [page(rows), q])
scenario(main)
"""

LIVE = _PRELUDE + """
async def main(ch, redis, t, now):
    plain = T.Transcripts(ch)  # ClickHouse only
    listed = lister(ch, t)
    for tid in ("tr_1", "tr_2"):
        await t.insert(TranscriptRow(id=tid, account_id="acct_1", key_id="k", created_at=now,
                                     status="queued"))
    await listed("first")
    inserts = ch.inserts
    started = now + timedelta(seconds=1)
    await t.change("tr_1", "processing", started, account_id="acct_1")
    row, q = await counted(ch, t.get("tr_1", "acct_1"))
    seen("processing", [brief(row), q, ch.inserts - inserts,
                        brief(await plain.get("tr_1", "acct_1"))])
    # The list shows it at once, without its ClickHouse row; each filter too.
    await listed("list")
    await listed("only_processing", status="processing")
    await listed("only_queued", status="queued")
    await listed("one_a_page_processing", status="processing", limit=1)
    seen("in_state", await t.in_state())
    # A writer mid-write: ClickHouse answers, the live row still stands above its row.
    await redis.row_begin("tr_1", 60)
    row, q = await counted(ch, t.get("tr_1", "acct_1"))
    seen("mid_write", [brief(row), q])
    await redis.row_end("tr_1", 1, "{}", 60, False)
    # A replay of the move loses; the outcome replaces the live row and keeps its start.
    await t.change("tr_1", "processing", started + timedelta(seconds=5), account_id="acct_1")
    done = now + timedelta(seconds=3)
    await t.change("tr_1", "completed", done, account_id="acct_1", audio_duration=2.0)
    stored = await plain.get("tr_1", "acct_1")
    seen("completed", [brief(await t.get("tr_1", "acct_1")), brief(stored),
                       abs((stored.started_at - started).total_seconds()) < 0.001,
                       abs((stored.completed_at - done).total_seconds()) < 0.001,
                       await redis.rows_live(["tr_1", "tr_2"])])
    # A restarted Redis (another run_id): no live row is used, and the next move to
    # processing is written to ClickHouse, as before the read model kept it.
    await t.change("tr_2", "processing", started, account_id="acct_1")
    await redis.client.hset(redis.k("transcript", "tr_2"), "run", "0" * 40)
    seen("other_run", [brief(await t.get("tr_2", "acct_1")),
                       await redis.rows_live(["tr_2"])])
    await redis.row_forget(["tr_2"])
    inserts = ch.inserts
    await t.change("tr_2", "processing", started, account_id="acct_1")
    seen("no_entry", [ch.inserts - inserts, brief(await plain.get("tr_2", "acct_1"))])
scenario(main)
"""


CARRY = _PRELUDE + """
async def main(ch, redis, t, now):
    other = T.Transcripts(ch, redis)  # another process's writer: it keeps no page of t's
    plain = T.Transcripts(ch)  # ClickHouse only: what a fresh read answers
    async def listed(name, limit=10, **kw):
        rows, q = await counted(ch, t.list("acct_1", limit=limit, **kw))
        fresh = await plain.list("acct_1", limit=limit, **kw)
        seen(name, [page(rows), q, [(r.id, r.version) for r in rows] ==
                    [(r.id, r.version) for r in fresh]])
    async def new(tid):
        await other.insert(TranscriptRow(id=tid, account_id="acct_1", key_id="k",
                                         created_at=now, status="queued"))
    for tid in ("tr_1", "tr_2", "tr_3"):
        await new(tid)
    await listed("first")
    await other.change("tr_2", "completed", now, account_id="acct_1")
    await listed("changed")
    await new("tr_4")
    await listed("added")
    await listed("full", limit=2)
    await other.change("tr_1", "error", now, account_id="acct_1", error_code="x")
    await listed("below_full", limit=2)
    await new("tr_5")
    await listed("above_full", limit=2)
    await listed("only_completed", status="completed")
    await other.change("tr_3", "completed", now, account_id="acct_1")
    await listed("only_completed_joined", status="completed")
    await listed("unchanged")
    await other.delete(await other.get("tr_4", "acct_1"))
    await listed("deleted")
    await listed("deleted_full", limit=2)
    await listed("deleted_full_again", limit=2)
    # Writes the stamp does not name: a batch (retention), too many to keep, an entry gone.
    await t.delete_many([await t.get("tr_1", "acct_1")])
    await listed("batch")
    for code in range(redis_mod.LIST_CHANGES + 1):
        await other.set_webhook_status("tr_3", 200 + code, "acct_1")
    await listed("too_many")
    await other.set_webhook_status("tr_3", 500, "acct_1")
    await redis.row_forget(["tr_3"])
    await listed("entry_gone")
    fields = await redis.client.hkeys(redis.k("transcripts", "acct_1"))
    seen("noted", sum(1 for f in fields if f.startswith("c")))
scenario(main)
"""


def test_read_model_answers_every_state_and_falls_back_to_clickhouse(
        tmp_path: Path, valkey: str, own_process: Callable[..., dict]) -> None:
    from stores.transcripts import DONE_TTL_S, LIVE_TTL_S
    out = own_process(LIFECYCLE, str(tmp_path / "ch"), valkey, "rm1:")

    def state(value: dict) -> tuple:
        return value["status"], value["deleted"], value["metadata"], value["duration"]

    # Read-your-writes after each change, from Redis alone, equal to ClickHouse's row;
    # ``processing`` is kept in the read model only (ClickHouse holds the row before it).
    for name, status in (("queued", "queued"), ("processing", "processing")):
        row, queries, stored = out[name]
        assert row["status"] == status and queries == 0, (name, out[name])
    row, _, stored = out["queued"]
    assert row == stored
    row, _, stored = out["processing"]
    assert stored["status"] == "queued" and stored["version"] < row["version"]
    assert {k: v for k, v in row.items() if k not in ("status", "version")} == \
        {k: v for k, v in stored.items() if k not in ("status", "version")}
    row, no_result, queries = out["result_before_completed"]
    assert row["status"] == "processing" and no_result and queries == 0
    row, text, queries, stored = out["completed"]
    assert state(row) == ("completed", 0, '{"x":1}', 2.5) and text == "hello there"
    assert queries == 0 and row == stored
    row, queries = out["replayed_older_state"]
    assert row["status"] == "completed" and queries == 0
    other, q, other_full, q2, other_change, own = out["other_account"]
    assert other is None and other_full is None and other_change is None
    assert q == 0 and q2 == 0
    assert own["status"] == "completed" and own["deleted"] == 0
    row, text, queries = out["expired"]
    assert state(row) == ("completed", 0, '{"x":1}', 2.5) and text == "hello there"
    assert queries == 2, "without an entry, ClickHouse answers (row and result)"
    row, queries = out["mid_write"]
    assert row["status"] == "completed" and queries == 1
    row, queries, code = out["older_end"]
    assert queries == 0 and code == 204, "an older version does not replace the entry"
    row, queries = out["other_run"]
    assert row["status"] == "completed" and queries == 1
    gone, q, tomb, full, q2, result, q3 = out["deleted"]
    assert gone is None and full is None and result is None and q == q2 == q3 == 0
    assert tomb["deleted"] == 1 and tomb["metadata"] == "{}"
    assert out["deleted_after_expiry"][:2] == [None, None]
    assert out["deleted_after_expiry"][2]["deleted"] == 1
    live_ttl, done_ttl = out["ttl"]
    assert LIVE_TTL_S - 60 < live_ttl <= LIVE_TTL_S
    assert DONE_TTL_S - 60 < done_ttl <= DONE_TTL_S


def test_list_pages_are_reused_only_while_no_row_of_the_account_changed(
        tmp_path: Path, valkey: str, own_process: Callable[..., dict]) -> None:
    out = own_process(LISTS, str(tmp_path / "ch"), valkey, "rm2:")
    queued = [["tr_2", "queued"], ["tr_1", "queued"]]
    assert out["first"] == [queued, 1]
    assert out["again"] == [queued, 0], "an unchanged account's page is answered again"
    assert out["other_account"] == [[], 1]
    assert out["other_filter"] == [queued, 1], "each page (filter, cursor, limit) is its own"
    changed = [["tr_2", "queued"], ["tr_1", "processing"]]
    # The move to processing is kept in the read model only: the kept page is answered
    # with the live row in its place, without a ClickHouse query.
    assert out["after_change"] == [changed, 0], "a returned write is seen by the next list"
    assert out["after_change_again"] == [changed, 0]
    assert out["mid_write"] == [changed, 1] and out["mid_write_again"] == [changed, 1]
    # The writer's end names its row: the kept page is brought up to date from the read
    # model (here its row did not change: the end carried an older version).
    assert out["ended"] == [changed, 0] and out["ended_again"] == [changed, 0]
    assert out["other_run"] == [changed, 1]
    assert out["after_delete_many"] == [[["tr_1", "processing"]], 1]
    # Redis unreachable, ClickHouse answers: with the rows it holds (the row before the
    # live-only processing one).
    assert out["redis_down"] == [[["tr_1", "queued"]], 1]


def test_processing_is_kept_in_the_read_model_and_shown_at_once(
        tmp_path: Path, valkey: str, own_process: Callable[..., dict]) -> None:
    out = own_process(LIVE, str(tmp_path / "ch"), valkey, "rm3:")
    queued = [["tr_2", "queued"], ["tr_1", "queued"]]
    assert out["first"] == [queued, 1]
    row, queries, inserts, stored = out["processing"]
    assert row["status"] == "processing" and queries == 0
    assert inserts == 0, "the move to processing writes no ClickHouse row"
    assert stored["status"] == "queued"
    changed = [["tr_2", "queued"], ["tr_1", "processing"]]
    assert out["list"] == [changed, 0], "the list shows it at once, from the kept page"
    assert out["only_processing"][0] == [["tr_1", "processing"]]
    assert out["only_queued"][0] == [["tr_2", "queued"]]
    assert out["one_a_page_processing"][0] == [["tr_1", "processing"]], \
        "a filtered page is filled past rows the overlay takes out"
    assert out["in_state"] == {"queued": 1, "processing": 1}
    row, queries = out["mid_write"]
    assert row["status"] == "processing" and queries == 1
    row, stored, same_start, same_end, lives = out["completed"]
    assert row["status"] == stored["status"] == "completed" and row == stored
    assert stored["duration"] == 2.0 and same_start and same_end
    assert lives == [None, None], "the outcome's row replaced the live one"
    row, lives = out["other_run"]
    assert row["status"] == "queued" and lives == [None]
    inserts, stored = out["no_entry"]
    assert inserts == 1 and stored["status"] == "processing"


def test_list_pages_are_brought_up_to_date_from_the_rows_written_since(
        tmp_path: Path, valkey: str, own_process: Callable[..., dict]) -> None:
    """Another process writes; the kept page follows from the list stamp's notes and the
    read model's rows, and equals what ClickHouse answers; where the notes cannot say
    (a batch, too many writes, an entry gone, a row leaving a full page), it is read again."""
    from stores.redis import LIST_CHANGES
    out = own_process(CARRY, str(tmp_path / "ch"), valkey, "rm4:")
    for name, value in out.items():
        if name != "noted":
            assert value[2], (name, value, "differs from ClickHouse's page")
    assert out["first"][:2] == [[["tr_3", "queued"], ["tr_2", "queued"], ["tr_1", "queued"]], 1]
    assert out["changed"][:2] == \
        [[["tr_3", "queued"], ["tr_2", "completed"], ["tr_1", "queued"]], 0]
    assert out["added"][:2] == [[["tr_4", "queued"], ["tr_3", "queued"], ["tr_2", "completed"],
                                 ["tr_1", "queued"]], 0]
    assert out["full"][:2] == [[["tr_4", "queued"], ["tr_3", "queued"]], 1]
    assert out["below_full"][:2] == [[["tr_4", "queued"], ["tr_3", "queued"]], 0]
    assert out["above_full"][:2] == [[["tr_5", "queued"], ["tr_4", "queued"]], 0]
    assert out["only_completed"][:2] == [[["tr_2", "completed"]], 1]
    assert out["only_completed_joined"][:2] == [[["tr_3", "completed"], ["tr_2", "completed"]], 0]
    assert out["unchanged"][1] == 0
    assert out["deleted"][:2] == [[["tr_5", "queued"], ["tr_3", "completed"],
                                   ["tr_2", "completed"], ["tr_1", "error"]], 0]
    assert out["deleted_full"][:2] == [[["tr_5", "queued"], ["tr_3", "completed"]], 1], \
        "a row left a full page: the next one is not known, ClickHouse answers"
    assert out["deleted_full_again"][1] == 0
    assert out["batch"][:2] == [[["tr_5", "queued"], ["tr_3", "completed"],
                                 ["tr_2", "completed"]], 1]
    assert out["too_many"][1] == 1 and out["entry_gone"][1] == 1
    assert out["noted"] <= LIST_CHANGES, "the stamp keeps its last notes only"
