"""Webhook deliveries against a real receiver on loopback (spec sections 5.8 and 6).

The session stack runs with a short schedule (retries after 1, 2 and 2 seconds), a
2-second reply limit and loopback receivers allowed; the production schedule is
checked from the default configuration. Each test uses its own receiver path, whose
answers are scripted per attempt.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import redis

from a5s.webhooks import verify
from schemas.settings import Settings
from ops.stack import EvalServer, Stack, free_port

pytestmark = pytest.mark.stack

SHORT_CLIP = "real/asterisk_16k/added.wav"
LONG_CLIP = "synthetic/conv02_team_meeting.wav"
MISSING = "no/such/file.wav"


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Records every POST; answers each path from its script (an int status, or
    ``("sleep", seconds)`` to answer 200 too late), then 200 once the script runs out."""

    hits: list[Hit] = field(default_factory=list)
    scripts: dict[str, list[Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    def url(self, path: str, *script: Any) -> str:
        with self.lock:
            self.scripts[path] = list(script)
        return f"http://127.0.0.1:{self.port}{path}"

    def answer(self, hit: Hit) -> Any:
        with self.lock:
            self.hits.append(hit)
            script = self.scripts.get(hit.path, [])
            return script.pop(0) if script else 200

    def of(self, path: str) -> list[Hit]:
        with self.lock:
            return [h for h in self.hits if h.path == path]

    def wait(self, path: str, count: int, timeout_s: float = 60.0) -> list[Hit]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            hits = self.of(path)
            if len(hits) >= count:
                return hits
            time.sleep(0.1)
        raise TimeoutError(f"{path}: {len(self.of(path))} of {count} deliveries arrived")


def _handler(receiver: Receiver) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's spelling
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hit = Hit(self.path, {k.lower(): v for k, v in self.headers.items()}, body,
                      time.time())
            action = receiver.answer(hit)
            if isinstance(action, tuple):
                time.sleep(action[1])
                action = 200
            try:
                self.send_response(action)
                self.send_header("Content-Length", "0")
                self.end_headers()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the sender gave up waiting: that was the point

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    rec = Receiver(port=free_port())
    server = http.server.ThreadingHTTPServer(("127.0.0.1", rec.port), _handler(rec))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield rec
    server.shutdown()


@pytest.fixture(scope="module")
def valkey(stack: Stack) -> Iterator[redis.Redis]:
    client = redis.Redis(port=int(stack.env["A5S_EMBEDDED__REDIS"]), decode_responses=True)
    yield client
    client.close()


@pytest.fixture(scope="module")
def account(stack: Stack) -> tuple[str, str, str]:
    """(account_id, key, webhook secret)."""
    account_id, key = stack.new_account()
    secret = stack.console("GET", f"/accounts/{account_id}/webhook-secret")["webhook_secret"]
    return account_id, key, secret


def _submit(client: httpx.Client, audio_url: str, webhook_url: str, **extra: Any) -> str:
    resp = client.post("/v1/transcripts", json={"audio_url": audio_url,
                                                "webhook_url": webhook_url, **extra})
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def _status_code(client: httpx.Client, tid: str, expected: int,
                 timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = client.get(f"/v1/transcripts/{tid}").json()
        if body.get("webhook_status_code") == expected:
            return body
        time.sleep(0.2)
    raise AssertionError(f"webhook_status_code is {body.get('webhook_status_code')}, "
                         f"not {expected}")


def _gone(check: Any, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not check():
            return True
        time.sleep(0.2)
    return False


def test_production_schedule_comes_from_configuration() -> None:
    hooks = Settings().webhooks
    assert tuple(hooks.retry_schedule_s) == (30, 120, 600, 1800, 3600, 7200, 14400, 28800,
                                             28800)
    assert hooks.timeout_s == 15 and hooks.allow_private and not hooks.allow_loopback


def test_completed_job_delivers_a_signed_event_with_the_auth_header(
        stack: Stack, eval_server: EvalServer, receiver: Receiver, valkey: redis.Redis,
        account: tuple[str, str, str]) -> None:
    _, key, secret = account
    with stack.client(key) as client:
        tid = _submit(client, eval_server.url(SHORT_CLIP), receiver.url("/ok"),
                      webhook_auth_header_name="X-Receiver-Token",
                      webhook_auth_header_value="let-me-in", metadata={"order": 42})
        body = stack.wait_transcript(client, tid)
        assert body["status"] == "completed"
        [hit] = receiver.wait("/ok", 1)
        assert hit.json == {"event": "transcript.completed", "id": tid, "status": "completed",
                            "metadata": {"order": 42}}
        verify(secret, hit.headers, hit.body)
        assert hit.headers["webhook-id"] and hit.headers["webhook-signature"].startswith("v1,")
        assert abs(int(hit.headers["webhook-timestamp"]) - hit.at) < 60
        assert hit.headers["x-receiver-token"] == "let-me-in"
        assert hit.headers["content-type"] == "application/json"
        assert _status_code(client, tid, 200)["webhook_url"] == receiver.url("/ok")
        assert _gone(lambda: valkey.exists(f"a5s:webhook-auth:{tid}"))
        assert _gone(lambda: (stack.data_dir / "objects" / "jobs" / tid).exists())
        time.sleep(3)
        assert len(receiver.of("/ok")) == 1


def test_failed_job_is_retried_after_a_500_and_a_timeout(
        stack: Stack, eval_server: EvalServer, receiver: Receiver,
        account: tuple[str, str, str]) -> None:
    _, key, secret = account
    with stack.client(key) as client:
        tid = _submit(client, eval_server.url(MISSING),
                      receiver.url("/flaky", 500, ("sleep", 3.5)), metadata={"k": "v"})
        assert stack.wait_transcript(client, tid)["status"] == "error"
        hits = receiver.wait("/flaky", 3, timeout_s=90)
        assert {h.headers["webhook-id"] for h in hits} == {hits[0].headers["webhook-id"]}
        for hit in hits:
            assert hit.json == {"event": "transcript.failed", "id": tid, "status": "error",
                                "metadata": {"k": "v"}}
            verify(secret, hit.headers, hit.body)
        assert hits[1].at - hits[0].at >= 0.9  # first retry after 1 s
        assert hits[2].at - hits[1].at >= 3.5  # the 2 s reply limit, then 2 s more
        _status_code(client, tid, 200)
        time.sleep(3)
        assert len(receiver.of("/flaky")) == 3


def test_410_stops_retries_429_does_not_and_the_last_retry_gives_up(
        stack: Stack, eval_server: EvalServer, receiver: Receiver, valkey: redis.Redis,
        account: tuple[str, str, str]) -> None:
    _, key, _ = account
    with stack.client(key) as client:
        gone = _submit(client, eval_server.url(MISSING), receiver.url("/gone", 410))
        busy = _submit(client, eval_server.url(MISSING), receiver.url("/busy", 429, 429))
        down = _submit(client, eval_server.url(MISSING), receiver.url("/down", *[503] * 9),
                       webhook_auth_header_name="Authorization",
                       webhook_auth_header_value="Bearer xyz")
        assert len(receiver.wait("/busy", 3, timeout_s=90)) == 3
        assert len(receiver.wait("/down", 4, timeout_s=90)) == 4  # the first and 3 retries
        time.sleep(4)
        assert len(receiver.of("/gone")) == 1
        assert len(receiver.of("/busy")) == 3
        assert len(receiver.of("/down")) == 4
        assert receiver.of("/down")[0].headers["authorization"] == "Bearer xyz"
        _status_code(client, gone, 410)
        _status_code(client, busy, 200)
        _status_code(client, down, 503)
        assert _gone(lambda: valkey.exists(f"a5s:webhook-auth:{down}"))


def test_no_webhook_for_a_canceled_job(stack: Stack, eval_server: EvalServer,
                                       receiver: Receiver, valkey: redis.Redis,
                                       account: tuple[str, str, str]) -> None:
    _, key, _ = account
    with stack.client(key) as client:
        tid = _submit(client, eval_server.url(LONG_CLIP), receiver.url("/canceled"),
                      webhook_auth_header_name="X-Token", webhook_auth_header_value="t")
        resp = client.delete(f"/v1/transcripts/{tid}")
        assert resp.status_code == 200 and resp.json()["error"]["code"] == "canceled"
        assert not valkey.exists(f"a5s:webhook-auth:{tid}")
        time.sleep(8)
        assert receiver.of("/canceled") == []


def test_a_restart_mid_schedule_still_delivers_with_the_same_id(
        stack: Stack, eval_server: EvalServer, receiver: Receiver,
        account: tuple[str, str, str]) -> None:
    """Runs last: it kills the service process (the supervisor restarts it)."""
    _, key, secret = account
    with stack.client(key) as client:
        tid = _submit(client, eval_server.url(MISSING), receiver.url("/restart", 500, 500))
        [first] = receiver.wait("/restart", 1, timeout_s=120)
        stack.restart_service()
    with stack.client(key) as client:
        hits = receiver.wait("/restart", 3, timeout_s=180)
        assert {h.headers["webhook-id"] for h in hits} == {first.headers["webhook-id"]}
        for hit in hits:
            verify(secret, hit.headers, hit.body)
            assert hit.json["id"] == tid
        _status_code(client, tid, 200, timeout_s=60)
        time.sleep(4)
        assert len(receiver.of("/restart")) == 3
