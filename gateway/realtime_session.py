"""The streaming protocol of one live session as a pure state machine (spec sections 3, 6, 7).

No socket, no Kafka, no clock of its own: the socket handler (:mod:`gateway.realtime`)
feeds it client messages and the time, and acts on what it returns. Every protocol rule
that needs no network lives here, so it is tested without one::

    connected ──start──► starting ──ready()──► ready ──finish / limit──► finishing ──► closed
        any state ──error──► closed

Rules kept here: the first message must be a valid ``start`` (within ``start_timeout_s``);
English only, ``a5sv2`` only; only ``ping`` and ``finish`` follow; audio only once ready,
in non-empty, even frames of at most ``max_frame_bytes``, no faster than real time beyond
a ``burst_ms`` burst; audio past the session limit is cut and ends the session; audio after
``finish`` is ignored; ``idle_timeout_s`` without a message ends a ready session; audio the
worker leaves unacknowledged for ``resend_after_s`` is sent again (from the first record it
lacks), and for ``stall_timeout_s`` ends the session; after a worker took
the session over, a transcript showing fewer words than the client has seen is held back
until one catches up (the text on screen never loses what it showed).
"""

from __future__ import annotations

import enum
import json
from collections import deque
from dataclasses import dataclass

from pydantic import ValidationError

from schemas.api import ENGLISH_VARIANTS
from schemas.errors import StreamError, StreamErrorCode
from schemas.realtime import CLIENT_MESSAGES, PROVIDER, Finish, Ping, Start
from schemas.records import RealtimeAudio
from schemas.settings import RealtimeSettings

from .base import validation_param

__all__ = ["SessionState", "StreamSession", "Reply", "AudioAccepted", "language_tag",
           "BYTES_PER_MS", "RATE_SLACK_MS"]

Code = StreamErrorCode
BYTES_PER_MS = 32
"""16 kHz, 16-bit mono."""
RATE_SLACK_MS = 100
"""Jitter allowed beyond the burst (it also lets a single 64 KB frame, 2048 ms, through)."""


class SessionState(enum.StrEnum):
    connected = "connected"
    starting = "starting"
    ready = "ready"
    finishing = "finishing"
    closed = "closed"


class Reply(enum.Enum):
    """What the handler does after a text message."""

    start = "start"             # start the session (``StreamSession.start_message``)
    pong = "pong"
    finish = "finish"           # finish now
    nothing = "nothing"         # a finish to serve once ready, or a repeated finish


@dataclass(frozen=True, slots=True)
class AudioAccepted:
    """An accepted audio frame: ``pcm`` to forward (cut at the session limit; may be empty
    after finish), and whether the limit was reached with it."""

    pcm: bytes
    limit_reached: bool = False


def message_problem(exc: ValidationError) -> str:
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


class StreamSession:
    """Protocol state of one session. Times are monotonic seconds given by the caller.

    Args:
        opts: the ``realtime`` settings (limits and timers).
        now: when the socket connected.
    """

    def __init__(self, opts: RealtimeSettings, now: float) -> None:
        self.opts = opts
        self.state = SessionState.connected
        self.connected_at = self.last_message = now
        self.language = "en-US"
        self.start_message: Start | None = None
        self.finish_requested = False
        self.limit_ms = 0
        self.audio_ms = 0.0
        self._tokens_ms = 0.0
        self._tokens_at = now
        self.seq = 0
        self._unacked: deque[tuple[RealtimeAudio, float]] = deque()
        """Audio records the worker has not acknowledged, oldest first, with when each went."""
        self._resent_at = 0.0
        self.was_ready = False
        self._shown = 0                     # words of the last transcript sent
        self._catching_up = False
        self._held: tuple[str, bool] | None = None

    # --- client messages ----------------------------------------------------------------------

    def text(self, raw: str, now: float) -> Reply:
        """A text frame. Raises the spec's :class:`StreamError` for a protocol violation."""
        self.last_message = now
        try:
            message = CLIENT_MESSAGES.validate_python(json.loads(raw))
        except ValidationError as exc:  # before ValueError, which it is too
            message, detail = None, message_problem(exc)
        except (ValueError, RecursionError) as exc:  # "[[[[..." nests too deep
            message = None
            detail = f"not JSON ({str(exc).splitlines()[0][:200]})"
        if self.state is SessionState.connected:
            if not isinstance(message, Start):
                raise StreamError(Code.invalid_start, "The first message must be a valid "
                                  "start message" + (f": {detail}." if message is None else "."))
            self._start(message)
            return Reply.start
        if isinstance(message, Ping):
            return Reply.pong
        if isinstance(message, Finish):
            if self.state is SessionState.ready:
                return Reply.finish
            if self.state is SessionState.starting:
                self.finish_requested = True   # served once ready
            return Reply.nothing               # while finishing it is a repeat
        raise StreamError(Code.invalid_message, "Only ping and finish messages may follow "
                          "start; audio goes in binary frames.")

    def _start(self, start: Start) -> None:
        self.language = language_tag(start.language)
        unknown = [p for p in start.providers if p != PROVIDER]
        if unknown or not start.providers:
            raise StreamError(Code.unknown_provider, f"Unknown provider {unknown[0]!r}; the "
                              f"only provider is {PROVIDER}." if unknown else
                              f"No provider named; the only provider is {PROVIDER}.")
        self.start_message = start
        self.state = SessionState.starting

    @property
    def vocabulary(self) -> list[tuple[str, int]] | None:
        start = self.start_message
        if start is None or not start.custom_vocabulary_enabled:
            return None
        return [(t.text, t.strength) for t in start.custom_vocabulary]

    def audio(self, frame: bytes, now: float) -> AudioAccepted:
        """A binary frame: checked, paced, cut at the session limit."""
        self.last_message = now
        if self.state is not SessionState.ready:
            if self.state in (SessionState.finishing, SessionState.closed):
                return AudioAccepted(b"")   # after finish or the limit: not used, not counted
            raise StreamError(Code.audio_before_ready, "Send audio only after the ready message.")
        size = len(frame)
        if size > self.opts.max_frame_bytes:
            raise StreamError(Code.frame_too_large, f"Audio frames are at most "
                              f"{self.opts.max_frame_bytes} bytes; this one had {size}.")
        if size == 0 or size % 2:
            raise StreamError(Code.invalid_audio_frame, "Audio frames must hold whole 16-bit "
                              f"samples: {size} bytes is {'empty' if not size else 'odd'}.")
        self._tokens_ms = min(self.opts.burst_ms,
                              self._tokens_ms + (now - self._tokens_at) * 1000)
        self._tokens_at = now
        self._tokens_ms -= size / BYTES_PER_MS
        if self._tokens_ms < -RATE_SLACK_MS:
            raise StreamError(Code.realtime_rate_exceeded, "Audio is arriving faster than real "
                              f"time (beyond a {self.opts.burst_ms} ms burst).")
        left = int(self.limit_ms - self.audio_ms) * BYTES_PER_MS
        limit = size >= left
        if limit:
            frame = frame[:left]
        self.audio_ms += len(frame) / BYTES_PER_MS
        return AudioAccepted(frame, limit)

    # --- server steps -------------------------------------------------------------------------

    def ready(self, limit_ms: int, now: float) -> bool:
        """The worker took the session; False when it ended meanwhile."""
        if self.state is not SessionState.starting:
            return False
        self.state, self.was_ready = SessionState.ready, True
        self.limit_ms = limit_ms
        self._tokens_ms, self._tokens_at = float(self.opts.burst_ms), now
        self.last_message = now
        return True

    def begin_finish(self) -> bool:
        """``finish`` or the limit: True the first time, while ready."""
        if self.state is not SessionState.ready:
            return False
        self.state = SessionState.finishing
        return True

    def close(self) -> bool:
        """The session ends; True the first time."""
        if self.state is SessionState.closed:
            return False
        self.state = SessionState.closed
        return True

    @property
    def billed_ms(self) -> int:
        """Usage of the session: the audio received, capped by its limit."""
        return int(min(self.audio_ms, self.limit_ms))

    # --- the worker's acknowledgements --------------------------------------------------------

    def next_seq(self) -> int:
        """Number the next audio record."""
        self.seq += 1
        return self.seq

    def sent(self, record: RealtimeAudio, now: float) -> None:
        """``record`` is on its way: kept until the worker acknowledges it."""
        self._unacked.append((record, now))

    def acknowledged(self, seq: int) -> None:
        """The worker has every record up to ``seq``."""
        while self._unacked and self._unacked[0][0].seq <= seq:
            self._unacked.popleft()

    def unacknowledged(self, first: int = 0) -> list[RealtimeAudio]:
        """The records from ``first`` on that the worker has not acknowledged, in order."""
        return [record for record, _ in self._unacked if record.seq >= first]

    def resend_due(self, now: float) -> int | None:
        """The first record to publish again (with every one after it), if the worker has
        not acknowledged it for ``resend_after_s`` since it, or its last resend, went out.

        The worker takes a session's records only in order, so one the broker lost after
        acknowledging it would otherwise hold the session until the stall check ends it.
        """
        if not self._unacked or self.state not in (SessionState.ready,
                                                   SessionState.finishing):
            return None
        record, sent = self._unacked[0]
        if now - max(sent, self._resent_at) < self.opts.resend_after_s:
            return None
        self._resent_at = now
        return record.seq

    # --- transcripts --------------------------------------------------------------------------

    def worker_replaying(self) -> None:
        """A worker took the session over and is rebuilding it from its audio."""
        self._catching_up = True

    def show(self, text: str, is_final: bool) -> bool:
        """Whether a worker's transcript goes to the client now (else it is held back)."""
        words = len(text.split())
        if self._catching_up and words < self._shown:
            self._held = (text, is_final)
            return False
        self._catching_up, self._held, self._shown = False, None, words
        return True

    def release_held(self) -> tuple[str, bool] | None:
        """At ``finished``: the transcript still held back, sent whatever its length."""
        held, self._held = self._held, None
        if held is not None:
            self._shown = len(held[0].split())
        return held

    # --- deadlines ----------------------------------------------------------------------------

    def overdue(self, now: float) -> StreamError | None:
        """The error of a missed deadline, if any (start, idle, a silent worker)."""
        o = self.opts
        if self.state is SessionState.connected and now - self.connected_at > o.start_timeout_s:
            return StreamError(Code.invalid_start, "No start message within "
                               f"{o.start_timeout_s:g} s of connecting.")
        if self.state is SessionState.ready and now - self.last_message > o.idle_timeout_s:
            return StreamError(Code.idle_timeout, f"No message for {o.idle_timeout_s:g} s.")
        if self._unacked and now - self._unacked[0][1] > o.stall_timeout_s:
            return StreamError(Code.a5sv2_unavailable, "The recognizer stopped answering; "
                               "start a new session.")
        return None
