"""Builds ``ops/dashboards/a5s.json`` (Grafana) from ``ops/queries`` and the metrics.

Two rows of panels. ClickHouse (grafana-clickhouse-datasource): the saved queries are
the single source; each panel's SQL is a query file with its placeholders turned into
the data source's macros (``{db}`` -> ``${database}``, ``{from:DateTime64(3)}`` ->
``$__fromTime``, ``{to:...}`` -> ``$__toTime``). Prometheus: the service's ``/metrics``
(request rate and latency, jobs, stage timings, real-time factor, live sessions,
webhook deliveries, ASR batch size, process CPU, memory and open files). Run
``python -m ops.dashboards.build`` after editing a query; a unit test checks that the
committed JSON is current.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = ["dashboard", "grafana_sql", "QUERIES_DIR", "OUTPUT"]

HERE = Path(__file__).resolve().parent
QUERIES_DIR = HERE.parent / "queries"
OUTPUT = HERE / "a5s.json"
DATASOURCE = {"type": "grafana-clickhouse-datasource", "uid": "${datasource}"}
PROMETHEUS = {"type": "prometheus", "uid": "${prometheus}"}
TABLE, TIME_SERIES = 1, 0  # the data source's result formats

# (query file, title, panel type, format, grid height, description)
PANELS = [
    ("daily_usage", "Daily usage by account, key and model", "table", TABLE, 9,
     "Requests, completed and failed jobs and audio seconds counted toward usage, per UTC day."),
    ("failure_rates", "Outcomes and failure rates by error code", "table", TABLE, 8,
     "Finished batch jobs per day by outcome (completed or job error code) with their share."),
    ("latency_percentiles", "Latency percentiles (s) and real-time factor", "table", TABLE, 8,
     "Queue wait, processing and total latency of completed jobs; rtf = processing / audio."),
    ("queue_wait", "Queue wait per hour (s)", "timeseries", TIME_SERIES, 8,
     "How long jobs waited for a processing slot, by hour of creation."),
]


# (title, unit, [(legend, PromQL)], description)
PROM_PANELS = [
    ("HTTP requests per second by status", "reqps",
     [("{{status}}", "sum by (status) (rate(a5s_http_requests_total[$__rate_interval]))")],
     "Every REST answer, by status code."),
    ("HTTP latency p95 by route (s)", "s",
     [("{{route}}", "histogram_quantile(0.95, sum by (le, route) "
       "(rate(a5s_http_request_duration_seconds_bucket[$__rate_interval])))")],
     "Time to answer, 95th percentile, per route pattern."),
    ("Jobs waiting and running", "short",
     [("{{state}}", "sum by (state) (a5s_jobs_in_state)")],
     "queued = waiting for one of the account's slots; processing = in the stages."),
    ("Job outcomes per minute", "short",
     [("{{state}}", "sum by (state) (rate(a5s_jobs_total{state=~\"completed|error|canceled\"}"
       "[$__rate_interval])) * 60")],
     "Finished jobs per minute by outcome."),
    ("Stage time p95 (s)", "s",
     [("{{stage}}", "histogram_quantile(0.95, sum by (le, stage) "
       "(rate(a5s_stage_duration_seconds_bucket[$__rate_interval])))")],
     "Time one pipeline stage spends on one record, 95th percentile."),
    ("Real-time factor p50 / p95", "short",
     [("p50", "histogram_quantile(0.5, sum by (le) "
       "(rate(a5s_realtime_factor_bucket[$__rate_interval])))"),
      ("p95", "histogram_quantile(0.95, sum by (le) "
       "(rate(a5s_realtime_factor_bucket[$__rate_interval])))")],
     "Processing wall time / audio duration of completed jobs (below 1 is faster than "
     "real time)."),
    ("Live sessions", "short", [("{{instance}}", "a5s_live_sessions")],
     "Realtime WebSocket sessions open, per process."),
    ("Live finals' lag p90 (s) and refusals", "short",
     [("lag {{instance}}", "a5s_live_final_lag_seconds"),
      ("refused per minute {{instance}}",
       "rate(a5s_live_sessions_refused_total[$__rate_interval]) * 60")],
     "How long after their audio a worker's live finals came (p90 of the last 20 s), and "
     "the new sessions it did not open: full, or behind (past five sessions it takes more "
     "only while the lag is under realtime.admit_final_lag_s)."),
    ("Webhook deliveries per minute by outcome", "short",
     [("{{outcome}}", "sum by (outcome) "
       "(rate(a5s_webhook_deliveries_total[$__rate_interval])) * 60")],
     "Delivery attempts: delivered, retrying, rejected, gave_up, abandoned."),
    ("ASR batch size (mean chunks per call)", "short",
     [("mean", "sum(rate(a5s_asr_batch_size_sum[$__rate_interval])) / "
       "sum(rate(a5s_asr_batch_size_count[$__rate_interval]))")],
     "How full the batched ASR calls are (1 on CPU, where decodes run in parallel)."),
    ("Process CPU (cores)", "short",
     [("{{instance}}", "rate(process_cpu_seconds_total{job=~\"$job\"}[$__rate_interval])")],
     "CPU seconds per second of each a5s process."),
    ("Process resident memory", "bytes",
     [("{{instance}}", "process_resident_memory_bytes{job=~\"$job\"}")],
     "Resident set size of each a5s process (models and the embedded ClickHouse included)."),
    ("Open file descriptors", "short",
     [("{{instance}} open", "process_open_fds{job=~\"$job\"}"),
      ("{{instance}} limit", "process_max_fds{job=~\"$job\"}")],
     "Open files and sockets against the process limit."),
]


def grafana_sql(sql: str) -> str:
    """A saved query with the data source's macros in place of our placeholders."""
    body = "\n".join(line for line in sql.splitlines() if not line.startswith("--")).strip()
    body = body.replace("{db}", "${database}")
    body = re.sub(r"\{from:[^}]+\}", "$__fromTime", body)
    return re.sub(r"\{to:[^}]+\}", "$__toTime", body)


def _panel(n: int, name: str, title: str, kind: str, fmt: int, height: int,
           description: str, y: int) -> dict[str, Any]:
    sql = grafana_sql((QUERIES_DIR / f"{name}.sql").read_text())
    return {
        "id": n + 1, "type": kind, "title": title, "description": description,
        "datasource": DATASOURCE, "gridPos": {"h": height, "w": 24, "x": 0, "y": y},
        "targets": [{"refId": "A", "datasource": DATASOURCE, "editorType": "sql",
                     "format": fmt, "queryType": "table" if fmt == TABLE else "timeseries",
                     "rawSql": sql}],
        "options": {}, "fieldConfig": {"defaults": {}, "overrides": []},
    }


def _prom_panel(n: int, title: str, unit: str, exprs: list[tuple[str, str]],
                description: str, x: int, y: int) -> dict[str, Any]:
    return {
        "id": n, "type": "timeseries", "title": title, "description": description,
        "datasource": PROMETHEUS, "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "targets": [{"refId": chr(ord("A") + i), "datasource": PROMETHEUS, "expr": expr,
                     "legendFormat": legend} for i, (legend, expr) in enumerate(exprs)],
        "options": {}, "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
    }


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = [{"id": 100, "type": "row", "title": "ClickHouse",
                                     "collapsed": False,
                                     "gridPos": {"h": 1, "w": 24, "x": 0, "y": 0}}]
    y = 1
    for n, (name, title, kind, fmt, height, description) in enumerate(PANELS):
        panels.append(_panel(n, name, title, kind, fmt, height, description, y))
        y += height
    panels.append({"id": 200, "type": "row", "title": "Prometheus (/metrics)",
                   "collapsed": False, "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
    y += 1
    for n, (title, unit, exprs, description) in enumerate(PROM_PANELS):
        panels.append(_prom_panel(201 + n, title, unit, exprs, description, 12 * (n % 2),
                                  y + 8 * (n // 2)))
    return {
        "uid": "a5s-ops", "title": "a5s operations", "tags": ["a5s", "clickhouse", "prometheus"],
        "timezone": "utc", "schemaVersion": 39, "version": 1, "editable": True,
        "time": {"from": "now-7d", "to": "now"}, "refresh": "5m",
        "templating": {"list": [
            {"name": "datasource", "label": "ClickHouse", "type": "datasource",
             "query": "grafana-clickhouse-datasource", "current": {}},
            {"name": "database", "label": "Database", "type": "textbox", "query": "a5s",
             "current": {"text": "a5s", "value": "a5s"}},
            {"name": "prometheus", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "current": {}},
            {"name": "job", "label": "Scrape job", "type": "textbox", "query": ".*",
             "current": {"text": ".*", "value": ".*"}},
        ]},
        "panels": panels,
    }


if __name__ == "__main__":
    OUTPUT.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {OUTPUT}")
