"""``GET /v1/usage?days=N&timezone=Area/City``: daily usage of both models from ClickHouse.

Events come from ``usage_events`` (one row per event, deduplicated by ``event_id``):
``request`` (a create accepted), ``completed`` and ``failed`` (a batch job's outcome,
``completed`` with its audio seconds), ``stream`` (one finished live session with its
audio seconds). A ``stream`` event counts as one request and one completed, so both
models report the same four figures.

The window is ``days`` calendar days ending today in ``timezone``; days start at local
midnight (``toDate(at, tz)`` in ClickHouse). ``daily`` is dense: one row per date and
model, zeros included, dates ascending, the batch model first within a date.
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache

from schemas.api import (ASYNC_MODEL, MODELS, STREAMING_MODEL, Usage, UsageByKey, UsageDay,
                         UsageModelRef, UsageTotals)
from schemas.errors import InvalidRequest
from stores.context import Context

from .base import BaseHandler

__all__ = ["UsageHandler", "UsageService", "parse_usage_query", "DEFAULT_DAYS", "MAX_DAYS"]

DEFAULT_DAYS = 30
MAX_DAYS = 90
_MODEL_IDS = (ASYNC_MODEL, STREAMING_MODEL)

_DAILY = """
SELECT toString(toDate(at, {tz:String})) AS day, model,
       countIf(kind IN ('request', 'stream')) AS requests,
       countIf(kind IN ('completed', 'stream')) AS completed,
       countIf(kind = 'failed') AS failed,
       sumIf(audio_seconds, kind IN ('completed', 'stream')) AS audio_seconds
FROM {db}.usage_events FINAL
WHERE account_id = {a:String} AND toDate(at, {tz:String}) >= toDate({start:String})
  AND toDate(at, {tz:String}) <= toDate({end:String})
GROUP BY day, model
"""
_BY_KEY = """
SELECT key_id, model,
       countIf(kind IN ('request', 'stream')) AS requests,
       sumIf(audio_seconds, kind IN ('completed', 'stream')) AS audio_seconds
FROM {db}.usage_events FINAL
WHERE account_id = {a:String} AND toDate(at, {tz:String}) >= toDate({start:String})
  AND toDate(at, {tz:String}) <= toDate({end:String})
GROUP BY key_id, model
ORDER BY key_id, model
"""
_KEY_NAMES = "SELECT key_id, name FROM {db}.api_keys FINAL WHERE account_id = {a:String}"


@lru_cache(maxsize=1)
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones() - {"localtime", "Factory"}) | {"UTC"}


def parse_usage_query(days: str | None, timezone: str | None) -> tuple[int, str]:
    """``days`` 1 to 90 (default 30) and an IANA ``timezone`` (default ``UTC``)."""
    try:
        n = DEFAULT_DAYS if days is None else int(days)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_DAYS:
        raise InvalidRequest(f"days must be an integer from 1 to {MAX_DAYS}.", param="days")
    tz = "UTC" if timezone is None else timezone
    if tz not in _zones():
        raise InvalidRequest("timezone must be an IANA time zone name such as UTC or "
                             "Europe/Berlin.", param="timezone")
    return n, tz


class UsageService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def usage(self, account_id: str, days: int, tz: str,
                    today: date | None = None) -> Usage:
        today = today or datetime.now(UTC).astimezone(zoneinfo.ZoneInfo(tz)).date()
        start = today - timedelta(days=days - 1)
        params = {"a": account_id, "tz": tz, "start": start.isoformat(),
                  "end": today.isoformat()}
        found = {(r["day"], r["model"]): r for r in await self.ctx.ch.query(_DAILY, params)}
        daily, totals = [], {m: UsageTotals() for m in _MODEL_IDS}
        for offset in range(days):
            day = (start + timedelta(days=offset)).isoformat()
            for model in _MODEL_IDS:
                r = found.get((day, model), {})
                row = UsageDay(date=day, model=model, requests=int(r.get("requests", 0)),
                               completed=int(r.get("completed", 0)),
                               failed=int(r.get("failed", 0)),
                               audio_seconds=round(float(r.get("audio_seconds", 0.0)), 3))
                daily.append(row)
                t = totals[model]
                t.requests += row.requests
                t.completed += row.completed
                t.failed += row.failed
                t.audio_seconds = round(t.audio_seconds + row.audio_seconds, 3)
        names = {r["key_id"]: r["name"] for r in await self.ctx.ch.query(_KEY_NAMES, params)}
        by_key = [UsageByKey(key_id=r["key_id"], name=names.get(r["key_id"], ""),
                             model=r["model"], requests=int(r["requests"]),
                             audio_seconds=round(float(r["audio_seconds"]), 3))
                  for r in await self.ctx.ch.query(_BY_KEY, params)]
        return Usage(timezone=tz, start_date=start.isoformat(), end_date=today.isoformat(),
                     models=[UsageModelRef(id=m.id, name=m.name) for m in MODELS.data],
                     daily=daily, totals=totals, by_key=by_key)


class UsageHandler(BaseHandler):
    QUERY = {"GET": ("days", "timezone")}

    def initialize(self, ctx: Context) -> None:  # type: ignore[override]
        super().initialize(ctx)
        self.service = UsageService(ctx)

    async def get(self) -> None:
        who = await self.authenticate()
        days, tz = parse_usage_query(self.get_query_argument("days", None),
                                     self.get_query_argument("timezone", None))
        self.send(await self.service.usage(who.account.id, days, tz))
