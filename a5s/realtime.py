"""Live transcription over ``/v1/realtime`` (spec section 6), from a file or your own PCM.

::

    from a5s.realtime import stream

    for msg in stream("call.wav", url="ws://127.0.0.1:8000/v1/realtime", api_key=key):
        if msg.type == "transcript":
            print(("FINAL " if msg.is_final else "      ") + msg.text)

The flow is the spec's: connect (``Authorization: Bearer`` on the handshake), send
``start``, wait for ``ready``, send binary 16 kHz mono s16le frames of ``chunk_ms``
paced in real time, send ``finish``, read until ``finished``. Every server message is
yielded (``provider_status``, ``ready``, ``transcript``, ``session_limit``,
``finished``); an ``error`` message raises :class:`a5s.errors.StreamError` with its
``code``. A ``transcript`` message's ``text`` is the whole transcript so far: display
it in place of the previous one.

``source`` is a path to any audio or video file PyAV can decode (resampled to 16 kHz
mono), or an iterable of raw 16 kHz mono s16le ``bytes`` (from your own capture code;
it is re-cut into ``chunk_ms`` frames). Microphone capture is not built in: the web
playground (``/playground``) streams the browser's microphone.

``astream`` is the async generator; ``stream`` runs it on a private event loop in a
background thread so that frames keep their real-time pace while the caller works.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import tornado.httpclient
import tornado.websocket
from pydantic import BaseModel, ConfigDict

from .errors import StreamError

__all__ = ["stream", "astream", "RealtimeMessage", "pcm_frames", "SAMPLE_RATE"]

SAMPLE_RATE = 16000
BYTES_PER_MS = SAMPLE_RATE * 2 // 1000


class RealtimeMessage(BaseModel):
    """One server message; fields beyond these stay available as attributes."""

    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None
    is_final: bool | None = None
    code: str | None = None
    message: str | None = None


def decode_file(path: str | Path) -> Iterator[bytes]:
    """16 kHz mono s16le PCM of any file PyAV decodes, in decoder-sized pieces (lazy)."""
    import av
    with av.open(str(path)) as container:
        stream = next((s for s in container.streams if s.type == "audio"), None)
        if stream is None:
            raise ValueError(f"{path} has no audio stream")
        resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
        for frame in container.decode(stream):
            for out in resampler.resample(frame):
                yield bytes(out.planes[0])[:out.samples * 2]
        for out in resampler.resample(None):
            yield bytes(out.planes[0])[:out.samples * 2]


def pcm_frames(source: str | Path | Iterable[bytes], chunk_ms: int = 20) -> Iterator[bytes]:
    """``source`` as frames of exactly ``chunk_ms`` (the last one shorter, even length)."""
    size = max(2, chunk_ms * BYTES_PER_MS)
    pieces = decode_file(source) if isinstance(source, (str, Path)) else source
    buf = bytearray()
    for piece in pieces:
        buf += piece
        while len(buf) >= size:
            yield bytes(buf[:size])
            del buf[:size]
    buf = buf[:len(buf) - len(buf) % 2]
    if buf:
        yield bytes(buf)


async def _send_audio(conn: Any, frames: Iterator[bytes], chunk_ms: int,
                      realtime: bool) -> None:
    started = time.monotonic()
    for n, frame in enumerate(frames):
        if realtime:
            due = started + n * chunk_ms / 1000
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        await conn.write_message(frame, binary=True)
    await conn.write_message(json.dumps({"type": "finish"}))


async def astream(source: str | Path | Iterable[bytes], *, url: str, api_key: str,
                  chunk_ms: int = 20, realtime: bool = True, language: str = "en-US",
                  custom_vocabulary: list[dict[str, Any]] | None = None,
                  connect_timeout: float = 30.0) -> AsyncIterator[RealtimeMessage]:
    """Stream ``source`` and yield every server message until ``finished``.

    Args:
        url: ``ws(s)://host/v1/realtime``.
        chunk_ms: frame length; 20 ms (640 bytes) is what the spec recommends.
        realtime: pace frames at the audio's own speed (the service refuses audio sent
            faster than real time beyond a 2-second burst).
        custom_vocabulary: ``[{"text": ..., "strength": 0-12}]``, up to 64 terms.

    Raises:
        StreamError: an ``error`` message arrived, or the socket closed before ``finished``.
    """
    start: dict[str, Any] = {"type": "start", "language": language}
    if custom_vocabulary:
        start |= {"custom_vocabulary_enabled": True, "custom_vocabulary": custom_vocabulary}
    request = tornado.httpclient.HTTPRequest(
        url, headers={"Authorization": f"Bearer {api_key}"}, connect_timeout=connect_timeout)
    try:
        conn = await tornado.websocket.websocket_connect(request)
    except (OSError, tornado.httpclient.HTTPClientError) as exc:
        raise StreamError("connection_failed", f"cannot open {url}: {exc}") from exc
    sender: asyncio.Task[None] | None = None
    reading: asyncio.Future[Any] | None = None
    try:
        await conn.write_message(json.dumps(start))
        while True:
            # Wait for the next message or for the sender to fail (a file that stops
            # decoding): a failed sender is reported at once, not at the idle timeout.
            reading = reading or asyncio.ensure_future(conn.read_message())
            waits: set[asyncio.Future[Any]] = {reading}
            if sender is not None and not sender.done():
                waits.add(sender)
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if sender is not None and sender.done() and not sender.cancelled() \
                    and sender.exception() is not None:
                exc = sender.exception()
                raise StreamError("send_failed", f"cannot send {source}: {exc}") from exc
            if not reading.done():
                continue
            raw, reading = reading.result(), None
            if raw is None:
                raise StreamError("connection_closed", conn.close_reason or
                                  "the service closed the session", conn.close_code)
            if isinstance(raw, bytes):
                continue
            msg = RealtimeMessage.model_validate_json(raw)
            if msg.type == "error":
                raise StreamError(msg.code or "error", msg.message or "", conn.close_code)
            if msg.type == "ready" and sender is None:
                sender = asyncio.ensure_future(
                    _send_audio(conn, pcm_frames(source, chunk_ms), chunk_ms, realtime))
            yield msg
            if msg.type == "finished":
                return
    finally:
        if sender is not None:
            if not sender.done():
                sender.cancel()
            with contextlib.suppress(BaseException):
                await sender  # also retrieves its exception: nothing leaks at exit
        conn.close()
        if reading is not None and not reading.done():
            reading.cancel()


def stream(source: str | Path | Iterable[bytes], *, url: str, api_key: str,
           **options: Any) -> Iterator[RealtimeMessage]:
    """The blocking form of :func:`astream` (same arguments); messages arrive as sent."""
    out: queue.Queue[tuple[str, Any]] = queue.Queue()
    stop = threading.Event()

    async def pump() -> None:
        try:
            async for msg in astream(source, url=url, api_key=api_key, **options):
                out.put(("msg", msg))
                if stop.is_set():
                    return
        except BaseException as exc:  # handed to the caller's thread, raised there
            out.put(("exc", exc))
        else:
            out.put(("end", None))

    thread = threading.Thread(target=lambda: asyncio.run(pump()), name="a5s-realtime",
                              daemon=True)
    thread.start()
    try:
        while True:
            kind, value = out.get()
            if kind == "msg":
                yield value
            elif kind == "exc":
                raise value
            else:
                return
    finally:
        stop.set()
