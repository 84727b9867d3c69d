"""Starting and stopping ``a5s up`` as an operator does: Ctrl-C during traffic, a closed
terminal (SIGHUP), a killed supervisor, and a second ``a5s up``.

Each test runs a stack of its own (the session stack is not stopped under other tests).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import tornado.httpclient
import tornado.websocket

from ops.stack import EVAL, REPO, EvalServer, Stack

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

CLIP = "real/asterisk_16k/vm-leavemsg.wav"  # 2.1 s
JFK = EVAL / "real" / "whisper" / "jfk.flac"  # 11 s, streamed in real time


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _pids(stack: Stack) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in (stack.data_dir / "run").glob("*.pid")}


def _log(stack: Stack) -> str:
    return stack.log_path.read_text(errors="replace")


async def _open_session(stack: Stack, key: str) -> tuple[str | None, int | None]:
    """The error code and close code a new WebSocket session gets."""
    request = tornado.httpclient.HTTPRequest(stack.ws_url,
                                             headers={"Authorization": f"Bearer {key}"})
    conn = await tornado.websocket.websocket_connect(request)
    await conn.write_message(json.dumps({"type": "start", "language": "en-US"}))
    code = None
    while (raw := await conn.read_message()) is not None:
        if isinstance(raw, str) and json.loads(raw).get("type") == "error":
            code = json.loads(raw)["code"]
    return code, conn.close_code


@pytest.fixture()
def own_stack(tmp_path: Path) -> Stack:
    stack = Stack(tmp_path / "data")
    stack.data_dir.mkdir()
    stack.start()
    yield stack
    stack.stop()


def test_ctrl_c_during_a_burst_refuses_then_keeps_every_accepted_job(
        own_stack: Stack, eval_server: EvalServer) -> None:
    stack = own_stack
    _, key = stack.new_account(max_requests_per_minute=100_000)
    answers: list[tuple[float, int, httpx.Response | None]] = []
    stop = threading.Event()

    sockets: list[tuple[str | None, int | None]] = []

    def burst() -> None:
        with stack.client(key) as http:
            while not stop.is_set():
                try:
                    resp = http.post("/v1/transcripts",
                                     json={"audio_url": eval_server.url(CLIP)}, timeout=30)
                    answers.append((time.monotonic(), resp.status_code, resp))
                    if resp.status_code == 503 and not sockets:  # and a live session now
                        sockets.append(asyncio.run(_open_session(stack, key)))
                except httpx.TransportError:
                    answers.append((time.monotonic(), 0, None))  # the port is closed: gone
                time.sleep(0.2)

    live: list[BaseException | None] = []

    def session() -> None:  # a live session while it stops: error, then 1013
        from a5s.realtime import stream
        try:
            for msg in stream(JFK, url=stack.ws_url, api_key=key):
                if msg.type == "ready":
                    live.append(None)
        except Exception as exc:  # noqa: BLE001 - what the client saw is the assertion
            live.append(exc)

    talker = threading.Thread(target=session)
    talker.start()
    thread = threading.Thread(target=burst)
    thread.start()
    deadline = time.monotonic() + 60
    while not live and time.monotonic() < deadline:  # the session is under way
        time.sleep(0.1)
    time.sleep(1.0)
    pids = _pids(stack)
    signalled = time.monotonic()
    assert stack.proc is not None
    stack.proc.send_signal(signal.SIGINT)
    assert stack.proc.wait(90) == 0
    stop.set()
    thread.join()
    talker.join(60)
    assert live[0] is None and getattr(live[-1], "code", None) == "upstream_unavailable", live
    assert live[-1].close_code in (1013, None), live[-1]  # type: ignore[union-attr]

    before = [r for t, s, r in answers if t < signalled]
    after = [(s, r) for t, s, r in answers if t >= signalled]
    print(f"\nburst: {len(before)} created before Ctrl-C; then, in order: "
          f"{[s for s, _ in after]} (0: connection refused)")
    assert before and all(r is not None and r.status_code == 201 for r in before)
    refused = [r for s, r in after if s == 503]
    assert refused, [s for s, _ in after]  # the API said so, it did not just vanish
    first_refusal = next(i for i, (s, _) in enumerate(after) if s == 503)
    assert all(s in (503, 0) for s, _ in after[first_refusal:]), [s for s, _ in after]
    for resp in refused:
        err = resp.json()["error"]
        assert err["code"] == "upstream_unavailable" and resp.headers["Retry-After"]
        assert err["request_id"] == resp.headers["x-request-id"]
    assert not [name for name, pid in pids.items() if _alive(pid)], pids
    assert sockets == [("upstream_unavailable", 1013)], sockets
    log = _log(stack)
    for sign in ("Traceback", "Uncaught exception", "Exception in thread"):
        assert sign not in log, log[log.find(sign) - 300:][:2000]

    stack.proc = None
    stack.start()
    accepted = [r.json()["id"] for _, s, r in answers if s == 201]
    with stack.client(key) as http:
        for tid in accepted:
            assert stack.wait_transcript(http, tid, timeout_s=300)["status"] == "completed"


def test_sighup_stops_everything(own_stack: Stack) -> None:
    stack = own_stack
    pids = _pids(stack)
    assert {"broker", "redis", "service"} <= set(pids)
    assert stack.proc is not None
    stack.proc.send_signal(signal.SIGHUP)
    assert stack.proc.wait(90) == 0
    assert not [name for name, pid in pids.items() if _alive(pid)], pids
    log = _log(stack)
    assert "a5s: stopped" in log
    assert "\x1b" not in log, "terminal codes in a log written to a file"


def _up(stack: Stack, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ops.cli", "up"], cwd=REPO, timeout=120,
                          env={**os.environ, **stack.env, "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True)


def test_a_second_up_names_the_running_one(own_stack: Stack, tmp_path: Path) -> None:
    stack = own_stack
    same = _up(stack)
    assert same.returncode == 1 and "Traceback" not in same.stdout + same.stderr
    line = same.stderr.strip().splitlines()[-1]
    assert str(stack.data_dir) in line and str(stack.proc.pid) in line, line  # type: ignore[union-attr]
    other = _up(stack, A5S_DATA_DIR=str(tmp_path / "other"))
    assert other.returncode == 1 and "Traceback" not in other.stdout + other.stderr
    line = other.stderr.strip().splitlines()[-1]
    assert re.search(rf"port {stack.port} \(API\) is in use by pid \d+", line), line
    assert str(stack.data_dir) in line, line  # the holder's data directory


def test_leftovers_of_a_killed_up_are_stopped_on_start(own_stack: Stack) -> None:
    stack = own_stack
    assert stack.proc is not None
    pids = _pids(stack)
    stack.proc.send_signal(signal.SIGKILL)  # the supervisor only: its children live on
    stack.proc.wait()
    assert all(_alive(pid) for pid in pids.values()), pids
    stack.proc = None
    stack.start()  # healthy at once: the old service still answers
    deadline = time.monotonic() + 120
    while stack.service_pid() in (None, pids["service"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    stack.wait_ready()
    assert not [name for name, pid in pids.items() if _alive(pid)], pids
    log = _log(stack)
    for name in ("broker", "redis", "service"):
        assert f"stopped the {name} (pid {pids[name]})" in log, log[-2000:]
    assert httpx.get(stack.url("/health")).status_code == 200
