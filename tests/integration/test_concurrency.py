"""Limits hold under concurrency: many simultaneous requests of one account.

Every burst is sent at once with asyncio and httpx against the session stack. The
checks are what a client can observe: how many creates were accepted and refused,
how many jobs were ``processing`` at any moment (polled), the ledger and the
transcripts. Jobs are cheap: a clip served only once the test lets it through
holds them in ``decode``, and the usage limit fails most of them without running
a model.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from ops.stack import EVAL, EvalServer, Stack, free_port

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

CLIP = "real/asterisk_16k/vm-leavemsg.wav"  # 2.1 s


def burst(stack: Stack, key: str, n: int, body: Any, headers: dict[str, str] | None = None,
          ) -> list[httpx.Response]:
    """``n`` identical ``POST /v1/transcripts`` sent at once."""
    async def go() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=stack.url(""), timeout=120, limits=limits,
                                     headers={"Authorization": f"Bearer {key}"}) as client:
            return list(await asyncio.gather(*(
                client.post("/v1/transcripts", json=body, headers=headers or {})
                for _ in range(n))))
    return asyncio.run(go())


def codes(responses: list[httpx.Response]) -> Counter[tuple[int, str]]:
    return Counter((r.status_code, (r.json().get("error") or {}).get("code", ""))
                   for r in responses)


class _Gate(http.server.BaseHTTPRequestHandler):
    """Serves the clip once ``opened`` is set; until then every request waits."""

    opened: threading.Event
    data: bytes

    def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
        self.opened.wait(300)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.data)))
        self.end_headers()
        self.wfile.write(self.data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def gate() -> Iterator[tuple[str, threading.Event]]:
    opened = threading.Event()
    handler = type("Gate", (_Gate,), {"opened": opened, "data": (EVAL / CLIP).read_bytes()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/clip.wav", opened
    opened.set()
    server.shutdown()


def test_a_burst_never_passes_the_queue_the_slots_or_the_usage_limit(
        stack: Stack, gate: tuple[str, threading.Event]) -> None:
    """200 simultaneous creates: 5 processing + 15 waiting accepted, the rest queue_full;
    never more than 5 processing; usage never above its limit and counted once."""
    url, opened = gate
    _, key = stack.new_account(max_queued_jobs=15, usage_limit_seconds=5)
    responses = burst(stack, key, 200, {"audio_url": url})
    seen = codes(responses)
    accepted = [r.json()["id"] for r in responses if r.status_code == 201]
    assert set(seen) <= {(201, ""), (429, "queue_full")}, seen
    assert 15 <= len(accepted) <= 20, seen
    with stack.client(key) as client:
        most = 0
        deadline = time.monotonic() + 300
        released = False
        while time.monotonic() < deadline:
            listed = client.get("/v1/transcripts", params={"limit": 100}).json()["data"]
            status = Counter(t["status"] for t in listed)
            most = max(most, status["processing"])
            if not released and status["processing"] >= 5:
                opened.set()  # every slot is taken: now let the audio through
                released = True
            if status["completed"] + status["error"] == len(accepted):
                break
            time.sleep(0.2)
        assert released and most == 5, most
        done = [stack.wait_transcript(client, tid, timeout_s=60) for tid in accepted]
        completed = [t for t in done if t["status"] == "completed"]
        failed = Counter(t["error"]["code"] for t in done if t["status"] == "error")
        assert set(failed) <= {"usage_limit_reached"}, failed
        assert 1 <= len(completed) <= 2  # 2.1 s each against a 5 s allowance
        used = sum(t["audio_duration"] for t in completed)
        deadline = time.monotonic() + 60
        while True:
            limit = client.get("/v1/account").json()["usage_limit"]
            if limit["reserved_seconds"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert limit["used_seconds"] == pytest.approx(used, abs=1e-3)
        assert limit["used_seconds"] <= 5
        assert limit["reserved_seconds"] == 0
        retry = client.post("/v1/transcripts", json={"audio_url": url})
        if limit["remaining_seconds"] <= 0:
            assert retry.json()["error"]["code"] == "usage_limit_reached"


def test_the_rate_limit_admits_exactly_its_number(stack: Stack) -> None:
    """120 simultaneous creates against 50 a minute: 50 pass the rate check (each then fails
    validation, since every create request counts), the rest are rate_limited. The window
    rolls: a burst that lasts ``t`` seconds may pass ``t / 1.2`` more."""
    _, key = stack.new_account(max_requests_per_minute=50)
    started = time.monotonic()
    responses = burst(stack, key, 120, {})
    extra = int((time.monotonic() - started) / 1.2)
    seen = codes(responses)
    assert set(seen) == {(400, "invalid_request"), (429, "rate_limited")}, seen
    assert 50 <= seen[(400, "invalid_request")] <= 50 + extra, (seen, extra)
    assert all(1 <= int(r.headers["retry-after"]) <= 60 for r in responses
               if r.status_code == 429)


def test_simultaneous_retries_with_one_idempotency_key_make_one_transcript(
        stack: Stack, eval_server: EvalServer) -> None:
    _, key = stack.new_account()
    body = {"audio_url": eval_server.url("no/such/file.wav"), "metadata": {"n": 1}}
    responses = burst(stack, key, 20, body, {"Idempotency-Key": f"k-{time.time_ns()}"})
    assert Counter(r.status_code for r in responses) == {201: 1, 200: 19}, codes(responses)
    assert len({r.json()["id"] for r in responses}) == 1
    with stack.client(key) as client:
        assert len(client.get("/v1/transcripts").json()["data"]) == 1


def test_concurrent_live_sessions_stop_at_five(stack: Stack) -> None:
    """12 sessions of one account start at once: 5 get a slot, 7 quota_unavailable (4409)."""
    _, key = stack.new_account()
    sessions = 12

    async def go() -> list[str]:
        answered: list[str] = []
        first_answers = 0
        everyone = asyncio.Event()

        async def one() -> None:
            nonlocal first_answers
            async with websockets.connect(stack.ws_url, additional_headers={
                    "Authorization": f"Bearer {key}"}) as ws:
                await ws.send(json.dumps({"type": "start"}))
                first = json.loads(await asyncio.wait_for(ws.recv(), 60))
                answered.append(first["type"] if first["type"] != "error" else first["code"])
                # counted apart from `answered`, which also gathers the refused sessions' closes
                first_answers += 1
                if first_answers == sessions:
                    everyone.set()
                if first["type"] == "error":
                    await asyncio.wait_for(ws.wait_closed(), 10)
                    answered.append(f"close {ws.close_code}")
                    return
                # hold the slot until every session has had its answer; a session the
                # server ended meanwhile (its recognizer did not start) gave its slot back
                await asyncio.wait_for(everyone.wait(), 60)
                await asyncio.sleep(0.5)
                answered.append("held" if ws.close_code is None else "ended early")
                if ws.close_code is not None:
                    answered.append(f"ended with {ws.close_code} {ws.close_reason}")

        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(sessions))), 120)
        return answered

    seen = Counter(asyncio.run(go()))
    assert seen["held"] <= 5, seen
    assert seen["quota_unavailable"] == seen["close 4409"] == 7 - seen["ended early"], seen
    assert seen["held"] + seen["ended early"] == seen["provider_status"] + seen["ready"], seen
