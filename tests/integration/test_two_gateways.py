"""Two gateway replicas: key revocation reaches both, a live session with no worker left ends,
and a gateway killed mid-burst loses no job it accepted.

The second gateway is a separate ``a5s gateway`` process on its own ports, reaching the
service's embedded ClickHouse through the loopback proxy (``a5s+http://``) and sharing
its broker and Redis, as a replica in a distributed deployment does. The service process
of ``a5s up`` is the pipeline worker (and the first gateway); killing it leaves the
second gateway running with a live session whose worker is gone. Killing the second
gateway leaves the pipeline running without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from ops.stack import EVAL, REPO, EvalServer, Stack, free_port

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

FRAME = 640  # 20 ms of 16 kHz s16le


class Gateway:
    """A second ``a5s gateway`` process in front of ``stack``, on ports of its own."""

    def __init__(self, stack: Stack, log: Path) -> None:
        self.port, self.log = free_port(), log
        self.env = {**os.environ, **stack.env, "A5S_PORT": str(self.port),
                    "A5S_CONSOLE_PORT": str(free_port()),
                    "A5S_CLICKHOUSE_URL": f"a5s+http://127.0.0.1:{stack.console_port}"}
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120) -> None:
        """Start it (again, on the same ports) and wait until it says it is ready."""
        self.log.touch()
        seen = self.log.stat().st_size
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "ops.cli", "gateway"], cwd=REPO,
                                         env=self.env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while "a5s: ready" not in self.log.read_bytes()[seen:].decode(errors="replace"):
            assert self.proc.poll() is None, self.log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the second gateway did not start"
            time.sleep(0.5)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Gateway]]:
    """The stack, and a second gateway in front of it."""
    root = tmp_path_factory.mktemp("gateways")
    stack = Stack(root / "data")
    stack.data_dir.mkdir(parents=True)
    stack.start()
    gateway = Gateway(stack, root / "gateway2.log")
    try:
        gateway.start()
        yield stack, gateway
    finally:
        gateway.stop()
        stack.stop()


def test_a_key_revoked_through_one_gateway_is_refused_by_the_other_within_60_s(
        pair: tuple[Stack, Gateway]) -> None:
    stack, second = pair[0], pair[1].base
    account = stack.console("POST", "/accounts", {"email": "replicas@example.com"})["account"]
    created = stack.console("POST", f"/accounts/{account['id']}/keys", {"name": "replicas"})
    headers = {"Authorization": f"Bearer {created['key']}"}
    # Both replicas know (and cache) the key.
    assert httpx.get(stack.url("/v1/account"), headers=headers).status_code == 200
    assert httpx.get(f"{second}/v1/account", headers=headers).status_code == 200
    stack.console("DELETE", f"/keys/{created['key_id']}")
    revoked_at = time.monotonic()
    # The replica that revoked it refuses it at once.
    assert httpx.get(stack.url("/v1/account"), headers=headers).status_code == 401
    while True:
        resp = httpx.get(f"{second}/v1/account", headers=headers)
        if resp.status_code != 200:
            assert resp.status_code == 401, resp.text
            break
        assert time.monotonic() - revoked_at < 60, "the second gateway still accepts the key"
        time.sleep(1)
    print(f"second gateway refused the revoked key after {time.monotonic() - revoked_at:.1f} s")


def jfk_pcm() -> bytes:
    from pipeline.audio import decode_to_pcm
    out = io.BytesIO()
    decode_to_pcm(EVAL / "real" / "whisper" / "jfk.flac", out)
    return out.getvalue()


class Paced:
    """Sends 20 ms frames at real-time pace (the clip, then silence) and gathers messages."""

    def __init__(self, ws: Any, pcm: bytes) -> None:
        self.ws, self.pcm, self.sent = ws, pcm, 0
        self.t0 = time.monotonic()
        self.messages: list[dict[str, Any]] = []

    async def start(self) -> None:
        await self.ws.send(json.dumps({"type": "start"}))
        while json.loads(await self.ws.recv())["type"] != "ready":
            pass
        self.t0 = time.monotonic()

    async def step(self) -> dict[str, Any] | None:
        """Send the frames that are due, then wait for a message until the next is due."""
        due = int((time.monotonic() - self.t0) / 0.02) + 1
        while self.sent < due * FRAME:
            await self.ws.send(self.pcm[self.sent:self.sent + FRAME] or bytes(FRAME))
            self.sent += FRAME
        try:
            msg = json.loads(await asyncio.wait_for(self.ws.recv(), 0.02))
        except TimeoutError:
            return None
        self.messages.append(msg)
        return msg

    async def until_transcript(self) -> None:
        while True:
            msg = await self.step()
            if msg is not None:
                assert msg["type"] != "error", msg
                if msg["type"] == "transcript":
                    return
            assert self.sent < len(self.pcm), "no transcript for the whole clip"


def test_a_live_session_ends_with_provider_error_when_its_worker_dies(
        pair: tuple[Stack, Gateway]) -> None:
    stack, second = pair[0], pair[1].base
    _, key = stack.new_account()
    pcm = jfk_pcm()
    ws_url = second.replace("http://", "ws://") + "/v1/realtime"

    async def session() -> tuple[list[dict[str, Any]], int | None, float]:
        async with websockets.connect(ws_url, additional_headers={
                "Authorization": f"Bearer {key}"}, max_size=None) as ws:
            client = Paced(ws, pcm)
            await client.start()
            await client.until_transcript()
            seen = len(client.messages)
            # No worker may come back in time: a worker that does takes the session over by
            # replaying its audio (tests/integration/test_realtime_takeover.py). So the
            # supervisor of ``a5s up`` is held until the session has ended.
            assert stack.proc is not None
            os.kill(stack.proc.pid, signal.SIGSTOP)
            stack.kill_service()  # the worker (and the first gateway) die; this gateway lives
            killed = time.monotonic()
            # The client keeps streaming, as a live microphone would, and must be told.
            with contextlib.suppress(ConnectionClosed):
                while True:
                    await client.step()
            with contextlib.suppress(ConnectionClosed):
                async for raw in ws:  # whatever arrived just before the close
                    client.messages.append(json.loads(raw))
            return client.messages[seen:], ws.close_code, time.monotonic() - killed

    try:
        after, close_code, took = asyncio.run(asyncio.wait_for(session(), 120))
    finally:
        assert stack.proc is not None
        os.kill(stack.proc.pid, signal.SIGCONT)
    kinds = [m["type"] for m in after]
    assert "provider_error" in kinds and kinds[-1] == "error", kinds
    assert kinds.index("provider_error") < len(kinds) - 1
    assert after[-1]["code"] == "a5sv2_unavailable" and after[-1]["message"], after[-1]
    assert close_code == 1013
    print(f"session ended {took:.1f} s after its worker was killed")

    # The service comes back (the supervisor, running again, restarts it), and the surviving
    # gateway serves a new session on it without being restarted itself.
    stack.wait_ready(180)

    async def again() -> None:
        async with websockets.connect(ws_url, additional_headers={
                "Authorization": f"Bearer {key}"}, max_size=None) as ws:
            client = Paced(ws, pcm)
            await client.start()
            await client.until_transcript()

    asyncio.run(asyncio.wait_for(again(), 180))


def test_a_gateway_killed_mid_burst_loses_no_job_it_accepted(
        pair: tuple[Stack, Gateway]) -> None:
    """SIGKILL of a gateway while clients submit jobs and stream through it.

    Every job it answered 201 for completes once and is counted once; a job it was
    creating when it died (row written, no answer sent) is found by the reconciler and
    completes too, so the books still balance. Its live session's socket drops at once.
    The gateway restarted on the same port serves again.
    """
    stack, gateway = pair
    _, key = stack.new_account()
    headers = {"Authorization": f"Bearer {key}"}
    clip = "real/speechbrain/spk1_snt1.wav"
    server = EvalServer()
    accepted: list[str] = []
    refused: list[str] = []

    def burst() -> None:
        with httpx.Client(base_url=gateway.base, headers=headers, timeout=10) as client:
            while True:
                try:
                    resp = client.post("/v1/transcripts", json={"audio_url": server.url(clip)})
                except httpx.HTTPError as exc:  # the gateway died under this request
                    refused.append(repr(exc))
                    return
                assert resp.status_code == 201, resp.text
                accepted.append(resp.json()["id"])

    async def live_session_then_kill() -> float:
        ws_url = gateway.base.replace("http://", "ws://") + "/v1/realtime"
        async with websockets.connect(ws_url, additional_headers=headers) as ws:
            await ws.send(json.dumps({"type": "start"}))
            while json.loads(await ws.recv())["type"] != "ready":
                pass
            await ws.send(bytes(FRAME))
            sender = threading.Thread(target=burst)
            sender.start()
            while len(accepted) < 4:
                await asyncio.sleep(0.05)
            gateway.kill()
            killed = time.monotonic()
            with contextlib.suppress(ConnectionClosed):
                async for _ in ws:
                    pass
            dropped = time.monotonic() - killed
            await asyncio.to_thread(sender.join, 30)
            return dropped

    try:
        dropped = asyncio.run(asyncio.wait_for(live_session_then_kill(), 120))
        assert dropped < 5, f"the live socket took {dropped:.1f} s to drop"
        assert refused, "the burst outlived the gateway"
        gateway.start()
        with httpx.Client(base_url=gateway.base, headers=headers, timeout=30) as client:
            done = {tid: stack.wait_transcript(client, tid, timeout_s=300) for tid in accepted}
            assert all(body["status"] == "completed" for body in done.values()), done
            # Whatever the gateway had written when it died ends too (the reconciler
            # submits a queued row its ledger never saw); nothing stays queued.
            deadline = time.monotonic() + 180
            while True:
                listed = client.get("/v1/transcripts", params={"limit": 100}).json()["data"]
                if all(t["status"] in ("completed", "error") for t in listed):
                    break
                assert time.monotonic() < deadline, [t["status"] for t in listed]
                time.sleep(1)
            ids = [t["id"] for t in listed]
            assert len(ids) == len(set(ids)) and set(accepted) <= set(ids)
            assert all(t["status"] == "completed" for t in listed), listed
            stack.wait_settled(client, sum(t["audio_duration"] for t in listed))
    finally:
        server.close()
    print(f"\ngateway killed after {len(accepted)} accepted jobs ({len(listed)} created); "
          f"the live socket dropped {dropped:.2f} s after the kill")
