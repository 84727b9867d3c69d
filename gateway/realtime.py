"""``WSS /v1/realtime``: the socket of a live session (spec sections 3, 6, 7, 8).

A thin handler: the protocol rules and deadlines live in the pure state machine
:class:`~gateway.realtime_session.StreamSession`, the account side (usage left, the
live-session lease, settlement through the accounts agent) in the
:class:`~gateway.realtime_admission.StreamAdmission` injected through ``initialize()``, and
the audio path to the workers in :mod:`gateway.realtime_hub`. What stays here is I/O: auth
after the upgrade, forwarding frames and messages, the timers, and turning every failure
into an ``error`` message and its close code.

Auth happens after the upgrade, so a refused client reads an ``error`` message with
the spec's code (HTTP handshake failures would hide it). The key comes from
``Authorization: Bearer``, or for browsers from the subprotocol ``a5s.key.<key>``
(offered beside ``a5s.v1``, which is echoed) or the ``token`` query parameter.

Audio is gathered into records of ``realtime.batch_ms`` and published to
``realtime-audio``; the worker's transcript messages come back through the hub. When a
worker dies, another takes the session over by replaying its audio from the topic
(:mod:`pipeline.realtime.agent`); meanwhile the client sees a pause, and transcripts that
would show less than it has already seen are held back until the replay catches up.
Neither audio nor transcripts are stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar
from urllib.parse import urlsplit

import tornado.websocket
from pydantic import BaseModel

from schemas import ids
from schemas.api import STREAMING_MODEL
from schemas.errors import (A5sError, AccountDisabled, AccountSuspended, InvalidRequest,
                            ModelAccessDenied, ShuttingDown, StreamError, StreamErrorCode,
                            Unauthorized, UpstreamTimeout, UpstreamUnavailable)
from schemas.realtime import (PROVIDER, Error, Finished, Pong, ProviderError, ProviderStatus,
                              Ready, SessionLimit, TranscriptMessage)
from schemas.records import RealtimeAudio, RealtimeMessage
from security.tokens import bearer_token
from stores.context import Context

from .base import ErrorEnvelope, Principal, principal_for
from .base import admission as request_gate
from .realtime_admission import Admitted, StreamAdmission
from .realtime_hub import RealtimeHub
from .realtime_session import BYTES_PER_MS, Reply, SessionState, StreamSession, language_tag

__all__ = ["StreamSocket", "SUBPROTOCOL", "KEY_SUBPROTOCOL", "stream_error", "language_tag"]

log = logging.getLogger("a5s.gateway.realtime")

T = TypeVar("T")

SUBPROTOCOL = "a5s.v1"
KEY_SUBPROTOCOL = "a5s.key."
WATCH_INTERVAL_S = 0.2
REOPEN_INTERVAL_S = 2.0
"""The opening record is repeated this often until a worker answers it."""
Code = StreamErrorCode
State = SessionState


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


class StreamSocket(ErrorEnvelope, tornado.websocket.WebSocketHandler):
    """One live session. Dependencies come from the route table (``make_app``)."""

    def initialize(self, ctx: Context, hub: RealtimeHub,
                   admission: StreamAdmission | None = None) -> None:
        self.ctx = ctx
        self.hub = hub
        self.admission = admission or StreamAdmission(ctx)
        self.opts = ctx.settings.realtime
        self.session_id = ids.session_id()
        self.session = StreamSession(self.opts, time.monotonic())
        self.principal: Principal | None = None
        self.admitted: Admitted | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self.opened = self.settled = self.final_pending = self.released = False
        self.used_ms = 0
        self.buffer = bytearray()
        self.buffer_since = 0.0
        self.worker_ready = asyncio.Event()
        self.worker_done = asyncio.Event()
        self.audio_ready = asyncio.Event()
        self.lease_at = 0.0
        self.origin: int | None = None
        """Offset of the session's opening record, for a worker that takes it over."""
        self.unacked: deque[tuple[RealtimeAudio, asyncio.Future[int]]] = deque()
        """Audio records handed to the producer, oldest first, not yet acknowledged."""
        self.forwarding = asyncio.Lock()
        """Held while records are handed to the producer, so a resend keeps them in order."""

    @property
    def state(self) -> SessionState:
        return self.session.state

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
            gate = request_gate(self.ctx)
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
        if self.state is State.closed:
            return
        now = time.monotonic()
        try:
            if isinstance(message, bytes):
                self._on_audio(message, now)
            elif self.state is State.connected and self.principal is None:
                self.session.last_message = now  # still authenticating: the refusal is coming
            else:
                self._on_text(message, now)
        except StreamError as exc:
            self._fail(exc)

    def on_close(self) -> None:
        self.session.close()
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
        token = bearer_token(self.request.headers.get("Authorization"))
        if token:
            return token
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

    def _on_text(self, text: str, now: float) -> None:
        reply = self.session.text(text, now)
        if reply is Reply.start:
            self._spawn(self._start())
        elif reply is Reply.pong:
            self._write(Pong())
        elif reply is Reply.finish:
            self._spawn(self._finish())

    def _on_audio(self, frame: bytes, now: float) -> None:
        accepted = self.session.audio(frame, now)
        if accepted.pcm:
            if not self.buffer:
                self.buffer_since = now
            self.buffer += accepted.pcm
            self.audio_ready.set()
        if accepted.limit_reached:
            self._spawn(self._finish(limit_reached=True))

    # --- worker messages (called by the hub) --------------------------------------------------

    def _on_worker(self, message: RealtimeMessage) -> None:
        self.session.acknowledged(message.seq)
        if message.type == "provider_error":
            # Before its first word the worker refused to open the session (full, or behind).
            said = ("The recognizer failed; start a new session." if self.worker_ready.is_set()
                    else "No recognizer can take the session now; retry shortly.")
            self._fail(StreamError(Code.a5sv2_unavailable, said),
                       provider=message.text or "recognition failed")
            return
        self.worker_ready.set()
        if message.replaying:
            self.session.worker_replaying()
        if message.type == "transcript" and self.state in (State.ready, State.finishing):
            if self.session.show(message.text, message.is_final):
                self._write(TranscriptMessage(text=message.text, is_final=message.is_final))
        elif message.type == "finished":
            held = self.session.release_held()   # the closing text, even if shorter
            if held is not None:
                self._write(TranscriptMessage(text=held[0], is_final=held[1]))
            self.worker_done.set()

    # --- session steps ------------------------------------------------------------------------

    async def _start(self) -> None:
        assert self.principal is not None
        self.admitted = admitted = await self.admission.admit(self.principal, self.session_id)
        self.lease_at = time.monotonic()
        self.used_ms = admitted.used_ms
        self._write(ProviderStatus(message=f"Starting the {PROVIDER} recognizer."))
        await self.hub.start()
        self.hub.attach(self.session_id, self._on_worker)
        await self._open_on_worker(self.session.vocabulary)
        if not self.session.ready(admitted.limit_ms, time.monotonic()):
            return
        # After ``ready``: a ready session is always settled, which frees what this holds.
        await self.admission.opened(self.principal, self.session_id, admitted.limit_ms)
        self._spawn(self._pump())
        self._write(Ready(session_limit_ms=admitted.limit_ms, quota_ms=admitted.quota_ms,
                          used_ms=admitted.used_ms, language=self.session.language))
        if self.session.finish_requested:
            await self._finish()

    async def _open_on_worker(self, vocabulary: list[tuple[str, int]] | None) -> None:
        record = RealtimeAudio(session_id=self.session_id, seq=0, gateway_id=self.hub.gateway_id,
                               vocabulary=vocabulary)
        deadline = time.monotonic() + self.opts.provider_start_timeout_s
        said = time.monotonic()
        while not self.worker_ready.is_set():
            if time.monotonic() > deadline:
                raise StreamError(Code.a5sv2_unavailable, "No recognizer is available; retry "
                                  "with backoff.")
            offset = await self._send(record)
            if record.origin is None:
                record = record.model_copy(update={"origin": offset})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.worker_ready.wait(), REOPEN_INTERVAL_S)
            if not self.worker_ready.is_set() and time.monotonic() - said > 5:
                said = time.monotonic()
                self._write(ProviderStatus(message="Waiting for recognizer capacity; this can "
                                           "take up to a minute after a quiet period."))
        self.origin = record.origin
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
            record = RealtimeAudio(session_id=self.session_id, seq=self.session.next_seq(),
                                   gateway_id=self.hub.gateway_id, pcm=pcm, final=final,
                                   origin=self.origin)
            self.session.sent(record, time.monotonic())
            async with self.forwarding:
                await self._forward(record)
            if final:
                async with self.forwarding:
                    while self.unacked:
                        await self._settle_oldest()
                return

    async def _forward(self, record: RealtimeAudio) -> None:
        """Publish a record without waiting for the acknowledgement of those before it (it
        cost the next record 10 ms, median, and 65-74 ms at p95 under load). The producer
        keeps a session's records in order and retries a failed request before the
        records behind it; acknowledgements are checked here as they come."""
        self.unacked.append((record, await self._patiently(lambda: self.hub.enqueue(record))))
        while self.unacked and self.unacked[0][1].done():
            await self._settle_oldest()

    async def _resend(self, first: int) -> None:
        """Publish again, in order, the unacknowledged records from ``first`` on: the worker
        lacks ``first`` (a broker that lost an acknowledged record) and drops what it has."""
        async with self.forwarding:
            records = self.session.unacknowledged(first)
            if records:
                log.info("realtime: session %s: records %d-%d not acknowledged by the worker "
                         "for %g s; published again", self.session_id, records[0].seq,
                         records[-1].seq, self.opts.resend_after_s)
            for record in records:
                await self._forward(record)

    async def _settle_oldest(self) -> None:
        """Wait for the oldest record's acknowledgement. When the producer gave it up (the
        broker away longer than its retries), it and every record after it are published
        again, in order and each awaited, as while the broker restarts (``_send``)."""
        try:
            await self.unacked[0][1]
        except (UpstreamUnavailable, UpstreamTimeout):
            records = [record for record, _ in self.unacked]
            await asyncio.gather(*(ack for _, ack in self.unacked), return_exceptions=True)
            self.unacked.clear()
            for record in records:
                await self._send(record)
            return
        self.unacked.popleft()

    async def _send(self, record: RealtimeAudio) -> int:
        """Publish a record and wait for its acknowledgement."""
        return await self._patiently(lambda: self.hub.send(record))

    async def _patiently(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, again while the broker is away (restarting after a worker died), for
        up to ``stall_timeout_s``: the client sees a pause, not an error."""
        deadline = time.monotonic() + self.opts.stall_timeout_s
        while True:
            try:
                return await call()
            except (UpstreamUnavailable, UpstreamTimeout):
                if time.monotonic() > deadline or self.state is State.closed:
                    raise
                await asyncio.sleep(0.5)

    async def _finish(self, limit_reached: bool = False, idle: StreamError | None = None) -> None:
        """End the session after its last transcript: the worker decodes every word of the
        audio received (the last record says ``final``) and sends the whole transcript, final,
        before ``finished``; then ``finished`` and close 1000, or for an ``idle`` session (its
        ``finishing`` state already begun) the ``idle_timeout`` error and its close."""
        if idle is None and not self.session.begin_finish():
            return
        if limit_reached:
            self._write(SessionLimit(message=f"The session reached its limit of "
                                     f"{self.session.limit_ms} ms of audio."))
        self.final_pending = True
        self.audio_ready.set()
        try:
            await asyncio.wait_for(self.worker_done.wait(), self.opts.finish_timeout_s)
        except TimeoutError:
            raise idle or StreamError(Code.a5sv2_unavailable,
                                      "The recognizer did not finish in time.") from None
        if idle is not None:
            self._fail(idle)
            return
        billed_ms, used_ms = await self._settle()
        if self.state is not State.finishing:
            return
        assert self.admitted is not None
        # the place is free before the client hears ``finished``: a client that opens its
        # next session on that word must not be refused as if this one were still live
        await self._release()
        self._write(Finished(audio_ms=int(self.session.audio_ms), billed_ms=billed_ms,
                             used_ms=used_ms, quota_ms=self.admitted.quota_ms))
        self.session.close()
        self.close(1000)

    async def _settle(self) -> tuple[int, int]:
        """Count the session's usage once: billed ms and the account's usage after it."""
        assert self.principal is not None
        billed = self.session.billed_ms
        if not self.settled:
            self.settled = True
            self.used_ms = await self.admission.settle(
                self.principal, self.session_id, int(self.session.audio_ms), billed)
        return billed, self.used_ms

    async def _watch(self) -> None:
        """Deadlines (from the state machine) and the live-session lease."""
        while self.state is not State.closed:
            await asyncio.sleep(WATCH_INTERVAL_S)
            now = time.monotonic()
            first = self.session.resend_due(now)
            if first is not None:
                self._spawn(self._resend(first))
            error = self.session.overdue(now)
            if error is not None and error.code is Code.idle_timeout and \
                    self.session.begin_finish():
                # the words of the audio received are shown before the error
                self._spawn(self._finish(idle=error))
            elif error is not None:
                stalled = error.code is Code.a5sv2_unavailable
                self._fail(error, provider="The recognizer stopped answering." if stalled
                           else None)
            if self.admitted is not None and self.state is not State.closed and \
                    now - self.lease_at > self.opts.lease_ttl_s / 3:
                self.lease_at = now
                assert self.principal is not None
                await self.admission.renew(self.principal, self.session_id)

    async def _cleanup(self) -> None:
        """After the socket closed, however it closed: free the worker, count, release."""
        if self.opened and not self.final_pending:
            self.final_pending = True  # the worker frees the session at once
            self.audio_ready.set()
            if not self._pumping():
                self._spawn(self._pump(), keep=True)
        try:
            if self.session.was_ready and not self.settled:
                await self._settle()
        except Exception as exc:  # the client is gone; operators must see the lost count
            log.error("realtime: usage of session %s not recorded: %r", self.session_id, exc)
        finally:
            await self._release()
            await asyncio.sleep(self.opts.batch_ms / 1000 + 1)  # let the last record go out
            self.hub.detach(self.session_id)
            request_gate(self.ctx).sessions.pop(self, None)
            for task in list(self.tasks):
                if task is not asyncio.current_task() and not getattr(task, "a5s_keep", False):
                    task.cancel()

    async def _release(self) -> None:
        """Free the session's live-session place, once."""
        if self.admitted is not None and not self.released:
            self.released = True
            assert self.principal is not None
            await self.admission.release(self.principal, self.session_id)

    def _pumping(self) -> bool:
        return any(t.get_name() == "pump" and not t.done() for t in self.tasks)

    # --- rendering (the one place errors become messages) -------------------------------------

    def _write(self, message: BaseModel) -> None:
        with contextlib.suppress(tornado.websocket.WebSocketClosedError):
            self.write_message(message.model_dump_json())

    def _fail(self, exc: BaseException, provider: str | None = None) -> None:
        """End the session: ``provider_error`` (if any), ``error``, then the close code."""
        if not self.session.close():
            return
        error = stream_error(exc)
        if error.code is Code.internal_error:
            log.error("realtime: session %s failed: %r", self.session_id, exc,
                      exc_info=exc if not isinstance(exc, StreamError) else None)
        elif isinstance(exc, A5sError) and exc.log:
            log.warning("realtime: session %s: %s", self.session_id, exc.log)
        if provider is not None:
            self._write(ProviderError(message=provider))
        self._write(Error(code=error.code.value, message=error.message))
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
