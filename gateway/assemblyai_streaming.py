"""``WSS /v3/ws``: AssemblyAI's Universal-Streaming protocol (v3) over the live engine.

A v3 session is an ``a5s-v2-streaming`` session in other words: :class:`V3Socket` is the
``/v1/realtime`` handler (:class:`~gateway.realtime.StreamSocket`) with the same keys,
admission (usage left, five live sessions an account, the session limit), idle rule, worker
path and usage event, and a different wire:

* the settings are query parameters, checked right after the key (:func:`connect_params`);
  the session starts without a ``start`` message, and audio the SDK sends before ``Begin``
  is held and sent on once the worker took the session;
* audio is paced as AssemblyAI paces it, in all since connecting (:class:`_V3Session`);
* the key comes bare in ``Authorization`` (as the SDK sends it; ``Bearer`` works too) or in
  the ``token`` query parameter;
* ``Terminate`` is ``finish``, ``KeepAlive`` is ``ping`` (no answer), ``ForceEndpoint`` and
  ``UpdateConfiguration`` act on the turns (:mod:`gateway.assemblyai_turns`);
* the a5s messages become v3 ones: ``ready`` → ``Begin``, transcripts → ``Turn``,
  ``finished`` → ``Termination``; an error is an ``Error`` message whose ``error_code`` is
  the close code that follows (:func:`v3_error`); the session limit is AssemblyAI's
  ``3008``, after the last turns.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import tornado.websocket
from pydantic import BaseModel, ValidationError

from schemas.assemblyai_streaming import (V3_CLIENT_MESSAGES, V3_REFUSED, V3_SPEECH_MODEL,
                                          V3Begin, V3Error, V3ForceEndpoint, V3KeepAlive,
                                          V3Params, V3Termination, V3Terminate,
                                          V3UpdateConfiguration)
from schemas.errors import StreamError, StreamErrorCode
from schemas.realtime import Finished, Ready, SessionLimit, Start, VocabularyEntry
from schemas.records import RealtimeMessage
from schemas.settings import RealtimeSettings
from security.tokens import bearer_token

from .base import validation_param
from .realtime import StreamSocket, stream_error
from .realtime_session import (BYTES_PER_MS, AudioAccepted, SessionState, StreamSession,
                               language_tag)
from .assemblyai_turns import TurnRules, TurnTracker

__all__ = ["V3Socket", "V3Refusal", "connect_params", "v3_error"]

log = logging.getLogger("a5s.gateway.v3")

Code = StreamErrorCode
State = SessionState
FINISH = json.dumps({"type": "finish"})
PING = json.dumps({"type": "ping"})
KEYTERM_STRENGTH = 6
"""The custom-vocabulary strength of a ``keyterms_prompt`` term (the spec's default)."""


class V3Refusal(Exception):
    """A v3 ``Error``: its ``error_code`` (the close code) and text."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


def _invalid(message: str) -> V3Refusal:
    return V3Refusal(3006, f"Invalid Parameter: {message}")


def _is_off(value: str) -> bool:
    return value.strip().lower() in ("", "false", "0", "null", "none", "[]", "{}")


_BOOLS = {"format_turns"}
_LISTS = {"keyterms_prompt", "language_codes"}
_NUMBERS = {"end_of_turn_confidence_threshold": (float, "a number from 0 to 1"),
            "min_turn_silence": (int, "a whole number of ms"),
            "max_turn_silence": (int, "a whole number of ms")}


def _value(name: str, raw: str) -> Any:
    """A query string value in its field's type (the SDK writes ``True`` and JSON lists)."""
    if name in _BOOLS:
        if raw.strip().lower() not in ("true", "false"):
            raise _invalid(f"{name} must be true or false, not {raw!r}.")
        return raw.strip().lower() == "true"
    if name in _LISTS:
        try:
            return json.loads(raw)
        except ValueError:
            return [t.strip() for t in raw.split(",") if t.strip()]
    if name in _NUMBERS:
        kind, said = _NUMBERS[name]
        try:
            return kind(raw)
        except ValueError:
            raise _invalid(f"{name} must be {said}, not {raw!r}.") from None
    return raw


def connect_params(query: dict[str, list[bytes]]) -> V3Params:
    """The connection's query parameters, checked (:class:`V3Refusal` ``3006`` otherwise)."""
    given = {k: v[-1].decode("utf-8", "replace") for k, v in query.items() if v}
    old = given.pop("min_end_of_turn_silence_when_confident", None)
    if old is not None:
        given.setdefault("min_turn_silence", old)
    params: dict[str, Any] = {}
    for name, raw in given.items():
        if name in V3_REFUSED:
            if not _is_off(raw):
                raise _invalid(f"{name} is not supported: {V3_REFUSED[name]}.")
        elif name == "speech_model" and raw != V3_SPEECH_MODEL:
            raise _invalid(f"speech_model {raw!r} is not supported: a5s has one live "
                           f"recogniser, English only ({V3_SPEECH_MODEL}).")
        elif name == "encoding" and raw != "pcm_s16le":
            raise _invalid(f"encoding {raw!r} is not supported: a5s takes 16-bit PCM "
                           "(pcm_s16le) at 16000 Hz.")
        elif name == "sample_rate" and raw.strip() != "16000":
            raise _invalid(f"sample_rate {raw!r} is not supported: a5s takes 16000 Hz audio; "
                           "resample before sending.")
        elif name not in V3Params.model_fields:
            raise _invalid(f"unknown parameter {name!r}.")
        else:
            params[name] = _value(name, raw)
    params.pop("sample_rate", None)     # 16000, checked above
    for language in [params.get("language_code", "en")] + list(params.get("language_codes")
                                                                or []):
        try:
            language_tag(str(language))
        except StreamError:
            raise _invalid(f"language {language!r} is not supported: a5s transcribes English "
                           "only (en, or a variant such as en-US).") from None
    try:
        return V3Params.model_validate(params)
    except ValidationError as exc:
        raise _invalid(validation_param(exc)[1].removeprefix("Invalid ")) from None


def v3_error(exc: BaseException) -> V3Refusal:
    """The v3 ``Error`` (code and text) of any failure; the a5s codes mapped to AssemblyAI's."""
    if isinstance(exc, V3Refusal):
        return exc
    error = stream_error(exc)
    code, said = error.code, error.message
    if code in (Code.unauthorized, Code.account_disabled, Code.account_suspended,
                Code.model_access_denied, Code.origin_not_allowed):
        return V3Refusal(1008, f"Unauthorized Connection: {said}")
    if code is Code.quota_unavailable:
        if said.startswith("At most"):     # every live place of the account is taken
            return V3Refusal(3009, f"Unauthorized Connection: Too many concurrent sessions. "
                             f"{said}")
        return V3Refusal(1008, f"Unauthorized Connection: {said}")
    if code in (Code.invalid_start, Code.invalid_message, Code.unsupported_language,
                Code.unknown_provider, Code.audio_before_ready):
        return V3Refusal(3006, f"Invalid Message: {said}")
    if code is Code.realtime_rate_exceeded:
        return V3Refusal(3007, f"Audio Transmission Rate Exceeded: {said}")
    if code in (Code.frame_too_large, Code.invalid_audio_frame):
        return V3Refusal(3007, f"Input duration violation: {said}")
    if code is Code.idle_timeout:
        return V3Refusal(4031, f"Session idle for too long: {said}")
    if code in (Code.a5sv2_unavailable, Code.upstream_unavailable):
        return V3Refusal(1013, said)
    return V3Refusal(3005, f"Session Cancelled: {said}")


class _V3Session(StreamSession):
    """The session rules with v3's pacing, AssemblyAI's: in all, no more audio than the time
    since connecting plus ``burst_ms``. Audio held before ``Begin`` and sent on at once is
    within it, and so is a pause in delivery (the network, a busy gateway) followed by the
    audio held up meanwhile; a client that sends faster than real time still reaches it."""

    def __init__(self, opts: RealtimeSettings, now: float) -> None:
        super().__init__(opts, now)
        self.held_ms = 0.0

    def audio(self, frame: bytes, now: float) -> AudioAccepted:
        self._tokens_ms, self._tokens_at = float(self.opts.burst_ms), now  # no bucket here
        accepted = super().audio(frame, now)
        self.paced(self.audio_ms, now)
        return accepted

    def paced(self, audio_ms: float, now: float) -> None:
        """Raises ``realtime_rate_exceeded`` for ``audio_ms`` received by ``now``."""
        took = now - self.connected_at
        if audio_ms > took * 1000 + self.opts.burst_ms:
            raise StreamError(Code.realtime_rate_exceeded, f"Received {audio_ms / 1000:.1f} s "
                              f"of audio in {took:.1f} s since connecting (beyond a "
                              f"{self.opts.burst_ms} ms burst).")


class V3Socket(StreamSocket):
    """One v3 session (see the module's docstring)."""

    def initialize(self, *args: Any, **kwargs: Any) -> None:
        super().initialize(*args, **kwargs)
        self.session = _V3Session(self.opts, time.monotonic())
        self.params = V3Params()
        self.turns = TurnTracker(TurnRules())
        self.held: list[bytes] = []
        self.holding = True
        """Audio is held until ``Begin`` is sent (then the held frames go first)."""
        self.limit_reached = False
        self.close_as: V3Refusal | None = None

    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        return None

    def _bearer(self) -> str | None:
        header = self.request.headers.get("Authorization")
        if header and header.strip():
            token = bearer_token(header)
            return header.strip() if token is None else token
        return self.get_query_argument("token", None)

    async def open(self, *args: Any, **kwargs: Any) -> None:
        await super().open(*args, **kwargs)
        if self.state is State.closed or self.principal is None:
            return
        try:
            self.params = p = connect_params(self.request.query_arguments)
            self.turns.rules = TurnRules(p.end_of_turn_confidence_threshold, p.min_turn_silence,
                                         p.max_turn_silence, p.format_turns)
            start = Start(type="start", language=language_tag(p.language_code),
                          custom_vocabulary_enabled=bool(p.keyterms_prompt),
                          custom_vocabulary=[VocabularyEntry(text=t, strength=KEYTERM_STRENGTH)
                                             for t in p.keyterms_prompt])
            super()._on_text(start.model_dump_json(), time.monotonic())
        except Exception as exc:
            self._fail(exc)

    # --- client frames ------------------------------------------------------------------------

    def on_message(self, message: str | bytes) -> None:
        if self.state is State.closed:
            return
        try:
            if isinstance(message, bytes) and self.holding:
                self._hold(message, time.monotonic())
                return
            super().on_message(message)
        except Exception as exc:
            self._fail(exc)

    def _hold(self, frame: bytes, now: float) -> None:
        """Audio before ``Begin``: checked and kept (at most real time since connecting)."""
        self.session.last_message = now
        size = len(frame)
        if size > self.opts.max_frame_bytes or size == 0 or size % 2:
            raise StreamError(Code.invalid_audio_frame, f"Audio frames are non-empty, whole "
                              f"16-bit samples of at most {self.opts.max_frame_bytes} bytes; "
                              f"this one had {size}.")
        self.session.held_ms += size / BYTES_PER_MS
        self.session.paced(self.session.held_ms, now)
        self.held.append(frame)

    def _on_text(self, text: str, now: float) -> None:
        self.session.last_message = now
        try:
            message = V3_CLIENT_MESSAGES.validate_json(text)
        except ValidationError as exc:
            kind = exc.errors(include_url=False)[0].get("type")
            if kind in ("json_invalid", "json_type"):
                raise V3Refusal(3006, f"Invalid JSON: {text[:200]}") from None
            if kind in ("union_tag_invalid", "union_tag_not_found"):
                raise V3Refusal(3006, f"Invalid Message Type: {text[:200]} (Terminate, "
                                "ForceEndpoint, KeepAlive and UpdateConfiguration are the "
                                "messages)") from None
            param, said = validation_param(exc)
            if kind == "extra_forbidden" and '"UpdateConfiguration"' in text.replace(" ", ""):
                said = (f"{(param or '').rpartition('.')[2]} cannot change during a session; "
                        "UpdateConfiguration takes "
                        "end_of_turn_confidence_threshold, min_turn_silence, max_turn_silence "
                        "and format_turns.")
            raise V3Refusal(3006, f"Invalid Message: {said}") from None
        if isinstance(message, V3Terminate):
            super()._on_text(FINISH, now)
        elif isinstance(message, V3KeepAlive):
            super()._on_text(PING, now)
        elif isinstance(message, V3ForceEndpoint):
            self._send_turns(self.turns.force())
        elif isinstance(message, V3UpdateConfiguration):
            self._configure(message)

    def _configure(self, update: V3UpdateConfiguration) -> None:
        r = self.turns.rules
        if update.end_of_turn_confidence_threshold is not None:
            r.threshold = float(update.end_of_turn_confidence_threshold)
        silence = update.min_turn_silence
        if silence is None:
            silence = update.min_end_of_turn_silence_when_confident
        if silence is not None:
            r.min_silence_ms = silence
        if update.max_turn_silence is not None:
            r.max_silence_ms = update.max_turn_silence
        if update.format_turns is not None:
            r.format_turns = update.format_turns
        self._send_turns(self.turns.heard(self._heard_s))

    def _on_audio(self, frame: bytes, now: float) -> None:
        super()._on_audio(frame, now)
        self._send_turns(self.turns.heard(self._heard_s))

    @property
    def _heard_s(self) -> float:
        return self.session.audio_ms / 1000

    # --- the worker's transcripts -------------------------------------------------------------

    def _on_worker(self, message: RealtimeMessage) -> None:
        if message.type == "transcript" and self.state in (State.ready, State.finishing):
            self.session.acknowledged(message.seq)
            self.worker_ready.set()
            if message.replaying:
                self.session.worker_replaying()
            if self.session.show(message.text, message.is_final):
                self._send_turns(self.turns.transcript(
                    message.text, message.is_final, message.start or 0.0,
                    message.end if message.end is not None else self._heard_s, self._heard_s))
            return
        if message.type == "finished":
            held = self.session.release_held()
            if held is not None:
                self._send_turns(self.turns.transcript(held[0], held[1], 0.0, self._heard_s,
                                                       self._heard_s))
            self._send_turns(self.turns.finish())
        super()._on_worker(message)

    def _send_turns(self, turns: Sequence[BaseModel]) -> None:
        for turn in turns:
            self._emit(turn)

    # --- rendering ----------------------------------------------------------------------------

    def _emit(self, message: BaseModel) -> None:
        try:
            self.write_message(message.model_dump_json())
        except tornado.websocket.WebSocketClosedError:
            pass

    def _write(self, message: BaseModel) -> None:
        """The a5s session's messages in v3's words (those v3 has no word for are dropped)."""
        if isinstance(message, Ready):
            self._emit(V3Begin(id=self.session_id,
                               expires_at=int(time.time() + message.session_limit_ms / 1000)))
            held, self.held, self.holding = self.held, [], False
            now = time.monotonic()
            for frame in held:
                if self.state is not State.ready:
                    break
                self._on_audio(frame, now)
        elif isinstance(message, SessionLimit):
            self.limit_reached = True
        elif isinstance(message, Finished):
            if self.limit_reached:
                self.close_as = V3Refusal(3008, "Session Expired: Maximum session duration "
                                          f"exceeded ({self.session.limit_ms // 1000} s of "
                                          "audio a session).")
                self._emit(V3Error(error_code=3008, error=self.close_as.message))
                return
            self._emit(V3Termination(
                audio_duration_seconds=round(message.audio_ms / 1000),
                session_duration_seconds=round(time.monotonic() - self.session.connected_at)))

    def close(self, code: int | None = None, reason: str | None = None) -> None:
        if self.close_as is not None and code == 1000:
            code, reason = self.close_as.code, "See Error message for details"
        super().close(code, reason)

    def _fail(self, exc: BaseException, provider: str | None = None) -> None:
        """End the session: ``Error``, then the close with its code."""
        if not self.session.close():
            return
        error = v3_error(exc)
        if error.code == 3005:
            log.error("v3: session %s failed: %r", self.session_id, exc, exc_info=exc)
        self._emit(V3Error(error_code=error.code, error=error.message))
        reason = error.message if len(error.message.encode()) <= 120 else \
            "See Error message for details"
        tornado.websocket.WebSocketHandler.close(self, error.code, reason)
