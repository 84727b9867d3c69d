"""``GET /metrics`` after real traffic, parsed with prometheus_client's own parser."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ops.stack import Stack

pytestmark = pytest.mark.stack


def scrape(stack: Stack) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    resp = httpx.get(stack.url("/metrics"))
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def total(samples: dict, name: str, **labels: str) -> float:
    return sum(v for k, v in samples.get(name, {}).items()
               if all((n, val) in k for n, val in labels.items()))


def test_metrics_after_traffic(stack: Stack, eval_server) -> None:
    before = scrape(stack)
    _, key = stack.new_account()
    with stack.client(key) as c:
        assert c.get("/v1/transcripts/tr_nope").status_code == 404
        tid = c.post("/v1/transcripts", json={
            "audio_url": eval_server.url("real/whisper/jfk.flac")}).json()["id"]
        stack.wait_transcript(c, tid)
    after = scrape(stack)
    route = "/v1/transcripts/{id}"
    assert total(after, "a5s_http_requests_total", route=route, method="GET") > \
        total(before, "a5s_http_requests_total", route=route, method="GET")
    assert total(after, "a5s_http_requests_total", route=route, status="404") >= 1
    assert total(after, "a5s_http_requests_total", route="/v1/transcripts", method="POST",
                 status="201") >= 1
    assert not any("tr_nope" in dict(k).get("route", "")
                   for k in after["a5s_http_requests_total"])
    assert total(after, "a5s_http_request_duration_seconds_count", route=route) >= 1
    assert total(after, "a5s_jobs_total", state="queued") >= 1
    assert total(after, "a5s_jobs_total", state="completed") >= 1
    for stage in ("decode", "chunk", "transcribe", "diarize", "finalize", "publish"):
        assert total(after, "a5s_stage_duration_seconds_count", stage=stage) >= 1, stage
    assert total(after, "a5s_realtime_factor_count") >= 1
    assert 0 < total(after, "a5s_realtime_factor_sum") / total(after, "a5s_realtime_factor_count")
    assert {dict(k)["state"] for k in after["a5s_jobs_in_state"]} == {"queued", "processing"}
    assert "a5s_live_sessions" in after
    assert "a5s_live_final_lag_seconds" in after and "a5s_live_sessions_refused_total" in after


PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0;q=0.5,"
                     "application/openmetrics-text;version=0.0.1;q=0.4,"
                     "text/plain;version=0.0.4;q=0.3,*/*;q=0.2")


def test_metrics_negotiates_the_format_and_shows_the_process(stack: Stack) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
    text = httpx.get(stack.url("/metrics"))
    assert text.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "Accept" in [v.strip() for v in text.headers["vary"].split(",")]
    om = httpx.get(stack.url("/metrics"), headers={"Accept": PROMETHEUS_ACCEPT})
    assert om.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert om.text.endswith("# EOF\n") and not text.text.endswith("# EOF\n")
    families = {f.name: f for f in om_parse(om.text)}  # the strict OpenMetrics parser
    assert families["a5s_http_requests"].type == "counter"
    preferred_text = httpx.get(stack.url("/metrics"), headers={
        "Accept": "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.1"})
    assert preferred_text.headers["content-type"].startswith("text/plain")
    for body in (text.text, om.text):
        assert "_created" not in body
    samples = scrape(stack)
    assert total(samples, "process_resident_memory_bytes") > 50e6  # the models and chdb
    assert total(samples, "process_cpu_seconds_total") > 0
    assert 0 < total(samples, "process_open_fds") < total(samples, "process_max_fds")
