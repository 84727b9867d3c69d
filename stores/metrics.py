"""The Prometheus metrics of one process: one ``CollectorRegistry``, held by its ``Context``.

Nothing here is module-level state: every ``Metrics`` owns its registry, so two
contexts in one test process never collide. The gateway serves the registry at
``GET /metrics`` (``gateway/metrics.py``); the pipeline, the webhook scheduler and the
realtime handler record into the same object through ``ctx.metrics``.

Names follow Prometheus conventions: ``a5s_`` prefix, base units (seconds), ``_total``
for counters. Label values are bounded sets (route patterns, stage names, states,
outcomes), never ids or raw paths.

Hooks for other components:

* ``metrics.live_sessions.inc()`` / ``.dec()`` when a realtime session opens / ends;
* ``metrics.observe_job(...)`` when a batch job's outcome is counted;
* ``metrics.webhook_deliveries.labels(outcome).inc()`` after each delivery attempt.
"""

from __future__ import annotations

import re
from datetime import datetime

from collections.abc import Iterator

from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector,
                               generate_latest)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics import exposition as openmetrics

__all__ = ["Metrics", "TEXT", "OPENMETRICS", "route_label", "negotiate"]

TEXT = CONTENT_TYPE_PLAIN_0_0_4
"""``text/plain; version=0.0.4; charset=utf-8``: the Prometheus text format."""
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_STAGE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                  900.0, 3600.0)
_RTF_BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0, 10.0)
_GROUP = re.compile(r"\((?:[^()\\]|\\.)*\)")


def negotiate(accept: str | None) -> str:
    """The exposition format for an ``Accept`` header: :data:`OPENMETRICS` or :data:`TEXT`.

    Per the Prometheus exposition rules: the acceptable media range with the highest
    ``q`` wins (the first on a tie); OpenMetrics is served for
    ``application/openmetrics-text`` (version 1.0.0 or 0.0.1, or none given), the text
    format for ``text/plain`` (version 0.0.4 or none), ``text/*`` and ``*/*``. Anything
    else, or no header, gets the text format, which every scraper reads.
    """
    best, best_q = TEXT, -1.0
    for entry in (accept or "").split(","):
        kind, *params = [p.strip() for p in entry.split(";")]
        opts = {k.strip().lower(): v.strip() for k, _, v in (p.partition("=") for p in params)}
        try:
            q = float(opts.get("q", "1"))
        except ValueError:
            continue
        version = opts.get("version")
        if kind == "application/openmetrics-text" and version in (None, "1.0.0", "0.0.1"):
            offer = OPENMETRICS
        elif (kind == "text/plain" and version in (None, "0.0.4")) or kind in ("text/*", "*/*"):
            offer = TEXT
        else:
            continue
        if q > 0 and q > best_q:
            best, best_q = offer, q
    return best


class _WithoutCreated:
    """A registry view without the ``_created`` samples: a timestamp per series that
    doubles the text exposition and that no a5s panel or rule reads."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            if family.type == "gauge" and family.name.endswith("_created"):
                continue  # the text format's separate family for a counter's creation time
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


def route_label(pattern: str) -> str:
    """``/v1/transcripts/([^/]+)/subtitles$`` -> ``/v1/transcripts/{id}/subtitles``."""
    label = _GROUP.sub("{id}", pattern.removesuffix("$"))
    return label.replace("\\.", ".")


class Metrics:
    """Every metric a5s exports, registered in this object's own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, ...
        ProcessCollector(registry=r)
        self.http_requests = Counter(
            "a5s_http_requests", "HTTP requests answered, by route pattern, method and status.",
            ["route", "method", "status"], registry=r)
        self.http_duration = Histogram(
            "a5s_http_request_duration_seconds", "Time to answer an HTTP request.",
            ["route", "method"], buckets=_LATENCY_BUCKETS, registry=r)
        self.jobs = Counter(
            "a5s_jobs", "Batch job state transitions: queued, processing, completed, error, "
            "canceled.", ["state"], registry=r)
        self.jobs_in_state = Gauge(
            "a5s_jobs_in_state", "Batch jobs waiting or running now (from ClickHouse at scrape "
            "time): queued = waiting for a slot, processing = in the stages.", ["state"],
            registry=r)
        self.stage_duration = Histogram(
            "a5s_stage_duration_seconds", "Time one pipeline stage spent on one record, retries "
            "included.", ["stage"], buckets=_STAGE_BUCKETS, registry=r)
        self.stage_failures = Counter(
            "a5s_stage_failures", "Records a stage ended as a job error (spec code or after "
            "retries).", ["stage"], registry=r)
        self.realtime_factor = Histogram(
            "a5s_realtime_factor", "Per completed job: processing wall time (started_at to "
            "completed_at) divided by audio duration.", buckets=_RTF_BUCKETS, registry=r)
        self.job_latency = Histogram(
            "a5s_job_latency_seconds", "Per finished job: created_at to completed_at (queue "
            "wait included).", buckets=_STAGE_BUCKETS, registry=r)
        self.live_sessions = Gauge(
            "a5s_live_sessions", "Realtime WebSocket sessions open on this process.",
            registry=r)
        self.live_final_lag = Gauge(
            "a5s_live_final_lag_seconds", "How long after their audio this process's live "
            "finals of the last 20 s came, p90 (0: too few finals); past five sessions a "
            "worker takes new ones only while it is at most realtime.admit_final_lag_s.",
            registry=r)
        self.live_refused = Counter(
            "a5s_live_sessions_refused", "Live sessions this process's realtime worker did not "
            "open: full, behind, or stopping.", registry=r)
        self.webhook_deliveries = Counter(
            "a5s_webhook_deliveries", "Webhook delivery attempts by outcome: delivered, "
            "retrying, rejected, gave_up, abandoned.", ["outcome"], registry=r)
        self._routes: dict[tuple[int, type], str] = {}

    def count_statements(self, clickhouse: object) -> None:
        """Export ``clickhouse``'s statement counters (its ``inserts`` and ``queries``)
        as ``a5s_clickhouse_statements_total{kind}`` and its thread's CPU time as
        ``a5s_clickhouse_cpu_seconds_total``: what a job costs the engine; and the rows its
        insert log holds as ``a5s_clickhouse_logged_rows``."""
        class Statements:
            def collect(self) -> Iterator[Metric]:
                family = CounterMetricFamily(
                    "a5s_clickhouse_statements", "ClickHouse statements this process ran: "
                    "insert (rows of concurrent callers may share one), query (queries and "
                    "commands).", labels=["kind"])
                family.add_metric(["insert"], getattr(clickhouse, "inserts", 0))
                family.add_metric(["query"], getattr(clickhouse, "queries", 0))
                yield family
                cpu = CounterMetricFamily(
                    "a5s_clickhouse_cpu_seconds", "CPU time of this process's ClickHouse "
                    "thread (driver and embedded engine; not its background merges).")
                cpu.add_metric([], getattr(clickhouse, "cpu_s", 0.0))
                yield cpu
                yield GaugeMetricFamily(
                    "a5s_clickhouse_logged_rows", "Rows in the embedded engine's insert log, "
                    "taken and not yet inserted (stores.insert_log).",
                    value=getattr(clickhouse, "logged_rows", 0))
        self.registry.register(Statements())  # type: ignore[arg-type]

    # --- recording helpers ---------------------------------------------------------------------

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        self.http_requests.labels(route, method, str(status)).inc()
        self.http_duration.labels(route, method).observe(seconds)

    def observe_job(self, status: str, created_at: datetime | None, started_at: datetime | None,
                    completed_at: datetime | None, audio_duration: float | None) -> None:
        """A job's counted outcome (once per job): its transition, latency and RTF."""
        self.jobs.labels(status).inc()
        if completed_at is None:
            return
        if created_at is not None:
            self.job_latency.observe(max(0.0, (completed_at - created_at).total_seconds()))
        if status == "completed" and started_at is not None and audio_duration:
            wall = max(0.0, (completed_at - started_at).total_seconds())
            self.realtime_factor.observe(wall / audio_duration)

    def route_of(self, app: object, handler_class: type) -> str:
        """The route pattern that serves ``handler_class`` in ``app`` (cached per class)."""
        key = (id(app), handler_class)
        found = self._routes.get(key)
        if found is None:
            found = "unmatched"
            router = getattr(app, "wildcard_router", None)
            for rule in getattr(router, "rules", ()):
                regex = getattr(rule.matcher, "regex", None)
                if rule.target is handler_class and regex is not None:
                    found = route_label(regex.pattern)
                    break
            self._routes[key] = found
        return found

    def exposition(self, content_type: str = TEXT) -> bytes:
        """The registry in ``content_type`` (:data:`TEXT` or :data:`OPENMETRICS`, see
        :func:`negotiate`), without ``_created`` samples."""
        view = _WithoutCreated(self.registry)
        if content_type == OPENMETRICS:
            return openmetrics.generate_latest(view)  # type: ignore[arg-type]
        return generate_latest(view)  # type: ignore[arg-type]
