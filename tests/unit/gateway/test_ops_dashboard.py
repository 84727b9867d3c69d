"""The ops dashboard's pure parts: its time buckets and what it reads from the registry."""

from __future__ import annotations

from gateway.ops_dashboard import bucket_seconds, registry_figures
from stores.metrics import Metrics


def test_buckets_keep_a_window_within_60_points() -> None:
    assert bucket_seconds(0.25) == 60 and bucket_seconds(1) == 60
    assert bucket_seconds(24) == 3600 and bucket_seconds(24 * 7) == 6 * 3600
    assert bucket_seconds(24 * 90) == 86400


def test_registry_figures() -> None:
    m = Metrics()
    m.live_sessions.inc()
    m.webhook_deliveries.labels("delivered").inc(3)
    m.webhook_deliveries.labels("gave_up").inc()
    got = registry_figures(m.registry)
    assert got["live_sessions"] == 1
    assert got["webhook_deliveries"] == {"delivered": 3, "gave_up": 1}
    assert got["process"]["resident_bytes"] > 0 and got["process"]["open_fds"] > 0


def test_bucket_times_are_sent_as_utc() -> None:
    from datetime import datetime

    from gateway.ops_dashboard import LatencyBucket
    bucket = LatencyBucket(t=datetime(2026, 3, 2, 9, 0), jobs=1, queue_p50=1, queue_p95=1,
                           processing_p50=2, processing_p95=2, rtf_p50=0.2, rtf_p95=0.2)
    assert bucket.model_dump_json().startswith('{"t":"2026-03-02T09:00:00Z"')
