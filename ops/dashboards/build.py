"""Builds ``ops/dashboards/a5s.json`` (Grafana, ClickHouse data source) from ``ops/queries``.

The saved queries are the single source: each panel's SQL is a query file with its
placeholders turned into the grafana-clickhouse-datasource macros (``{db}`` ->
``${database}``, ``{from:DateTime64(3)}`` -> ``$__fromTime``, ``{to:...}`` ->
``$__toTime``). Run ``python -m ops.dashboards.build`` after editing a query; a unit test
checks that the committed JSON is current.
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


def dashboard() -> dict[str, Any]:
    panels, y = [], 0
    for n, (name, title, kind, fmt, height, description) in enumerate(PANELS):
        panels.append(_panel(n, name, title, kind, fmt, height, description, y))
        y += height
    return {
        "uid": "a5s-ops", "title": "a5s operations", "tags": ["a5s", "clickhouse"],
        "timezone": "utc", "schemaVersion": 39, "version": 1, "editable": True,
        "time": {"from": "now-7d", "to": "now"}, "refresh": "5m",
        "templating": {"list": [
            {"name": "datasource", "label": "ClickHouse", "type": "datasource",
             "query": "grafana-clickhouse-datasource", "current": {}},
            {"name": "database", "label": "Database", "type": "textbox", "query": "a5s",
             "current": {"text": "a5s", "value": "a5s"}},
        ]},
        "panels": panels,
    }


if __name__ == "__main__":
    OUTPUT.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {OUTPUT}")
