"""Hostile input: SSRF attempts, decompression bombs, endless downloads, WebSocket fuzzing.

Two stacks of this module's own, both with small, settable limits so each attack
ends in seconds (audio up to 60 s, downloads up to 8 MB and 10 s):

- ``strict``: the production default for ``audio_url`` (no private or loopback
  addresses) and for webhooks (no loopback, no link-local); every SSRF form must end
  in ``download_failed`` and never reach the loopback listener that stands for an
  internal service;
- ``lenient``: private audio URLs allowed, so loopback servers can play the hostile
  origin (a body that never ends, one that drips, one that never answers).

Bombs are generated here with PyAV and numpy and uploaded (``POST /v1/files``).
The WebSocket fuzz runs against the session stack, bounded in connections and time.
Cross-account isolation is proven by ``test_api_contract`` (``test_not_found``,
``test_direct_upload_is_one_use``); schema fuzzing of every endpoint by ``test_api_fuzz``.
"""

from __future__ import annotations

import asyncio
import http.server
import io
import json
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import av
import httpx
import numpy as np
import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from ops.stack import Stack, free_port

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

LIMITS = {"A5S_LIMITS__MAX_AUDIO_DURATION_SECONDS": "60",
          "A5S_MAX_DOWNLOAD_BYTES": str(8 << 20), "A5S_DOWNLOAD_TIMEOUT_S": "10",
          "A5S_MODELS__WHISPER": "tiny.en", "A5S_MODELS__BEAM_SIZE": "1",
          "A5S_WEBHOOKS__RETRY_SCHEDULE_S": "[1]", "A5S_WEBHOOKS__TIMEOUT_S": "2"}
RATE = 16000


def _stack(tmp_path_factory: pytest.TempPathFactory, name: str, **env: str) -> Stack:
    s = Stack(tmp_path_factory.mktemp(name) / "data", env={**LIMITS, **env})
    s.data_dir.mkdir(parents=True)
    s.start()
    return s


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = _stack(tmp_path_factory, "strict", A5S_ALLOW_PRIVATE_AUDIO_URLS="false")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def lenient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = _stack(tmp_path_factory, "lenient", A5S_ALLOW_PRIVATE_AUDIO_URLS="true")
    yield s
    s.stop()


def submit(client: httpx.Client, **body: Any) -> str | None:
    """The new transcript id, or None when the request was refused up front (400)."""
    resp = client.post("/v1/transcripts", json=body)
    if resp.status_code == 400:
        return None
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def wait_all(stack: Stack, client: httpx.Client, ids: list[str],
             timeout_s: float = 240) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    return {tid: stack.wait_transcript(client, tid, max(1.0, deadline - time.monotonic()))
            for tid in ids}


# --- SSRF under the default policy ------------------------------------------------------------

class _Counting(http.server.BaseHTTPRequestHandler):
    """Stands for an internal service: counts every request that reaches it."""

    hits: list[str]

    def _any(self) -> None:
        self.hits.append(f"{self.command} {self.path}")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _any  # noqa: N815

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def internal() -> Iterator[tuple[int, list[str]]]:
    hits: list[str] = []
    handler = type("Internal", (_Counting,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], hits
    server.shutdown()


def ssrf_hosts(port: int) -> list[str]:
    """Every spelling of an address the default policy refuses (with the listener's port
    where the address is loopback, so a miss would be counted)."""
    loop = [f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost.:{port}", f"vm:{port}",
            f"a.localhost:{port}", f"2130706433:{port}", f"0177.0.0.1:{port}",
            f"0x7f.1:{port}", f"127.1:{port}", f"[::1]:{port}", f"[::ffff:127.0.0.1]:{port}",
            f"[::ffff:7f00:1]:{port}", f"0.0.0.0:{port}", f"[::]:{port}"]
    other = ["10.0.0.1", "192.168.1.1", "172.16.0.1", "100.64.0.1", "169.254.169.254",
             "0xa9fea9fe", "[fe80::1]", "[fd00::1]", "[::ffff:10.0.0.1]", "[64:ff9b::a00:1]",
             "[2002:a00:1::]", "224.0.0.1", "metadata.internal"]
    return loop + other


def test_ssrf_forms_never_reach_an_internal_address(strict: Stack,
                                                    internal: tuple[int, list[str]]) -> None:
    """audio_url and webhook_url in every form: a webhook_url is refused at create time
    (nothing could deliver it), an audio_url ends in download_failed with nothing counted,
    and the listener on loopback never sees a request."""
    port, hits = internal
    _, key = strict.new_account()
    hooks = [f"http://127.0.0.1:{port}/hook", f"http://localhost:{port}/hook",
             f"http://[::1]:{port}/hook", f"http://[::ffff:127.0.0.1]:{port}/hook",
             f"http://2130706433:{port}/hook", "http://169.254.169.254/hook",
             f"http://0:{port}/hook"]
    with strict.client(key) as client:
        for hook in hooks:
            resp = client.post("/v1/transcripts", json={
                "audio_url": "https://a.example/x.wav", "webhook_url": hook})
            assert resp.status_code == 400, resp.text
            assert resp.json()["error"]["param"] == "webhook_url", resp.text
        ids = []
        for host in ssrf_hosts(port):
            tid = submit(client, audio_url=f"http://{host}/audio.wav")
            if tid is not None:
                ids.append(tid)
        assert ids, "every form was refused up front; nothing reached the pipeline"
        for tid, body in wait_all(strict, client, ids).items():
            assert body["status"] == "error", body
            assert body["error"]["code"] == "download_failed", body["error"]
        usage = client.get("/v1/account").json()["usage_limit"]
        assert usage["used_seconds"] == 0
    assert hits == [], hits
    print(f"\nSSRF: {len(ssrf_hosts(port))} audio_url forms, {len(hooks)} webhook_url forms "
          f"refused at create, {len(ids)} jobs, 0 requests reached loopback")


# --- decompression bombs and lying headers ----------------------------------------------------

def encode(fmt: str, codec: str, seconds: float, metadata: dict[str, str] | None = None) -> bytes:
    """``seconds`` of 16 kHz mono digital silence in ``fmt``/``codec``."""
    out_buf = io.BytesIO()
    with av.open(out_buf, "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=RATE, layout="mono")
        if metadata:
            out.metadata.update(metadata)
        total = int(seconds * RATE)
        for start in range(0, total, RATE):
            n = min(RATE, total - start)
            frame = av.AudioFrame.from_ndarray(np.zeros((1, n), np.int16), format="s16",
                                               layout="mono")
            frame.sample_rate, frame.pts = RATE, start
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return out_buf.getvalue()


def flac_claiming(samples: int) -> bytes:
    """One second of FLAC whose STREAMINFO says it holds ``samples`` samples."""
    data = bytearray(encode("flac", "flac", 1.0))
    assert data[:4] == b"fLaC"
    field = int.from_bytes(data[18:26], "big")  # rate(20) channels(3) bps(5) total(36)
    field = (field & ~((1 << 36) - 1)) | (samples & ((1 << 36) - 1))
    data[18:26] = field.to_bytes(8, "big")
    return bytes(data)


def wav_claiming(data_bytes: int, real_seconds: float = 1.0) -> bytes:
    """A WAV whose RIFF and data chunk sizes claim ``data_bytes``; it holds far less."""
    pcm = (np.random.default_rng(1).normal(0, 300, int(real_seconds * RATE))
           .astype("<i2").tobytes())
    fmt = struct.pack("<HHIIHH", 1, 1, RATE, RATE * 2, 2, 16)
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFF0) + b"WAVE" + b"fmt " +
            struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", data_bytes) + pcm)


BOMBS: dict[str, tuple[Any, set[str]]] = {
    # name: (builder, acceptable outcomes: "completed" or a job error code)
    # A header that declares more than the limit is refused without decoding (a decision of
    # pipeline/audio.py: a genuine 20 h file is not decoded for 10 h before it fails).
    "flac_claims_20_hours": (lambda: flac_claiming(20 * 3600 * RATE),
                             {"completed", "audio_too_long"}),
    "wav_claims_4_gb": (lambda: wav_claiming(0xFFFFFF00), {"completed"}),
    "flac_4mb_comment_tag": (lambda: encode("flac", "flac", 1.0, {"comment": "x" * (4 << 20)}),
                             {"completed"}),
    "ogg_1mb_title_tag": (lambda: encode("ogg", "libopus", 1.0, {"title": "y" * (1 << 20)}),
                          {"completed", "invalid_audio"}),
    "flac_silence_past_the_limit": (lambda: encode("flac", "flac", 90.0), {"audio_too_long"}),
    "wav_header_only": (lambda: wav_claiming(0xFFFFFF00, real_seconds=0), {"invalid_audio"}),
}


def test_bombs_and_lying_headers_end_with_the_real_duration_or_a_job_error(
        strict: Stack) -> None:
    """Durations come from decoding, never from headers: a file that claims hours is its
    real length; silence beyond the limit stops at the limit (60 s here, 10 h by default)."""
    _, key = strict.new_account()
    with strict.client(key) as client:
        ids: dict[str, str] = {}
        for name, (build, _) in BOMBS.items():
            data = build()
            upload = client.post("/v1/files", content=data,
                                 headers={"Content-Type": "application/octet-stream"})
            assert upload.status_code == 201, (name, upload.text)
            tid = submit(client, file_id=upload.json()["id"], metadata={"bomb": name})
            assert tid is not None
            ids[tid] = name
        started = time.monotonic()
        done = wait_all(strict, client, list(ids), timeout_s=300)
        elapsed = time.monotonic() - started
        counted = 0.0
        for tid, body in done.items():
            name = ids[tid]
            outcome = body["status"] if body["status"] == "completed" else body["error"]["code"]
            assert outcome in BOMBS[name][1], (name, body.get("error"))
            if outcome == "completed":
                assert body["audio_duration"] <= 1.5, (name, body["audio_duration"])
                counted += body["audio_duration"]
        deadline = time.monotonic() + 30
        while True:
            usage = client.get("/v1/account").json()["usage_limit"]
            if usage["reserved_seconds"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert usage["used_seconds"] == pytest.approx(counted, abs=1e-3)
    outcomes = {ids[t]: b["status"] if b["status"] == "completed" else b["error"]["code"]
                for t, b in done.items()}
    print(f"\nbombs: {len(BOMBS)} files, all ended in {elapsed:.1f} s: {outcomes}")


# --- hostile origins: bodies that never end, drip, or never answer ----------------------------

class _Hostile(http.server.BaseHTTPRequestHandler):
    """``/endless`` streams forever (chunked), ``/huge`` declares 6 GB, ``/drip`` sends a
    byte every half second, ``/mute`` never answers. Each stops after ``BOUND_S``."""

    protocol_version = "HTTP/1.1"
    BOUND_S = 60.0

    def do_GET(self) -> None:  # noqa: N802
        until = time.monotonic() + self.BOUND_S
        try:
            if self.path == "/mute":
                while time.monotonic() < until:
                    time.sleep(0.5)
                return
            self.send_response(200)
            if self.path == "/huge":
                self.send_header("Content-Length", str(6 << 30))
            else:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            block = b"\0" * (64 << 10)
            while time.monotonic() < until:
                if self.path == "/drip":
                    self.wfile.write(b"1\r\n\0\r\n")
                    self.wfile.flush()
                    time.sleep(0.5)
                elif self.path == "/huge":
                    self.wfile.write(block)
                else:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass  # the service hung up: that is what is tested

    def log_message(self, *args: Any) -> None:
        pass


def test_endless_dripping_and_mute_origins_end_within_the_limits(lenient: Stack) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    expected = {"/endless": "file_too_large", "/huge": "file_too_large",
                "/drip": "download_failed", "/mute": "download_failed"}
    try:
        _, key = lenient.new_account()
        with lenient.client(key) as client:
            started = time.monotonic()
            ids = {submit(client, audio_url=base + path): path for path in expected}
            done = wait_all(lenient, client, [t for t in ids if t], timeout_s=120)
            elapsed = time.monotonic() - started
            for tid, body in done.items():
                assert body["status"] == "error", body
                assert body["error"]["code"] == expected[ids[tid]], (ids[tid], body["error"])
            assert client.get("/v1/account").json()["usage_limit"]["used_seconds"] == 0
    finally:
        server.shutdown()
    assert elapsed < 90, f"hostile origins held the pipeline for {elapsed:.0f} s"


# --- WebSocket protocol fuzzing ---------------------------------------------------------------

STREAM_CODES = {"invalid_start", "unsupported_language", "unknown_provider",
                "audio_before_ready", "invalid_audio_frame", "invalid_message", "unauthorized",
                "account_disabled", "model_access_denied", "origin_not_allowed",
                "idle_timeout", "quota_unavailable", "realtime_rate_exceeded",
                "frame_too_large", "a5sv2_unavailable", "upstream_unavailable",
                "internal_error"}
CLOSE_CODES = {1000, 1009, 1011, 1013, 4400, 4401, 4403, 4408, 4409}
SERVER_TYPES = {"provider_status", "ready", "transcript", "session_limit", "finished",
                "provider_error", "error", "pong"}
FUZZ_CONNECTIONS = 40
FUZZ_SECONDS = 3.0


def _fuzz_message(rng: random.Random) -> str | bytes:
    kind = rng.randrange(11)
    if kind == 0:
        return rng.randbytes(rng.choice([0, 1, 3, 640, 64 << 10, (64 << 10) + 2]))
    if kind == 1:
        return rng.randbytes(rng.randrange(1, 200)).decode("latin-1")
    if kind == 2:
        return json.dumps({"type": rng.choice(["start", "finish", "ping", "audio", "", None, 7])})
    if kind == 3:
        return json.dumps({"type": "start", rng.choice(["language", "encoding", "sample_rate",
                                                        "channels", "providers", "x"]):
                           rng.choice([None, -1, "fr", "en-US", ["a5sv2", "x"], 8000, {}])})
    if kind == 4:
        return json.dumps({"type": "start", "custom_vocabulary_enabled": True,
                           "custom_vocabulary": [{"text": "w" * rng.choice([1, 101]),
                                                  "strength": rng.choice([0, 13, -1])}] *
                           rng.choice([1, 65])})
    if kind == 5:
        return "[" * rng.choice([10, 10000])
    if kind == 6:
        return json.dumps({"type": "finish"})
    if kind == 7:
        return json.dumps({"type": "ping"})
    if kind == 8:
        return json.dumps([1, 2, 3])
    if kind == 9:
        return "x" * (1 << 20) + "x"  # past the message limit
    return json.dumps({"type": "start"})


async def _fuzz_one(url: str, key: str, rng: random.Random) -> tuple[list[str], int | None]:
    """Send 1 to 5 fuzz messages, read for ``FUZZ_SECONDS``: (what came back, close code).

    The close code is 1006 (no close frame) only where that is the spec's behaviour: after a
    frame over 1 MB ("closes without a message"), or when the client kept sending after
    the server's ``error`` had ended the session.
    """
    kinds: list[str] = []
    oversized = False
    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {key}"},
                                  max_size=None, open_timeout=30) as ws:
        try:
            for _ in range(rng.randrange(1, 6)):
                message = _fuzz_message(rng)
                oversized |= len(message) > 1 << 20
                await ws.send(message)
            deadline = time.monotonic() + FUZZ_SECONDS
            while time.monotonic() < deadline:
                raw = await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic()))
                assert isinstance(raw, str), "the server sent a binary frame"
                msg = json.loads(raw)
                assert msg.get("type") in SERVER_TYPES, msg
                if msg["type"] == "error":
                    assert msg["code"] in STREAM_CODES, msg
                kinds.append(msg["type"] if msg["type"] != "error" else msg["code"])
        except (ConnectionClosed, TimeoutError):
            pass
        if ws.close_code is None:
            await ws.close()
            return kinds, None
        if ws.close_code == 1006:
            assert oversized or any(k in STREAM_CODES for k in kinds), \
                f"the connection dropped without a close frame or an error: {kinds}"
        return kinds, ws.close_code


def test_websocket_fuzz_gets_spec_errors_and_close_codes(stack: Stack) -> None:
    _, key = stack.new_account()
    rng = random.Random(20261121)
    seeds = [rng.randrange(1 << 30) for _ in range(FUZZ_CONNECTIONS)]

    async def go() -> list[tuple[list[str], int | None]]:
        results = []
        for batch in range(0, len(seeds), 5):  # at most 5 at once: the session limit
            results += await asyncio.gather(*(_fuzz_one(stack.ws_url, key, random.Random(s))
                                              for s in seeds[batch:batch + 5]))
        return results

    results = asyncio.run(asyncio.wait_for(go(), 300))
    closes = Counter(code for _, code in results)
    assert set(closes) - {None} <= CLOSE_CODES | {1006}, closes
    assert closes[4400] > 0, closes  # the fuzz did exercise the refusals
    assert httpx.get(stack.url("/health"), timeout=10).status_code == 200
    print(f"\nwebsocket fuzz: {FUZZ_CONNECTIONS} connections; close codes {dict(closes)}; "
          f"messages {dict(Counter(k for ks, _ in results for k in ks))}")
