"""``/v1/transcripts``: create, list, get, cancel or delete."""

from __future__ import annotations

import re

from schemas.api import CreateTranscript, TranscriptList
from schemas.errors import InvalidRequest

from .base import BaseHandler
from .jobs import JobService

__all__ = ["TranscriptsHandler", "TranscriptHandler", "parse_list_query"]

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
        self.send(TranscriptList(data=[r.summary() for r in page], has_more=len(rows) > limit,
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
