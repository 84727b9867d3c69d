"""``/metrics``: content negotiation, no ``_created`` samples, every metric documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.asr.batching import BatchingTranscriber
from stores.metrics import OPENMETRICS, TEXT, Metrics, negotiate

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.mark.parametrize(("accept", "chosen"), [
    (None, TEXT), ("", TEXT), ("*/*", TEXT), ("application/json", TEXT),
    ("application/openmetrics-text", OPENMETRICS),
    ("application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
     "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2", OPENMETRICS),
    ("text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.1", TEXT),
    ("application/openmetrics-text;version=2.0.0", TEXT),
    ("application/openmetrics-text;q=0,text/plain", TEXT),
])
def test_negotiation(accept: str | None, chosen: str) -> None:
    assert negotiate(accept) == chosen


def test_no_created_samples_in_either_format() -> None:
    m = Metrics()
    m.jobs.labels("queued").inc()
    m.realtime_factor.observe(0.2)
    m.observe_request("/v1/transcripts", "POST", 201, 0.01)
    for kind in (TEXT, OPENMETRICS):
        body = m.exposition(kind).decode()
        assert "a5s_jobs_total" in body and "process_cpu_seconds_total" in body
        assert "_created" not in body
    assert m.exposition(OPENMETRICS).decode().endswith("# EOF\n")


class _Engine:
    """What ``count_statements`` reads of the ClickHouse facade."""
    inserts, queries, cpu_s, logged_rows = 7, 3, 0.25, 12


def test_the_engine_s_statements_and_logged_rows_are_exported() -> None:
    m = Metrics()
    m.count_statements(_Engine())
    body = m.exposition(TEXT).decode()
    assert 'a5s_clickhouse_statements_total{kind="insert"} 7.0' in body
    assert "a5s_clickhouse_logged_rows 12.0" in body


def test_every_metric_is_documented() -> None:
    m = Metrics()
    m.count_statements(_Engine())
    BatchingTranscriber(lambda: None, lambda fn, *a: None, registry=m.registry)
    documented = set(re.findall(r"`((?:a5s|process)_[a-z0-9_]+)`", DOCS.read_text()))
    exposed = {f.name + "_total" if f.type == "counter" else f.name
               for f in m.registry.collect()}
    assert {"a5s_asr_batch_size", "process_open_fds", "a5s_jobs_total"} <= exposed
    assert sorted(exposed - documented) == [], "not in docs/operations.md"
