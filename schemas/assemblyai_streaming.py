"""AssemblyAI's Universal-Streaming API (v3, ``/v3/ws``) as the official ``assemblyai`` SDK 1.8
writes and reads it (``assemblyai.streaming.v3``).

The connection's settings are query parameters (:class:`V3Params`, parsed from the strings the
SDK url-encodes: booleans as ``True``/``False``, lists as JSON). Client text frames are
``Terminate``, ``ForceEndpoint``, ``KeepAlive`` and ``UpdateConfiguration``
(:data:`V3_CLIENT_MESSAGES`); the server sends ``Begin``, ``Turn``, ``Termination`` and, before
an error close, ``Error`` whose ``error_code`` is the close code. Parameters a5s cannot honour
are in :data:`V3_REFUSED` with the reason a client reads. ``docs/compat.md`` has the table.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt,
                      StrictStr, TypeAdapter)

__all__ = ["V3_SPEECH_MODEL", "V3_REFUSED", "V3_MAX_KEYTERMS", "V3Params", "V3Silence",
           "V3Terminate", "V3ForceEndpoint", "V3KeepAlive", "V3UpdateConfiguration",
           "V3_CLIENT_MESSAGES", "V3Begin", "V3Word", "V3Turn", "V3Termination", "V3Error"]

V3_SPEECH_MODEL = "universal-streaming-english"
"""The one ``speech_model`` accepted: a5s's live recogniser is English only."""
V3_MAX_KEYTERMS = 64
"""``keyterms_prompt`` terms a session takes (a5s's custom vocabulary limit)."""

_NO_SPEAKERS = "a5s does not label speakers in live sessions (the batch API does)"
_NO_PII = "a5s does not redact PII in live sessions"
V3_REFUSED: dict[str, str] = {
    "language_detection": "a5s transcribes English only; there is nothing to detect",
    "domain": "a5s has one live recogniser for every domain",
    "mode": "a5s has one live mode; tune turns with min_turn_silence and max_turn_silence",
    "vad_threshold": "a5s's voice activity threshold is fixed",
    "filter_profanity": "a5s does not filter words",
    "prompt": "a5s does not prompt its live recogniser; use keyterms_prompt for terms",
    "agent_context": "a5s does not prompt its live recogniser; use keyterms_prompt for terms",
    "interruption_delay": "a5s ends turns on silence and end_of_turn_confidence only",
    "turn_left_pad_ms": "a5s keeps a fixed 200 ms of audio before speech",
    "session_heartbeat": "a5s sends no Heartbeat messages",
    "acknowledge_silence": "a5s sends no Silence messages",
    "continuous_partials": "a5s sends a partial turn whenever its text changes",
    "include_partial_turns": "a5s always sends partial turns",
    "inactivity_timeout": "a5s ends a session after its fixed idle timeout (45 s without a "
                          "message); send KeepAlive to hold a quiet session",
    "webhook_url": "a5s sends no webhooks for live sessions",
    "webhook_auth_header_name": "a5s sends no webhooks for live sessions",
    "webhook_auth_header_value": "a5s sends no webhooks for live sessions",
    "llm_gateway": "a5s has no LLM gateway",
    "speaker_labels": _NO_SPEAKERS,
    "speaker_labels_revision_interval_ms": _NO_SPEAKERS,
    "max_speakers": _NO_SPEAKERS,
    "voice_focus": "a5s does not suppress noise",
    "voice_focus_threshold": "a5s does not suppress noise",
    "noise_suppression_model": "a5s does not suppress noise",
    "noise_suppression_threshold": "a5s does not suppress noise",
    "customer_support_audio_capture": "a5s does not store live audio",
    "redact_pii": _NO_PII,
    "redact_pii_policies": _NO_PII,
    "redact_pii_sub": _NO_PII,
}
"""Connection parameters a5s refuses when they ask for something (any value but an empty one:
``False``, ``[]``, ``""``, ``null``), and why."""


class V3Silence(BaseModel):
    """The turn settings ``UpdateConfiguration`` may change during a session (ms)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    end_of_turn_confidence_threshold: StrictFloat | StrictInt | None = Field(None, ge=0, le=1)
    min_turn_silence: StrictInt | None = Field(None, ge=0, le=60_000)
    min_end_of_turn_silence_when_confident: StrictInt | None = Field(None, ge=0, le=60_000)
    max_turn_silence: StrictInt | None = Field(None, ge=0, le=60_000)


class V3Params(BaseModel):
    """The connection's query parameters a5s honours, with AssemblyAI's defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    sample_rate: Literal[16000] = 16000
    encoding: Literal["pcm_s16le"] = "pcm_s16le"
    speech_model: Literal["universal-streaming-english"] = V3_SPEECH_MODEL
    language_code: StrictStr = "en"
    language_codes: list[StrictStr] = Field(default_factory=list)
    format_turns: StrictBool = False
    keyterms_prompt: list[Annotated[StrictStr, Field(min_length=1, max_length=100)]] = Field(
        default_factory=list, max_length=V3_MAX_KEYTERMS)
    end_of_turn_confidence_threshold: float = Field(0.4, ge=0, le=1)
    min_turn_silence: int = Field(400, ge=0, le=60_000)
    max_turn_silence: int = Field(1280, ge=0, le=60_000)
    token: StrictStr | None = None
    """The key, for clients that cannot set a header (AssemblyAI's temporary token)."""


# --- client messages ---------------------------------------------------------------------------

class _Client(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class V3Terminate(_Client):
    type: Literal["Terminate"]


class V3ForceEndpoint(_Client):
    type: Literal["ForceEndpoint"]


class V3KeepAlive(_Client):
    type: Literal["KeepAlive"]


class V3UpdateConfiguration(V3Silence):
    """Silence settings change at once; ``format_turns`` from the next ended turn. The other
    session parameters are fixed at connect (their names are refused here)."""

    type: Literal["UpdateConfiguration"]
    format_turns: StrictBool | None = None


V3ClientMessage = Annotated[V3Terminate | V3ForceEndpoint | V3KeepAlive | V3UpdateConfiguration,
                            Field(discriminator="type")]
V3_CLIENT_MESSAGES: TypeAdapter[V3Terminate | V3ForceEndpoint | V3KeepAlive |
                                V3UpdateConfiguration] = TypeAdapter(V3ClientMessage)


# --- server messages ---------------------------------------------------------------------------

class _Server(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class V3Begin(_Server):
    type: Literal["Begin"] = "Begin"
    id: str
    expires_at: int
    """Unix seconds: when the session reaches its limit if audio flows without a break."""


class V3Word(_Server):
    start: int
    end: int
    confidence: float
    text: str
    word_is_final: bool


class V3Turn(_Server):
    type: Literal["Turn"] = "Turn"
    turn_order: int
    turn_is_formatted: bool
    end_of_turn: bool
    transcript: str
    end_of_turn_confidence: float
    words: list[V3Word]


class V3Termination(_Server):
    type: Literal["Termination"] = "Termination"
    audio_duration_seconds: int
    session_duration_seconds: int


class V3Error(_Server):
    type: Literal["Error"] = "Error"
    error_code: int
    error: str
