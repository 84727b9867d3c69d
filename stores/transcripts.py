"""Transcripts in ClickHouse: the row of each job, its result, and usage events.

Rows are versioned (``schemas.rows.version_for``): a state never goes back, so a
replayed stage cannot undo a later one, and a deleted transcript stays deleted.

Given a ``RedisStore``, the current row of a live job (and its result once saved) is
also kept in Redis, written around every ClickHouse write of the row
(``RedisStore.row_begin`` before, ``row_end`` after), so the pipeline's point reads
and the client's ``GET`` cost a Redis call instead of a ClickHouse query. ClickHouse
stays the record: an entry that is missing, expired, mid-write or older than the
Redis server's restart is not used, and the read goes to ClickHouse. Entries live
``LIVE_TTL_S`` while a job waits or runs and ``DONE_TTL_S`` once it has ended.

One row version is kept in Redis only: ``processing`` (``LIVE_ONLY``), a short-lived
state between two ClickHouse rows (``queued`` and the outcome) that no guarantee rests
on: the accounts agent's ledger, not the row, says which jobs run. It answers ``get``
and overlays list pages (``_overlay``) until the outcome's row replaces it; without an
entry to keep it in (Redis restarted or unreachable) it is written to ClickHouse as
before. Lost with a Redis restart, the job shows ``queued`` until its outcome.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from schemas.errors import A5sError
from schemas.records import TranscriptResult
from schemas.rows import STATE_RANK, TranscriptRow, UsageEventRow, version_for

from .clickhouse import ClickHouse, RemoteClickHouse
from .memo import Memo
from .redis import RedisStore

__all__ = ["Transcripts", "carry_page", "LIVE_TTL_S", "DONE_TTL_S", "RESULT_CACHE_MAX",
           "LIST_REUSE_S", "LIST_ROWS_MAX"]

_COLUMNS = list(TranscriptRow.model_fields)
LIVE_TTL_S = 7 * 24 * 3600.0
"""How long the read model keeps the row of a job that waits or runs."""
DONE_TTL_S = 600.0
"""How long it keeps the row (and result) of a job that ended or was deleted: the
client's polling and a webhook's first follow-up ``GET`` happen within it, later reads go
to ClickHouse. Valkey holds the results of the jobs of this period: at the 14 jobs/s a
2-core host drains a backlog at, about 8,000 of them (an hour would be 50,000)."""
RESULT_CACHE_MAX = 256 * 1024
"""Longer results (JSON characters) are read from ClickHouse only."""
LIST_REUSE_S = 30.0
"""How long after its ClickHouse read a list page may be answered again, as kept or brought
up to date (a bound on staleness should a writer fail between its ClickHouse write and the
stamp)."""
LIST_ROWS_MAX = 10_000
"""Rows of the list pages kept per process, all pages together (the oldest go first)."""
LIVE_ROWS_MAX = 1_000
"""Read-model rows kept parsed per process for the list (the oldest go first)."""
_FINAL = ("completed", "error", "deleted")
LIVE_ONLY = frozenset({"processing"})
"""Row states kept in the read model only while it has the job's entry."""
_Stamp = tuple[str, str | None, list[str] | None]
"""An account's list stamp; an earlier one (a kept page's) and the ids of the transcripts
written since it, where all are known (``RedisStore.list_stamp``)."""
_WAITING = ("queued", "processing")


def _answer(row_json: str, result_json: str | None, account_id: str | None,
            ) -> tuple[TranscriptRow | None, TranscriptResult | None]:
    """A read-model entry as (row, or None for another account's id; result)."""
    row = TranscriptRow.model_validate_json(row_json)
    if account_id is not None and row.account_id != account_id:
        return None, None
    return row, TranscriptResult.model_validate_json(result_json) if result_json else None

class Transcripts:
    def __init__(self, ch: ClickHouse | RemoteClickHouse, redis: RedisStore | None = None,
                 ) -> None:
        self.ch = ch
        self.redis = redis
        self._pages: dict[tuple[str, int, Any, str | None],
                          tuple[str, float, tuple[TranscriptRow, ...]]] = {}
        """List pages by (account, limit, status, before): (list stamp, when, rows)."""
        self._page_rows = 0
        self._parsed_rows: Memo[str, TranscriptRow] = Memo(LIVE_ROWS_MAX)
        """Read-model rows parsed for the list (its overlay, its pages brought up to
        date), by their JSON."""

    async def _store(self, row: TranscriptRow) -> None:
        """Write a row version to ClickHouse and, around it, to the read model."""
        if self.redis is None:
            await self.ch.insert("transcripts", [row.model_dump(include=set(_COLUMNS))])
            return
        await self.redis.row_begin(row.id, LIVE_TTL_S, row.account_id)
        await self.ch.insert("transcripts", [row.model_dump(include=set(_COLUMNS))])
        ttl = DONE_TTL_S if row.deleted or row.status in _FINAL else LIVE_TTL_S
        await self.redis.row_end(row.id, row.version, row.model_dump_json(), ttl,
                                 bool(row.deleted), row.account_id)

    async def _store_live(self, row: TranscriptRow) -> None:
        """A ``LIVE_ONLY`` row version: to the read model alone where it has the job's
        entry, else the way of every other version."""
        if self.redis is not None:
            try:
                if await self.redis.row_live(row.id, row.version, row.model_dump_json(),
                                             LIVE_TTL_S):
                    return
            except A5sError:
                pass
        await self._store(row)

    async def _cached(self, transcript_id: str, account_id: str | None, *,
                      with_result: bool = False,
                      ) -> tuple[TranscriptRow | None, TranscriptResult | None] | None:
        """The read model's answer: None where ClickHouse must answer, else (the row, or
        None for another account's id, which is not found either way; the result)."""
        found = await self._entry(transcript_id, with_result=with_result)
        if found is None or found[0] is None:
            return None
        return _answer(found[0], found[1], account_id)

    async def _entry(self, transcript_id: str, *, with_result: bool = False,
                     ) -> tuple[str | None, str | None, str | None] | None:
        if self.redis is None:
            return None
        return await self.redis.row_get(transcript_id, with_result=with_result)

    async def _read(self, transcript_id: str, account_id: str | None, *,
                    with_result: bool = False,
                    ) -> tuple[TranscriptRow | None, TranscriptResult | None, bool]:
        """(row or None, cached result or None, whether the read model answered); the
        deleted are included. Where ClickHouse answers, a live row newer than its row
        (an entry mid-write) is the answer."""
        found = await self._entry(transcript_id, with_result=with_result)
        if found is not None and found[0] is not None:
            return (*_answer(found[0], found[1], account_id), True)
        stored = await self._get_stored(transcript_id, account_id, include_deleted=True)
        if found is not None and found[2] is not None and stored is not None:
            live = TranscriptRow.model_validate_json(found[2])
            if live.version > stored.version:
                stored = live
        return stored, None, False

    async def _overlay(self, rows: list[TranscriptRow]) -> list[TranscriptRow]:
        """Rows read from ClickHouse with the newer live rows of the read model in place
        (one Redis call; Redis unreachable, ClickHouse's rows)."""
        if self.redis is None:
            return rows
        behind = [i for i, r in enumerate(rows) if r.status == "queued"]
        if not behind:
            return rows
        try:
            lives = await self.redis.rows_live([rows[i].id for i in behind])
        except A5sError:
            return rows
        out = list(rows)
        for i, live_json in zip(behind, lives, strict=True):
            if live_json is not None:
                live = self._row_from_json(live_json)
                if live.version > out[i].version and live.account_id == out[i].account_id:
                    out[i] = live
        return out

    def _row_from_json(self, row_json: str) -> TranscriptRow:
        """A read-model row parsed from its JSON, kept by that JSON: a polling client's list
        calls overlay the same running jobs' rows, and bring their pages up to date with
        the same ended ones, again and again (once a gateway process's pages, each)."""
        found = self._parsed_rows.get(row_json)
        if found is None:
            found = self._parsed_rows[row_json] = TranscriptRow.model_validate_json(row_json)
        return found

    async def insert(self, row: TranscriptRow) -> None:
        row = row.model_copy(update={"version": version_for(row.status, row.created_at)})
        await self._store(row)

    async def get(self, transcript_id: str, account_id: str | None = None,
                  *, include_deleted: bool = False) -> TranscriptRow | None:
        """The current row of a transcript, or ``None``.

        Pass ``account_id`` wherever it is known: the table is ordered by
        ``(account_id, id)``, so with it the lookup reads only that key's range;
        without it, every transcript of every account is read and merged (``FINAL``).
        """
        row = (await self._read(transcript_id, account_id))[0]
        return row if row is not None and (include_deleted or not row.deleted) else None

    async def _get_stored(self, transcript_id: str, account_id: str | None = None,
                          *, include_deleted: bool = False) -> TranscriptRow | None:
        sql = "SELECT * FROM {db}.transcripts FINAL WHERE id = {id:String}"
        params: dict[str, Any] = {"id": transcript_id}
        if account_id is not None:
            sql += " AND account_id = {a:String}"
            params["a"] = account_id
        rows = await self.ch.query(sql, params)
        if not rows:
            return None
        row = TranscriptRow.model_validate(rows[0])
        return row if include_deleted or not row.deleted else None

    async def get_many(self, transcript_ids: Sequence[str]) -> dict[str, TranscriptRow]:
        """The stored rows (deleted ones included) of many transcripts, in one query."""
        if not transcript_ids:
            return {}
        rows = await self.ch.query(
            "SELECT * FROM {db}.transcripts FINAL WHERE id IN {ids:Array(String)}",
            {"ids": list(transcript_ids)})
        return {r["id"]: TranscriptRow.model_validate(r) for r in rows}

    async def list(self, account_id: str, *, limit: int, status: str | None = None,
                   before: str | None = None) -> list[TranscriptRow]:
        """A page of the account's transcripts, newest first.

        With a read model, a page read from ClickHouse while the account's list stamp was
        settled is kept and answered again while the stamp is the same: every row writer
        holds the stamp around its ClickHouse write and moves it after, so a page is reused
        only while no row of the account has changed since it was read (a client's own
        write, returned, has moved the stamp). Where the stamp has moved, each writer has
        noted its transcript, and a page kept at an earlier stamp is brought up to date
        from those transcripts' rows in the read model (:func:`carry_page`) instead of
        being read again. Pages live ``LIST_REUSE_S`` from their ClickHouse read at most;
        Redis unreachable, ClickHouse answers."""
        # A live-only state is stored in ClickHouse as the one before it: a filter on
        # either reads both, and keeps what the overlay says (pages until one is full).
        wanted, size = (_WAITING, max(limit, 100)) if status in _WAITING else (status, limit)
        stamp: _Stamp | None = None
        if self.redis is not None:
            kept = self._pages.get((account_id, size, wanted, before))
            since = kept[0] if kept else None
            try:
                found = await self.redis.list_stamp(account_id, since)
            except A5sError:
                found = None
            if found is not None:
                stamp = (found[0], since, found[1])
        out: list[TranscriptRow] = []
        while True:
            rows = await self._page(account_id, stamp, size, wanted, before)
            out += [r for r in await self._overlay(rows) if status is None or r.status == status]
            if len(out) >= limit or len(rows) < size:
                return out[:limit]
            before = rows[-1].id

    async def _page(self, account_id: str, stamp: _Stamp | None, limit: int,
                    status: str | tuple[str, ...] | None, before: str | None,
                    ) -> list[TranscriptRow]:
        """ClickHouse's page, or the one kept under the same list stamp, or the one kept
        under an earlier stamp brought up to date with the rows written since."""
        key = (account_id, limit, status, before)
        if stamp is not None:
            kept = self._pages.get(key)
            if kept is not None and time.monotonic() - kept[1] < LIST_REUSE_S:
                if kept[0] == stamp[0]:
                    return list(kept[2])
                written = stamp[2] if kept[0] == stamp[1] else None
                rows = await self._carried(account_id, kept[2], written, limit, status, before)
                if rows is not None:
                    self._keep_page(key, stamp[0], rows, kept[1])
                    return rows
        rows = await self._list_stored(account_id, limit=limit, status=status, before=before)
        if stamp is not None:
            self._keep_page(key, stamp[0], rows)
        return rows

    async def _carried(self, account_id: str, kept: Sequence[TranscriptRow],
                       written: list[str] | None, limit: int,
                       status: str | tuple[str, ...] | None, before: str | None,
                       ) -> list[TranscriptRow] | None:
        """A kept page with the transcripts ``written`` since it was read, as the read
        model holds their rows (one Redis call); None where ClickHouse must answer."""
        ids = list(dict.fromkeys(written or ()))
        if not ids or self.redis is None:
            return None
        try:
            found = [f for f in await self.redis.rows_settled(ids) if f is not None]
        except A5sError:
            return None
        rows = [self._row_from_json(f) for f in found]
        if len(rows) != len(ids) or any(r.account_id != account_id for r in rows):
            return None
        return carry_page(kept, rows, limit, status, before)

    def _keep_page(self, key: tuple[str, int, Any, str | None], stamp: str,
                   rows: list[TranscriptRow], read_at: float | None = None) -> None:
        old = self._pages.pop(key, None)
        self._page_rows += len(rows) - (len(old[2]) if old else 0)
        self._pages[key] = (stamp, time.monotonic() if read_at is None else read_at,
                            tuple(rows))
        while self._page_rows > LIST_ROWS_MAX:
            self._page_rows -= len(self._pages.pop(next(iter(self._pages)))[2])

    async def _list_stored(self, account_id: str, *, limit: int,
                           status: str | tuple[str, ...] | None = None,
                           before: str | None = None) -> list[TranscriptRow]:
        sql = ("SELECT * FROM {db}.transcripts FINAL WHERE account_id = {a:String} "
               "AND deleted = 0")
        params: dict[str, Any] = {"a": account_id, "n": limit}
        if isinstance(status, tuple):
            sql += " AND status IN {s:Array(String)}"
            params["s"] = list(status)
        elif status:
            sql += " AND status = {s:String}"
            params["s"] = status
        if before:
            sql += " AND id < {b:String}"
            params["b"] = before
        sql += " ORDER BY id DESC LIMIT {n:UInt32}"
        return [TranscriptRow.model_validate(r) for r in await self.ch.query(sql, params)]

    async def change(self, transcript_id: str, status: str, at: datetime | None = None,
                     *, account_id: str | None = None, known: TranscriptRow | None = None,
                     **fields: Any) -> TranscriptRow | None:
        """Move a transcript to ``status`` (merging ``fields``); a no-op if it is already later.

        ``account_id``: the owner, when known (see :meth:`get`); a transcript of
        another account is not found, so not changed. ``known``: the row as the
        caller has just read it, which saves reading it again.
        """
        at = at or datetime.now(UTC)
        row = known if known is not None and known.id == transcript_id else await self.get(
            transcript_id, account_id, include_deleted=True)
        if row is None or row.deleted:
            return None
        current = STATE_RANK.get(row.status, 0)
        if STATE_RANK[status] < current:
            return row
        if STATE_RANK[status] == current and status != row.status:
            return row  # completed and error are both final: the first one stands
        update = dict(fields, status=status)
        if status == "processing":
            update.setdefault("started_at", row.started_at or at)
        if status in ("completed", "error"):
            update.setdefault("completed_at", row.completed_at or at)
            update.setdefault("started_at", row.started_at or at)
        if status == "deleted":
            update |= _EMPTIED
        new = row.model_copy(update=update)
        new.version = _next_version(row, status, at)
        await (self._store_live(new) if status in LIVE_ONLY else self._store(new))
        if status == "deleted":
            await self.purge_versions(row.account_id, row.id)
        return new

    async def purge_versions(self, account_id: str, transcript_id: str) -> None:
        """Drop a deleted transcript's earlier row versions, which still hold its metadata,
        audio_url and webhook_url until a merge; only the emptied tombstone stays."""
        await self.ch.command(
            "DELETE FROM {db}.transcripts WHERE account_id = {a:String} AND id = {id:String} "
            "AND deleted = 0", {"a": account_id, "id": transcript_id})

    async def expired(self, now: datetime, limit: int = 500) -> list[TranscriptRow]:
        """Finished transcripts past their account's ``retention_days``, oldest first."""
        rows = await self.ch.query(
            "SELECT t.* FROM {db}.transcripts AS t FINAL INNER JOIN "
            "(SELECT id, retention_days FROM {db}.accounts FINAL) AS a ON t.account_id = a.id "
            "WHERE t.deleted = 0 AND t.status IN ('completed', 'error') "
            "AND t.completed_at IS NOT NULL "
            "AND t.completed_at + toIntervalDay(a.retention_days) <= {now:DateTime64(3, 'UTC')} "
            "ORDER BY t.completed_at LIMIT {n:UInt32}", {"now": now, "n": limit})
        return [TranscriptRow.model_validate(r) for r in rows]

    async def waiting(self, created_before: datetime, limit: int = 500) -> list[TranscriptRow]:
        """Transcripts still ``queued`` or ``processing`` that were created before
        ``created_before``, oldest first (for the pipeline's check that every accepted job
        is known to the accounts agent)."""
        rows = await self.ch.query(
            "SELECT * FROM {db}.transcripts FINAL WHERE deleted = 0 "
            "AND status IN ('queued', 'processing') "
            "AND created_at < {t:DateTime64(3, 'UTC')} ORDER BY created_at LIMIT {n:UInt32}",
            {"t": created_before, "n": limit})
        return [TranscriptRow.model_validate(r) for r in rows]

    async def in_state(self) -> dict[str, int]:
        """How many jobs wait (``queued``) and run (``processing``), all accounts: the
        waiting rows of ClickHouse, a ``queued`` one counted as running where the read
        model holds its live row (only ids travel: a backlog may be thousands)."""
        rows = await self.ch.query(
            "SELECT id, status FROM {db}.transcripts FINAL WHERE deleted = 0 "
            "AND status IN ('queued', 'processing')")
        counts = dict.fromkeys(_WAITING, 0)
        queued = [r["id"] for r in rows if r["status"] == "queued"]
        counts["processing"] = len(rows) - len(queued)
        running = 0
        if self.redis is not None and queued:
            with contextlib.suppress(A5sError):
                running = sum(live is not None for live in await self.redis.rows_live(queued))
        counts["queued"] = len(queued) - running
        counts["processing"] += running
        return counts

    async def unpurged(self, limit: int = 500) -> list[tuple[str, str]]:
        """(account_id, id) of deleted transcripts whose earlier versions are still stored."""
        rows = await self.ch.query(
            "SELECT account_id, id FROM {db}.transcripts GROUP BY account_id, id "
            "HAVING max(deleted) = 1 AND min(deleted) = 0 LIMIT {n:UInt32}", {"n": limit})
        return [(r["account_id"], r["id"]) for r in rows]

    async def set_webhook_status(self, transcript_id: str, code: int,
                                 account_id: str | None = None) -> None:
        row = await self.get(transcript_id, account_id)
        if row is None:
            return
        new = row.model_copy(update={"webhook_status_code": code, "version": row.version + 1})
        await self._store(new)

    async def save_result(self, row: TranscriptRow, result: TranscriptResult) -> None:
        raw = result.model_dump_json()
        await self.ch.insert("transcript_results", [{
            "id": row.id, "account_id": row.account_id,
            "completed_at": row.completed_at or datetime.now(UTC), "text": result.text,
            "result": raw, "deleted": 0, "version": 1}])
        if self.redis is not None and len(raw) <= RESULT_CACHE_MAX:
            await self.redis.row_result(row.id, raw)

    async def get_with_result(self, transcript_id: str, account_id: str,
                              ) -> tuple[TranscriptRow, TranscriptResult | None] | None:
        """The current row (not deleted) and, once completed, its result: one Redis call
        for a live job, else two ClickHouse reads."""
        row, result, _ = await self._read(transcript_id, account_id, with_result=True)
        if row is None or row.deleted:
            return None
        if row.status != "completed":
            return row, None
        if result is not None:
            return row, result
        return row, await self._stored_result(row.id, account_id)

    async def result(self, transcript_id: str, account_id: str) -> TranscriptResult | None:
        cached = await self._cached(transcript_id, account_id, with_result=True)
        if cached is not None:
            row, result = cached
            if row is None or row.deleted:
                return None
            if result is not None:
                return result
        return await self._stored_result(transcript_id, account_id)

    async def _stored_result(self, transcript_id: str,
                             account_id: str) -> TranscriptResult | None:
        rows = await self.ch.query(
            "SELECT result, deleted FROM {db}.transcript_results FINAL WHERE account_id = "
            "{a:String} AND id = {id:String}", {"a": account_id, "id": transcript_id})
        if not rows or rows[0]["deleted"]:
            return None
        return TranscriptResult.model_validate_json(rows[0]["result"])

    async def delete(self, row: TranscriptRow) -> None:
        """Remove every stored detail: metadata, URLs, webhook target and the result."""
        await self.change(row.id, "deleted", account_id=row.account_id)
        await self.ch.insert("transcript_results", [_result_tombstone(row)])
        await self.ch.command(
            "DELETE FROM {db}.transcript_results WHERE account_id = {a:String} AND id = "
            "{id:String}", {"a": row.account_id, "id": row.id})

    async def delete_many(self, rows: Sequence[TranscriptRow],
                          at: datetime | None = None) -> None:
        """:meth:`delete` for many finished transcripts in four statements, whatever
        their number: one insert of tombstones per table, then one ``DELETE`` per table
        of every earlier version (a lightweight delete in ClickHouse is a mutation that
        rewrites a part's mask: its cost is per statement far more than per row).

        The read model's entries are dropped before anything is written (readers go
        to ClickHouse, which answers with the old row until the tombstone lands) and
        again after (a writer that ran in between)."""
        if not rows:
            return
        at = at or datetime.now(UTC)
        ids = [r.id for r in rows]
        accounts = sorted({r.account_id for r in rows})
        if self.redis is not None:
            await self.redis.row_forget(ids)
            await self.redis.lists_begin(accounts)
        tombstones = [_tombstone(r, at) for r in rows]
        await self.ch.insert("transcripts",
                             [t.model_dump(include=set(_COLUMNS)) for t in tombstones])
        await self.ch.insert("transcript_results", [_result_tombstone(r) for r in rows])
        pairs = [(r.account_id, r.id) for r in rows]
        await self.ch.command(
            "DELETE FROM {db}.transcripts WHERE (account_id, id) IN "
            "{p:Array(Tuple(String, String))} AND deleted = 0", {"p": pairs})
        await self.ch.command(
            "DELETE FROM {db}.transcript_results WHERE (account_id, id) IN "
            "{p:Array(Tuple(String, String))}", {"p": pairs})
        if self.redis is not None:
            await self.redis.row_forget(ids)
            await self.redis.lists_end(accounts)

    async def record_usage(self, event: UsageEventRow) -> None:
        await self.ch.insert("usage_events", [event.model_dump()])

    @staticmethod
    def metadata_json(metadata: dict[str, Any]) -> str:
        return json.dumps(metadata, separators=(",", ":"))


_EMPTIED = {"deleted": 1, "metadata": "{}", "audio_url": None, "webhook_url": None}
"""What a deleted transcript's row keeps none of."""


def carry_page(kept: Sequence[TranscriptRow], written: Sequence[TranscriptRow], limit: int,
               status: str | tuple[str, ...] | None, before: str | None,
               ) -> list[TranscriptRow] | None:
    """The page ClickHouse would now answer, from the page it answered before (``kept``,
    at most ``limit`` rows, newest id first, below ``before``) and the current rows of
    every transcript written since: each replaces an older version of itself, a new one
    takes its place by id, and one that no longer belongs leaves. None where that cannot
    be told: a row left a full page, whose next row is not known."""
    wanted = (status,) if isinstance(status, str) else status

    def shown(row: TranscriptRow) -> bool:
        return not row.deleted and (wanted is None or row.status in wanted)

    rows = {r.id: r for r in kept}
    full = len(kept) >= limit
    for new in written:
        old = rows.get(new.id)
        if old is not None:
            if new.version <= old.version:
                continue
            if shown(new):
                rows[new.id] = new
            elif full:
                return None
            else:
                del rows[new.id]
        elif shown(new) and (before is None or new.id < before) and \
                (not full or new.id > kept[-1].id):
            rows[new.id] = new
    return sorted(rows.values(), key=lambda r: r.id, reverse=True)[:limit]


def _tombstone(row: TranscriptRow, at: datetime) -> TranscriptRow:
    new = row.model_copy(update=_EMPTIED | {"status": "deleted"})
    new.version = _next_version(row, "deleted", at)
    return new


def _next_version(row: TranscriptRow, status: str, at: datetime) -> int:
    """Later than the row's own version, and ranked by state (a replay never undoes)."""
    return max(version_for(status, at), row.version + 1)


def _result_tombstone(row: TranscriptRow) -> dict[str, Any]:
    return {"id": row.id, "account_id": row.account_id, "completed_at": datetime.now(UTC),
            "text": "", "result": "{}", "deleted": 1, "version": 2}
