"""Every saved ops query runs against the embedded ClickHouse engine with a few rows.

chdb allows one engine per process, so the queries run in a child process on a scratch
directory: the schema comes from the real migrations (``ClickHouse.start()``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ops.dashboards.build import QUERIES_DIR, dashboard, grafana_sql

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "ops" / "dashboards" / "a5s.json"

SCRIPT = r'''
import asyncio, json, sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from stores.clickhouse import ClickHouse

async def main(path, queries):
    ch = ClickHouse(f"chdb://{path}", "ops_test")
    await ch.start()
    t0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    s = lambda x: t0 + timedelta(seconds=x)
    def tr(i, status, created, started, completed, duration=None, code=None, deleted=0):
        return {"id": f"tr_{i}", "account_id": "acc_a" if i < 5 else "acc_b", "key_id": "key_1",
                "created_at": s(created), "status": status,
                "started_at": s(started) if started is not None else None,
                "completed_at": s(completed) if completed is not None else None,
                "audio_url": None, "file_id": None, "language_code": "en",
                "model": "a5s-async-v1", "audio_duration": duration, "metadata": "{}",
                "webhook_url": None, "webhook_status_code": None, "error_code": code,
                "error_message": None, "deleted": deleted, "version": 1}
    await ch.insert("transcripts", [
        tr(1, "completed", 0, 2, 12, 20.0), tr(2, "completed", 0, 4, 24, 40.0),
        tr(3, "error", 1, 3, 4, None, "invalid_audio"), tr(4, "queued", 5, None, None),
        tr(5, "completed", 10, 10, 15, 10.0), tr(6, "completed", 0, 1, 2, 1.0, deleted=1)])
    def ev(n, kind, key, secs=0.0, model="a5s-async-v1", at=0):
        return {"event_id": f"e{n}", "account_id": "acc_a", "key_id": key, "model": model,
                "kind": kind, "at": s(at), "audio_seconds": secs, "transcript_id": f"tr_{n}"}
    await ch.insert("usage_events", [
        ev(1, "request", "key_1"), ev(2, "request", "key_1"), ev(3, "request", "key_2"),
        ev(4, "completed", "key_1", 20.0), ev(5, "completed", "key_1", 40.0),
        ev(6, "failed", "key_2"), ev(7, "stream", "key_1", 30.0, "a5s-v2-streaming"),
        ev(7, "stream", "key_1", 30.0, "a5s-v2-streaming")])  # a replayed event: one row
    params = {"from": t0 - timedelta(days=1), "to": t0 + timedelta(days=1)}
    out = {}
    for name in queries:
        rows = await ch.query(Path(name).read_text(), params)
        out[Path(name).stem] = [{k: (v.isoformat() if hasattr(v, "isoformat") else v)
                                 for k, v in r.items()} for r in rows]
    await ch.close()
    print(json.dumps(out))

asyncio.run(main(sys.argv[1], sys.argv[2:]))
'''


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    files = sorted(str(p) for p in QUERIES_DIR.glob("*.sql"))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path_factory.mktemp("ch")),
                           *files], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_query_ran(results: dict[str, list[dict]]) -> None:
    assert set(results) == {p.stem for p in QUERIES_DIR.glob("*.sql")}
    assert all(results.values()), results


def test_daily_usage(results: dict[str, list[dict]]) -> None:
    rows = {(r["key_id"], r["model"]): r for r in results["daily_usage"]}
    batch = rows[("key_1", "a5s-async-v1")]
    assert (batch["requests"], batch["completed"], batch["failed"]) == (2, 2, 0)
    assert batch["audio_seconds"] == 60.0 and batch["day"] == "2026-03-02"
    assert rows[("key_2", "a5s-async-v1")]["failed"] == 1
    live = rows[("key_1", "a5s-v2-streaming")]
    assert (live["requests"], live["completed"], live["audio_seconds"]) == (1, 1, 30.0)


def test_failure_rates(results: dict[str, list[dict]]) -> None:
    rows = {r["outcome"]: r for r in results["failure_rates"]}
    assert rows["completed"]["jobs"] == 3 and rows["invalid_audio"]["jobs"] == 1
    assert rows["invalid_audio"]["share"] == 0.25


def test_latency_percentiles(results: dict[str, list[dict]]) -> None:
    (day,) = results["latency_percentiles"]
    assert day["jobs"] == 3  # the deleted one and the failed one are left out
    assert day["processing_p50"] == 10.0 and day["processing_p99"] == pytest.approx(20.0, 0.05)
    assert day["queue_wait_p50"] == 2.0 and day["total_p50"] == 12.0
    assert day["rtf_p50"] == 0.5


def test_queue_wait(results: dict[str, list[dict]]) -> None:
    (hour,) = results["queue_wait"]
    assert hour["jobs"] == 5 and hour["still_queued"] == 1
    assert hour["wait_max"] == 4.0 and hour["wait_avg"] == 2.0  # 2, 4, 2 and 0 s


def test_dashboard_matches_the_queries() -> None:
    assert json.loads(DASHBOARD.read_text()) == dashboard(), \
        "ops/dashboards/a5s.json is stale: run python -m ops.dashboards.build"
    sqls = [t["rawSql"] for p in dashboard()["panels"] for t in p.get("targets", [])
            if "rawSql" in t]
    for path in QUERIES_DIR.glob("*.sql"):
        assert grafana_sql(path.read_text()) in sqls, path.name
    assert all("{db}" not in s and "{from:" not in s for s in sqls)


def test_dashboard_has_prometheus_panels_for_the_metrics() -> None:
    exprs = " ".join(t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])
                     if "expr" in t)
    for metric in ("a5s_http_requests_total", "a5s_http_request_duration_seconds_bucket",
                   "a5s_jobs_in_state", "a5s_jobs_total", "a5s_stage_duration_seconds_bucket",
                   "a5s_realtime_factor_bucket", "a5s_live_sessions",
                   "a5s_webhook_deliveries_total", "a5s_asr_batch_size_sum",
                   "process_cpu_seconds_total", "process_resident_memory_bytes",
                   "process_open_fds"):
        assert metric in exprs, metric
    ids = [p["id"] for p in dashboard()["panels"]]
    assert len(ids) == len(set(ids))
