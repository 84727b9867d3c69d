"""Two gateway replicas: key revocation reaches both, and a live session outlives no worker.

The second gateway is a separate ``a5s gateway`` process on its own ports, reaching the
service's embedded ClickHouse through the loopback proxy (``a5s+http://``) and sharing
its broker and Redis, as a replica in a distributed deployment does. The service process
of ``a5s up`` is the pipeline worker (and the first gateway); killing it leaves the
second gateway running with a live session whose worker is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from tests.stack import EVAL, REPO, Stack, free_port

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

FRAME = 640  # 20 ms of 16 kHz s16le


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    """The stack, and the base URL of a second gateway in front of it."""
    root = tmp_path_factory.mktemp("gateways")
    stack = Stack(root / "data")
    stack.data_dir.mkdir(parents=True)
    stack.start()
    port = free_port()
    env = {**os.environ, **stack.env, "A5S_PORT": str(port), "A5S_CONSOLE_PORT": str(free_port()),
           "A5S_CLICKHOUSE_URL": f"a5s+http://127.0.0.1:{stack.console_port}"}
    log = root / "gateway2.log"
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ops.cli", "gateway"], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while "a5s: ready" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the second gateway did not start"
            time.sleep(0.5)
        yield stack, base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        stack.stop()


def test_a_key_revoked_through_one_gateway_is_refused_by_the_other_within_60_s(
        pair: tuple[Stack, str]) -> None:
    stack, second = pair
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
        pair: tuple[Stack, str]) -> None:
    stack, second = pair
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

    after, close_code, took = asyncio.run(asyncio.wait_for(session(), 120))
    kinds = [m["type"] for m in after]
    assert "provider_error" in kinds and kinds[-1] == "error", kinds
    assert kinds.index("provider_error") < len(kinds) - 1
    assert after[-1]["code"] == "a5sv2_unavailable" and after[-1]["message"], after[-1]
    assert close_code == 1013
    print(f"session ended {took:.1f} s after its worker was killed")

    # The service comes back (the supervisor restarts it), and the surviving gateway serves
    # a new session on it without being restarted itself.
    stack.wait_ready(180)

    async def again() -> None:
        async with websockets.connect(ws_url, additional_headers={
                "Authorization": f"Bearer {key}"}, max_size=None) as ws:
            client = Paced(ws, pcm)
            await client.start()
            await client.until_transcript()

    asyncio.run(asyncio.wait_for(again(), 180))
