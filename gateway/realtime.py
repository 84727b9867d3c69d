"""``WSS /v1/realtime``: live streaming of ``a5s-v2-streaming`` (spec sections 3, 6, 7, 8).

One :class:`StreamSocket` per connection walks the session states::

    connected ──start──► starting ──worker took it──► ready ──finish / limit──► finishing ──► closed
        any state ──error──► closed (``error`` message, then the code's close code)

Auth happens after the upgrade, so a refused client reads an ``error`` message with
the spec's code (HTTP handshake failures would hide it). The key comes from
``Authorization: Bearer``, or for browsers from the subprotocol ``a5s.key.<key>``
(offered beside ``a5s.v1``, which is echoed) or the ``token`` query parameter.

Audio travels as described in :mod:`gateway.realtime_hub`: frames are gathered into
records of ``realtime.batch_ms`` and published to ``realtime-audio``; the worker's
transcript messages come back through the hub and are forwarded as they arrive. The
watchdog ends sessions that miss the start deadline, go idle, or whose worker stops
answering (``provider_error`` then ``a5sv2_unavailable``), and renews the live-session
lease in Redis that enforces the per-account limit across gateway replicas.

Usage is the audio received, capped by the session limit; it is counted once per
session id by the accounts agent (``SessionClosed``) and recorded as a ``stream`` usage
event. Neither audio nor transcripts are stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import tornado.websocket
from pydantic import BaseModel, ValidationError

from schemas import ids
from schemas.api import ENGLISH_VARIANTS, STREAMING_MODEL
from schemas.errors import (A5sError, AccountDisabled, AccountSuspended, InvalidRequest,
                            ModelAccessDenied, ShuttingDown, StreamError, StreamErrorCode,
                            Unauthorized, UpstreamTimeout, UpstreamUnavailable)
from schemas.realtime import (CLIENT_MESSAGES, PROVIDER, Error, Finish, Finished, Ping, Pong,
                              ProviderError, ProviderStatus, Ready, SessionLimit, Start,
                              TranscriptMessage)
from schemas.records import RealtimeAudio, RealtimeMessage, SessionClosed, SessionOpened
from schemas.rows import UsageEventRow
from stores.context import Context
from stores.transcripts import Transcripts
from topologies.topics import ACCOUNT_EVENTS

from .base import ErrorEnvelope, Principal, admission, principal_for, validation_param
from .realtime_hub import RealtimeHub

__all__ = ["StreamSocket", "SUBPROTOCOL", "KEY_SUBPROTOCOL", "stream_error", "language_tag"]

log = logging.getLogger("a5s.gateway.realtime")

SUBPROTOCOL = "a5s.v1"
KEY_SUBPROTOCOL = "a5s.key."
BYTES_PER_MS = 32
"""16 kHz, 16-bit mono."""
RATE_SLACK_MS = 100
"""Jitter allowed beyond the burst (it also lets a single 64 KB frame, 2048 ms, through)."""
WATCH_INTERVAL_S = 0.2
REOPEN_INTERVAL_S = 2.0
"""The opening record is repeated this often until a worker answers it."""
Code = StreamErrorCode


def stream_error(exc: BaseException) -> StreamError:
    """The streaming error for any failure (the REST errors mapped to their codes)."""
    if isinstance(exc, StreamError):
        return exc
    if isinstance(exc, Unauthorized):
        return StreamError(Code.unauthorized, exc.message)
    if isinstance(exc, AccountDisabled):
        return StreamError(Code.account_disabled, exc.message)
    if isinstance(exc, AccountSuspended):
        return StreamError(Code.account_suspended, exc.message)
    if isinstance(exc, ModelAccessDenied):
        return StreamError(Code.model_access_denied, exc.message)
    if isinstance(exc, ShuttingDown):
        return StreamError(Code.upstream_unavailable, exc.message)
    if isinstance(exc, (UpstreamUnavailable, UpstreamTimeout)):
        return StreamError(Code.upstream_unavailable, "A backing service is unavailable; "
                           "retry with backoff.")
    return StreamError(Code.internal_error, "The server failed; retry with backoff.")


def _message_problem(exc: ValidationError) -> str:
    """What is wrong with a client message, in the protocol's words (not pydantic's)."""
    kind = exc.errors(include_url=False)[0].get("type")
    if kind == "union_tag_invalid":
        return "unknown message type (start, ping and finish are the messages)"
    if kind == "union_tag_not_found":
        return "a message needs a type"
    return validation_param(exc)[1].rstrip(".").replace(" start.", " ", 1).replace(
        "'start.", "'", 1)


def language_tag(value: str) -> str:
    """``en-us`` → ``en-US``; raises ``unsupported_language`` for anything not English."""
    key = value.strip().lower().replace("_", "-")
    if key not in ENGLISH_VARIANTS:
        raise StreamError(Code.unsupported_language, f"Language {value!r} is not supported; "
                          "use en or a variant such as en-US or en-GB.")
    lang, _, region = key.partition("-")
    return f"{lang}-{region.upper()}" if region else lang


class StreamSocket(ErrorEnvelope, tornado.websocket.WebSocketHandler):
    """One live session. Dependencies come from the route table (``make_app``)."""

    def initialize(self, ctx: Context, hub: RealtimeHub) -> None:
        self.ctx = ctx
        self.hub = hub
        self.opts = ctx.settings.realtime
        self.session_id = ids.session_id()
        self.state = "connected"
        self.principal: Principal | None = None
        self.connected_at = self.last_message = time.monotonic()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.language = "en-US"
        self.leased = self.opened = self.was_ready = self.settled = False
        self.limit_ms = self.quota_ms = self.used_ms = 0
        self.audio_ms = 0.0
        self.tokens_ms = 0.0
        self.tokens_at = 0.0
        self.buffer = bytearray()
        self.buffer_since = 0.0
        self.final_pending = self.finish_requested = False
        self.seq = 0
        self.unacked: deque[tuple[int, float]] = deque()
        self.worker_ready = asyncio.Event()
        self.worker_done = asyncio.Event()
        self.audio_ready = asyncio.Event()
        self.lease_at = 0.0

    # --- tornado hooks ------------------------------------------------------------------------

    async def get(self, *args: Any, **kwargs: Any) -> None:
        if self.request.headers.get("Upgrade", "").lower() != "websocket":
            raise InvalidRequest("This is the streaming endpoint: open a WebSocket "
                                 "(Upgrade: websocket), see docs/realtime.md.", param="Upgrade")
        await super().get(*args, **kwargs)

    def check_origin(self, origin: str) -> bool:
        return True  # checked after the upgrade, so the client reads origin_not_allowed

    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        return SUBPROTOCOL if SUBPROTOCOL in subprotocols else None

    def get_compression_options(self) -> dict[str, Any] | None:
        return None  # PCM does not compress; deflate would only cost CPU

    @property
    def max_message_size(self) -> int:
        return self.opts.max_message_bytes  # larger: tornado closes (1009) with no message

    def _request_summary(self) -> str:
        return f"{self.request.method} {self.request.path} ({self.request.remote_ip})"  # no ?token=

    async def open(self, *args: Any, **kwargs: Any) -> None:
        self._spawn(self._watch())
        try:
            gate = admission(self.ctx)
            if gate.draining:
                raise ShuttingDown()
            # stopping ends this session with upstream_unavailable and 1013, then waits for
            # its usage to be counted (``_cleanup``)
            gate.sessions[self] = lambda: self._fail(ShuttingDown())
            self._check_origin()
            self.principal = await self._authenticate()
        except Exception as exc:  # every refusal is an error message and a close code
            self._fail(exc)

    def on_message(self, message: str | bytes) -> None:
        if self.state == "closed":
            return
        self.last_message = time.monotonic()
        try:
            if isinstance(message, bytes):
                self._on_audio(message)
            else:
                self._on_text(message)
        except StreamError as exc:
            self._fail(exc)

    def on_close(self) -> None:
        if self.state != "closed":
            self.state = "closed"
        self._spawn(self._cleanup(), keep=True)

    # --- auth ---------------------------------------------------------------------------------

    def _check_origin(self) -> None:
        origin = self.request.headers.get("Origin")
        if origin is None:
            return  # not a browser
        allowed = self.opts.allowed_origins
        host = self.request.headers.get("Host", "").lower()
        if "*" in allowed or origin in allowed or urlsplit(origin).netloc.lower() == host:
            return
        raise StreamError(Code.origin_not_allowed, f"Origin {origin!r} is not allowed.")

    def _bearer(self) -> str | None:
        scheme, _, token = self.request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        for item in self.request.headers.get("Sec-WebSocket-Protocol", "").split(","):
            if item.strip().startswith(KEY_SUBPROTOCOL):
                return item.strip()[len(KEY_SUBPROTOCOL):]
        return self.get_query_argument("token", None)

    async def _authenticate(self) -> Principal:
        principal = await principal_for(self.ctx, self._bearer())
        if not principal.account.streaming_enabled:
            raise ModelAccessDenied(f"This account has no access to {STREAMING_MODEL}.")
        return principal

    # --- client messages ----------------------------------------------------------------------

    def _on_text(self, text: str) -> None:
        try:
            message = CLIENT_MESSAGES.validate_python(json.loads(text))
        except ValidationError as exc:  # before ValueError, which it is too
            message, detail = None, _message_problem(exc)
        except (ValueError, RecursionError) as exc:  # "[[[[..." nests too deep
            message = None
            detail = f"not JSON ({str(exc).splitlines()[0][:200]})"
        if self.state == "connected":
            if not isinstance(message, Start):
                raise StreamError(Code.invalid_start, "The first message must be a valid "
                                  "start message" + (f": {detail}." if message is None else "."))
            self._on_start(message)
        elif isinstance(message, Ping):
            self._write(Pong())
        elif isinstance(message, Finish):
            if self.state == "ready":
                self._spawn(self._finish(limit_reached=False))
            # during start-up it is served once ready; while finishing it is a repeat
            elif self.state == "starting":
                self.finish_requested = True
        else:
            raise StreamError(Code.invalid_message, "Only ping and finish messages may follow "
                              "start; audio goes in binary frames.")

    def _on_start(self, start: Start) -> None:
        if self.principal is None:
            return  # still authenticating: the refusal is on its way
        self.language = language_tag(start.language)
        unknown = [p for p in start.providers if p != PROVIDER]
        if unknown or not start.providers:
            raise StreamError(Code.unknown_provider, f"Unknown provider {unknown[0]!r}; the "
                              f"only provider is {PROVIDER}." if unknown else
                              f"No provider named; the only provider is {PROVIDER}.")
        self.state = "starting"
        vocabulary = ([(t.text, t.strength) for t in start.custom_vocabulary]
                      if start.custom_vocabulary_enabled else None)
        self._spawn(self._start(vocabulary))

    def _on_audio(self, frame: bytes) -> None:
        if self.state != "ready":
            if self.state == "finishing":
                return  # audio after finish or the limit is not transcribed nor counted
            raise StreamError(Code.audio_before_ready, "Send audio only after the ready message.")
        size = len(frame)
        if size > self.opts.max_frame_bytes:
            raise StreamError(Code.frame_too_large, f"Audio frames are at most "
                              f"{self.opts.max_frame_bytes} bytes; this one had {size}.")
        if size == 0 or size % 2:
            raise StreamError(Code.invalid_audio_frame, "Audio frames must hold whole 16-bit "
                              f"samples: {size} bytes is {'empty' if not size else 'odd'}.")
        now = time.monotonic()
        self.tokens_ms = min(self.opts.burst_ms, self.tokens_ms + (now - self.tokens_at) * 1000)
        self.tokens_at = now
        self.tokens_ms -= size / BYTES_PER_MS
        if self.tokens_ms < -RATE_SLACK_MS:
            raise StreamError(Code.realtime_rate_exceeded, "Audio is arriving faster than real "
                              f"time (beyond a {self.opts.burst_ms} ms burst).")
        left = int(self.limit_ms - self.audio_ms) * BYTES_PER_MS
        if size >= left:
            frame = frame[:left]
        if not self.buffer:
            self.buffer_since = now
        self.buffer += frame
        self.audio_ms += len(frame) / BYTES_PER_MS
        self.audio_ready.set()
        if size >= left:
            self._spawn(self._finish(limit_reached=True))

    # --- worker messages (called by the hub) --------------------------------------------------

    def _on_worker(self, message: RealtimeMessage) -> None:
        while self.unacked and self.unacked[0][0] <= message.seq:
            self.unacked.popleft()
        if message.type == "provider_error":
            self._fail(StreamError(Code.a5sv2_unavailable, "The recognizer failed; start a new "
                                   "session."), provider=message.text or "recognition failed")
            return
        self.worker_ready.set()
        if message.type == "transcript" and self.state in ("ready", "finishing"):
            self._write(TranscriptMessage(text=message.text, is_final=message.is_final))
        elif message.type == "finished":
            self.worker_done.set()

    # --- session steps ------------------------------------------------------------------------

    async def _start(self, vocabulary: list[tuple[str, int]] | None) -> None:
        assert self.principal is not None
        account = self.principal.account
        ledger = await self.ctx.redis.ledger(account.id)
        self.quota_ms = int(account.usage_limit_seconds * 1000)
        self.used_ms = int(float(ledger["used"]) * 1000)
        remaining = self.quota_ms - self.used_ms - int(float(ledger["reserved"]) * 1000)
        if remaining <= 0:
            raise StreamError(Code.quota_unavailable, "The account's usage limit is used up.")
        if not await self.ctx.redis.lease_session(account.id, self.session_id,
                                                  account.max_concurrent_sessions,
                                                  self.opts.lease_ttl_s):
            raise StreamError(Code.quota_unavailable, f"At most {account.max_concurrent_sessions}"
                              " streaming sessions may be live at once.")
        self.leased, self.lease_at = True, time.monotonic()
        self.ctx.metrics.live_sessions.inc()
        self.limit_ms = int(min(account.max_session_seconds * 1000,
                                self.opts.max_session_s * 1000, remaining))
        self._write(ProviderStatus(message=f"Starting the {PROVIDER} recognizer."))
        await self.hub.start()
        self.hub.attach(self.session_id, self._on_worker)
        await self._open_on_worker(vocabulary)
        await self.ctx.producer.send(ACCOUNT_EVENTS, account.id, SessionOpened(
            account_id=account.id, session_id=self.session_id, at=datetime.now(UTC)))
        if self.state != "starting":
            return
        self.state, self.was_ready = "ready", True
        self.tokens_ms, self.tokens_at = float(self.opts.burst_ms), time.monotonic()
        self.last_message = time.monotonic()
        self._spawn(self._pump())
        self._write(Ready(session_limit_ms=self.limit_ms, quota_ms=self.quota_ms,
                          used_ms=self.used_ms, language=self.language))
        if self.finish_requested:
            await self._finish(limit_reached=False)

    async def _open_on_worker(self, vocabulary: list[tuple[str, int]] | None) -> None:
        record = RealtimeAudio(session_id=self.session_id, seq=0, gateway_id=self.hub.gateway_id,
                               vocabulary=vocabulary)
        deadline = time.monotonic() + self.opts.provider_start_timeout_s
        said = time.monotonic()
        while not self.worker_ready.is_set():
            if time.monotonic() > deadline:
                raise StreamError(Code.a5sv2_unavailable, "No recognizer is available; retry "
                                  "with backoff.")
            await self.hub.send(record)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.worker_ready.wait(), REOPEN_INTERVAL_S)
            if not self.worker_ready.is_set() and time.monotonic() - said > 5:
                said = time.monotonic()
                self._write(ProviderStatus(message="Waiting for recognizer capacity; this can "
                                           "take up to a minute after a quiet period."))
        self.opened = True

    async def _pump(self) -> None:
        """Forward the buffered audio in order, a record per ``batch_ms`` of audio or time."""
        batch_bytes = self.opts.batch_ms * BYTES_PER_MS
        while True:
            if not self.buffer and not self.final_pending:
                self.audio_ready.clear()
                await self.audio_ready.wait()
                continue
            wait = self.buffer_since + self.opts.batch_ms / 1000 - time.monotonic()
            if len(self.buffer) < batch_bytes and not self.final_pending and wait > 0:
                self.audio_ready.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.audio_ready.wait(), wait)
                continue
            pcm, self.buffer = bytes(self.buffer), bytearray()
            final = self.final_pending
            self.seq += 1
            self.unacked.append((self.seq, time.monotonic()))
            await self.hub.send(RealtimeAudio(session_id=self.session_id, seq=self.seq,
                                              gateway_id=self.hub.gateway_id, pcm=pcm,
                                              final=final))
            if final:
                return

    async def _finish(self, limit_reached: bool) -> None:
        if self.state != "ready":
            return
        self.state = "finishing"
        if limit_reached:
            self._write(SessionLimit(message=f"The session reached its limit of "
                                     f"{self.limit_ms} ms of audio."))
        self.final_pending = True
        self.audio_ready.set()
        try:
            await asyncio.wait_for(self.worker_done.wait(), self.opts.finish_timeout_s)
        except TimeoutError:
            raise StreamError(Code.a5sv2_unavailable, "The recognizer did not finish in time.")
        billed_ms, used_ms = await self._settle()
        if self.state != "finishing":
            return
        self._write(Finished(audio_ms=int(self.audio_ms), billed_ms=billed_ms,
                             used_ms=used_ms, quota_ms=self.quota_ms))
        self.state = "closed"
        self.close(1000)

    async def _settle(self) -> tuple[int, int]:
        """Count the session's usage once: billed ms and the account's usage after it."""
        assert self.principal is not None
        billed = int(min(self.audio_ms, self.limit_ms))
        if self.settled:
            return billed, self.used_ms
        self.settled = True
        account, key = self.principal.account, self.principal.key
        # The agent cannot have counted this session before it is published.
        used_before = float((await self.ctx.redis.ledger(account.id))["used"])
        now = datetime.now(UTC)
        await self.ctx.producer.send(ACCOUNT_EVENTS, account.id, SessionClosed(
            account_id=account.id, session_id=self.session_id, key_id=key.key_id,
            audio_ms=int(self.audio_ms), billed_ms=billed, at=now))
        await Transcripts(self.ctx.ch).record_usage(UsageEventRow(
            event_id=self.session_id, account_id=account.id, key_id=key.key_id,
            model=STREAMING_MODEL, kind="stream", at=now, audio_seconds=billed / 1000))
        self.used_ms = int(used_before * 1000) + billed
        return billed, self.used_ms

    async def _watch(self) -> None:
        """Deadlines: start, idle, a silent worker; and the live-session lease."""
        while self.state != "closed":
            await asyncio.sleep(WATCH_INTERVAL_S)
            now = time.monotonic()
            if self.state == "connected" and now - self.connected_at > self.opts.start_timeout_s:
                self._fail(StreamError(Code.invalid_start, "No start message within "
                                       f"{self.opts.start_timeout_s:g} s of connecting."))
            elif self.state == "ready" and now - self.last_message > self.opts.idle_timeout_s:
                self._fail(StreamError(Code.idle_timeout, "No message for "
                                       f"{self.opts.idle_timeout_s:g} s."))
            elif self.unacked and now - self.unacked[0][1] > self.opts.stall_timeout_s:
                self._fail(StreamError(Code.a5sv2_unavailable, "The recognizer stopped "
                                       "answering; start a new session."),
                           provider="The recognizer stopped answering.")
            if self.leased and self.state != "closed" and \
                    now - self.lease_at > self.opts.lease_ttl_s / 3:
                self.lease_at = now
                assert self.principal is not None
                with contextlib.suppress(A5sError):  # a Redis blip: the next renewal retries
                    await self.ctx.redis.lease_session(
                        self.principal.account.id, self.session_id,
                        self.principal.account.max_concurrent_sessions, self.opts.lease_ttl_s)

    async def _cleanup(self) -> None:
        """After the socket closed, however it closed: free the worker, count, release."""
        if self.opened and not self.final_pending:
            self.final_pending = True  # the worker frees the session at once
            self.audio_ready.set()
            if not self._pumping():
                self._spawn(self._pump(), keep=True)
        try:
            if self.was_ready and not self.settled:
                await self._settle()
        except Exception as exc:  # the client is gone; operators must see the lost count
            log.error("realtime: usage of session %s not recorded: %r", self.session_id, exc)
        finally:
            if self.leased:
                self.ctx.metrics.live_sessions.dec()
                with contextlib.suppress(Exception):
                    await self.ctx.redis.release_session(self.principal.account.id,  # type: ignore[union-attr]
                                                         self.session_id)
            await asyncio.sleep(self.opts.batch_ms / 1000 + 1)  # let the last record go out
            self.hub.detach(self.session_id)
            admission(self.ctx).sessions.pop(self, None)
            for task in list(self.tasks):
                if task is not asyncio.current_task() and not getattr(task, "a5s_keep", False):
                    task.cancel()

    def _pumping(self) -> bool:
        return any(t.get_name() == "pump" and not t.done() for t in self.tasks)

    # --- rendering (the one place errors become messages) -------------------------------------

    def _write(self, message: BaseModel) -> None:
        with contextlib.suppress(tornado.websocket.WebSocketClosedError):
            self.write_message(message.model_dump_json())

    def _send_error(self, exc: StreamError) -> None:
        self._write(Error(code=exc.code.value, message=exc.message))

    def _fail(self, exc: BaseException, provider: str | None = None) -> None:
        """End the session: ``provider_error`` (if any), ``error``, then the close code."""
        if self.state == "closed":
            return
        error = stream_error(exc)
        if error.code is Code.internal_error:
            log.error("realtime: session %s failed: %r", self.session_id, exc,
                      exc_info=exc if not isinstance(exc, StreamError) else None)
        elif isinstance(exc, A5sError) and exc.log:
            log.warning("realtime: session %s: %s", self.session_id, exc.log)
        self.state = "closed"
        if provider is not None:
            self._write(ProviderError(message=provider))
        self._send_error(error)
        self.close(error.close_code, error.code.value)

    def _spawn(self, coro: Coroutine[Any, Any, Any], keep: bool = False) -> None:
        name = coro.__name__.lstrip("_")
        task = asyncio.create_task(self._guard(coro), name=name)
        task.a5s_keep = keep  # type: ignore[attr-defined]
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _guard(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # rendered once, by _fail
            self._fail(exc)
