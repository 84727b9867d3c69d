"""The ops dashboard: ``/ops`` on the console listener (loopback), charts for operators.

The page and its script are static (``gateway/static/ops.*``, no third-party code);
they hold no data. The figures come from ``GET /ops/v1/data`` with the console token
(``Authorization: Bearer``), which the page asks for once and keeps in the tab's
``sessionStorage``: from ClickHouse (usage, jobs, failures, latency and real-time
factor over time) and from this process's Prometheus registry, the same one
``/metrics`` serves (live sessions, webhook deliveries, process CPU and memory).
The page polls every 10 s and keeps the registry's figures as a short history.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field, field_validator

from schemas.errors import InvalidRequest

from .console import ConsoleHandler
from .playground import PlaygroundPage, StaticAsset

__all__ = ["ops_routes", "OpsData", "AudioDay", "Count", "LatencyBucket", "bucket_seconds",
           "registry_figures", "SQL"]

BUCKETS_S = (60, 300, 900, 3600, 6 * 3600, 86400)
MAX_POINTS = 60

SQL = {
    "audio_by_model": """
        SELECT toDate(at) AS day, model AS key, round(sum(audio_seconds), 3) AS seconds
        FROM {db}.usage_events FINAL
        WHERE at >= {since_day:DateTime64(3)} AND kind IN ('completed', 'stream')
        GROUP BY day, key ORDER BY day, key""",
    "audio_by_account": """
        SELECT toDate(at) AS day, account_id AS key, round(sum(audio_seconds), 3) AS seconds
        FROM {db}.usage_events FINAL
        WHERE at >= {since_day:DateTime64(3)} AND kind IN ('completed', 'stream')
        GROUP BY day, key ORDER BY day, key""",
    "jobs_by_status": """
        SELECT status AS key, count() AS jobs FROM {db}.transcripts FINAL
        WHERE deleted = 0 AND created_at >= {since:DateTime64(3)}
        GROUP BY key ORDER BY jobs DESC, key""",
    "failures_by_code": """
        SELECT ifNull(error_code, 'internal_error') AS key, count() AS jobs
        FROM {db}.transcripts FINAL
        WHERE deleted = 0 AND status = 'error' AND completed_at >= {since:DateTime64(3)}
        GROUP BY key ORDER BY jobs DESC, key""",
    "latency": """
        SELECT toStartOfInterval(assumeNotNull(completed_at), INTERVAL {bucket:UInt32} SECOND)
                   AS t,
               count() AS jobs,
               round(quantileExact(0.5)(queue_wait), 3) AS queue_p50,
               round(quantileExact(0.95)(queue_wait), 3) AS queue_p95,
               round(quantileExact(0.5)(processing), 3) AS processing_p50,
               round(quantileExact(0.95)(processing), 3) AS processing_p95,
               round(quantileExact(0.5)(rtf), 3) AS rtf_p50,
               round(quantileExact(0.95)(rtf), 3) AS rtf_p95
        FROM (
            SELECT completed_at,
                   dateDiff('millisecond', created_at, assumeNotNull(started_at)) / 1000
                       AS queue_wait,
                   dateDiff('millisecond', assumeNotNull(started_at),
                            assumeNotNull(completed_at)) / 1000 AS processing,
                   processing / greatest(ifNull(audio_duration, 0), 0.001) AS rtf
            FROM {db}.transcripts FINAL
            WHERE deleted = 0 AND status = 'completed' AND started_at IS NOT NULL
              AND completed_at >= {since:DateTime64(3)})
        GROUP BY t ORDER BY t""",
}
"""The dashboard's ClickHouse queries (``{db}``: the database; the window as parameters)."""

_PROCESS = {"process_cpu_seconds_total": "cpu_seconds",
            "process_resident_memory_bytes": "resident_bytes",
            "process_open_fds": "open_fds", "process_max_fds": "max_fds",
            "process_start_time_seconds": "start_time"}


def bucket_seconds(hours: float) -> int:
    """The smallest bucket from :data:`BUCKETS_S` that draws ``hours`` in 60 points or fewer."""
    for bucket in BUCKETS_S:
        if hours * 3600 / bucket <= MAX_POINTS:
            return bucket
    return BUCKETS_S[-1]


def registry_figures(registry: Any) -> dict[str, Any]:
    """What the page draws from the Prometheus registry (the figures ``/metrics`` serves)."""
    out: dict[str, Any] = {"live_sessions": 0.0, "webhook_deliveries": {}, "process": {},
                           "realtime_factor": {"count": 0.0, "sum": 0.0}}
    for family in registry.collect():
        for s in family.samples:
            if s.name == "a5s_live_sessions":
                out["live_sessions"] = s.value
            elif s.name == "a5s_webhook_deliveries_total":
                out["webhook_deliveries"][s.labels.get("outcome", "")] = s.value
            elif s.name in _PROCESS:
                out["process"][_PROCESS[s.name]] = s.value
            elif s.name == "a5s_realtime_factor_count":
                out["realtime_factor"]["count"] = s.value
            elif s.name == "a5s_realtime_factor_sum":
                out["realtime_factor"]["sum"] = s.value
    return out


class AudioDay(BaseModel):
    day: date
    key: str
    """The model or the account."""
    seconds: float


class Count(BaseModel):
    key: str
    """The status or the error code."""
    jobs: int


class LatencyBucket(BaseModel):
    """Completed jobs of one time bucket: queue wait and processing in seconds, and the
    real-time factor (processing / audio duration)."""

    t: datetime
    jobs: int
    queue_p50: float
    queue_p95: float
    processing_p50: float
    processing_p95: float
    rtf_p50: float
    rtf_p95: float

    @field_validator("t")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        """ClickHouse's times are UTC; a browser reads a time without a zone as local."""
        return value if value.tzinfo else value.replace(tzinfo=UTC)


class OpsData(BaseModel):
    """``GET /ops/v1/data``: every chart's figures for one window."""

    now: datetime
    days: int
    hours: float
    bucket_s: int
    audio_by_model: list[AudioDay] = Field(default_factory=list)
    audio_by_account: list[AudioDay] = Field(default_factory=list)
    jobs_by_status: list[Count] = Field(default_factory=list)
    failures_by_code: list[Count] = Field(default_factory=list)
    latency: list[LatencyBucket] = Field(default_factory=list)
    registry: dict[str, Any] = Field(default_factory=dict)
    """From the Prometheus registry (:func:`registry_figures`)."""


class OpsDataHandler(ConsoleHandler):
    QUERY = {"GET": ("days", "hours")}

    async def get(self) -> None:
        days = self._number("days", 14, 1, 366)
        hours = self._number("hours", 24, 0.25, 24 * 92)
        now = datetime.now(UTC)
        bucket = bucket_seconds(hours)
        params = {"since": now - timedelta(hours=hours),
                  "since_day": datetime.combine((now - timedelta(days=days - 1)).date(),
                                                datetime.min.time(), UTC),
                  "bucket": bucket}
        rows = {name: await self.ctx.ch.query(sql, params) for name, sql in SQL.items()}
        self.send(OpsData.model_validate({
            "now": now, "days": int(days), "hours": hours, "bucket_s": bucket,
            "registry": registry_figures(self.ctx.metrics.registry), **rows}))

    def _number(self, name: str, default: float, low: float, high: float) -> float:
        raw = self.get_query_argument(name, None)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not low <= value <= high:
            raise InvalidRequest(f"{name} must be a number from {low:g} to {high:g}.",
                                 param=name)
        return value


def ops_routes(ctx: Any, token: str) -> list[tuple[str, type, dict[str, Any]]]:
    from .playground import FAVICON_ROUTE, STATIC_DIR
    return [
        (r"/ops", PlaygroundPage, {"page": "ops.html"}),
        FAVICON_ROUTE,
        (r"/ops/static/(.*)", StaticAsset, {"path": str(STATIC_DIR)}),
        (r"/ops/v1/data", OpsDataHandler, {"ctx": ctx, "token": token}),
    ]
