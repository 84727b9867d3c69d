"""``/v1/transcripts``: create, list, get, cancel or delete."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from pydantic import TypeAdapter

from schemas.api import CreateTranscript, TranscriptSummary
from schemas.errors import InvalidRequest
from schemas.rows import TranscriptRow
from stores.context import Context
from stores.memo import Memo

from .base import BaseHandler
from .jobs import JobService

__all__ = ["TranscriptsHandler", "TranscriptHandler", "parse_list_query", "ListJson",
           "list_json"]

_CURSOR = re.compile(r"^tr_[0-9a-z]{26}$")
_STATUSES = ("queued", "processing", "completed", "error")


def parse_list_query(limit: str | None, status: str | None,
                     before: str | None) -> tuple[int, str | None, str | None]:
    try:
        n = 20 if limit is None else int(limit)
    except ValueError:
        n = 0
    if not 1 <= n <= 100:
        raise InvalidRequest("limit must be an integer from 1 to 100.", param="limit")
    if status is not None and status not in _STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(_STATUSES)}.", param="status")
    if before is not None and not _CURSOR.match(before):
        raise InvalidRequest("before must be a next_before value from a previous page.",
                             param="before")
    return n, status, before


_SUMMARY = TypeAdapter(TranscriptSummary)


class ListJson:
    """The body of a list page (``TranscriptList``'s JSON), each row's summary serialised
    once per row version and reused.

    A polling client asks for the same rows every second; building and serialising their
    summaries was most of a list call's CPU. A row's summary depends only on the row, and
    every write of a row gives it a new version, so a summary is kept by the row's id and
    version (and, belt and braces, the fields a write changes). Per process, ``MAX_ROWS``
    summaries at most, the oldest dropped first."""

    MAX_ROWS = 10_000

    def __init__(self, most: int = MAX_ROWS) -> None:
        self._rows: Memo[tuple[object, ...], bytes] = Memo(most)

    def summary(self, row: TranscriptRow) -> bytes:
        key = (row.id, row.version, row.status, row.deleted, row.webhook_status_code,
               row.error_code)
        found = self._rows.get(key)
        if found is None:
            found = self._rows[key] = _SUMMARY.dump_json(row.summary(), by_alias=True)
        return found

    def page(self, rows: Sequence[TranscriptRow], *, has_more: bool,
             next_before: str | None) -> bytes:
        """What ``TranscriptList(...).model_dump_json(by_alias=True)`` gives, byte for byte."""
        return b"".join((b'{"object":"list","data":[',
                         b",".join(self.summary(r) for r in rows),
                         b'],"has_more":', b"true" if has_more else b"false",
                         b',"next_before":', json.dumps(next_before).encode(), b"}"))


def list_json(ctx: Context) -> ListJson:
    """The process's list serialiser (kept with the context, as ``admission`` is)."""
    found = ctx.extras.get("list_json")
    if not isinstance(found, ListJson):
        found = ctx.extras["list_json"] = ListJson()
    return found


class TranscriptsHandler(BaseHandler):
    QUERY = {"GET": ("limit", "status", "before"), "POST": ()}

    def initialize(self, ctx, jobs: JobService) -> None:  # type: ignore[override]
        super().initialize(ctx)
        self.jobs = jobs

    async def post(self) -> None:
        who = await self.authenticate()
        key = self.request.headers.get("Idempotency-Key")
        transcript, created = await self.jobs.create(who, self.request.body, key,
                                                     CreateTranscript)
        if created:
            self.set_header("Location", f"{self.ctx.settings.base_url}/v1/transcripts/"
                                        f"{transcript.id}")
        self.send(transcript, 201 if created else 200)

    async def get(self) -> None:
        who = await self.authenticate()
        limit, status, before = parse_list_query(self.get_query_argument("limit", None),
                                                 self.get_query_argument("status", None),
                                                 self.get_query_argument("before", None))
        rows = await self.jobs.transcripts.list(who.account.id, limit=limit + 1, status=status,
                                                before=before)
        page = rows[:limit]
        self.set_status(200)
        self.finish(list_json(self.ctx).page(page, has_more=len(rows) > limit,
                                             next_before=page[-1].id if page else None))


class TranscriptHandler(BaseHandler):
    QUERY = {"GET": (), "DELETE": ()}

    def initialize(self, ctx, jobs: JobService) -> None:  # type: ignore[override]
        super().initialize(ctx)
        self.jobs = jobs

    async def get(self, transcript_id: str) -> None:
        who = await self.authenticate()
        self.send(await self.jobs.get(who.account.id, transcript_id))

    async def delete(self, transcript_id: str) -> None:
        who = await self.authenticate()
        self.send(await self.jobs.delete(who, transcript_id))
