"""Messages of the live streaming protocol (``WSS /v1/realtime``, spec section 6).

Client text frames are one discriminated union on ``type`` (:data:`ClientMessage`),
validated by :data:`CLIENT_MESSAGES`. ``start`` rejects unknown fields; its
``language`` and ``providers`` are plain strings here and checked by the gateway, so
that a wrong value gets its own code (``unsupported_language``, ``unknown_provider``)
rather than ``invalid_start``. Server messages are rendered with ``model_dump_json``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, TypeAdapter

__all__ = [
    "PROVIDER", "MAX_VOCABULARY_TERMS", "VocabularyEntry", "Start", "Ping", "Finish",
    "ClientMessage", "CLIENT_MESSAGES", "ProviderStatus", "Ready", "TranscriptMessage",
    "SessionLimit", "Finished", "ProviderError", "Error", "Pong", "ServerMessage",
]

PROVIDER = "a5sv2"
MAX_VOCABULARY_TERMS = 64


class _Client(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class VocabularyEntry(BaseModel):
    """One ``custom_vocabulary`` term: up to 100 characters, strength 0 (casing only) to 12."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    text: StrictStr = Field(min_length=1, max_length=100)
    strength: StrictInt = Field(6, ge=0, le=12)


class Start(_Client):
    """The first client message; every field but ``type`` has the spec's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["start"]
    language: StrictStr = "en-US"
    encoding: Literal["pcm_s16le"] = "pcm_s16le"
    sample_rate: Literal[16000] = 16000
    channels: Literal[1] = 1
    providers: list[StrictStr] = Field(default_factory=lambda: [PROVIDER])
    custom_vocabulary_enabled: StrictBool = False
    custom_vocabulary: list[VocabularyEntry] = Field(default_factory=list,
                                                     max_length=MAX_VOCABULARY_TERMS)


class Ping(_Client):
    type: Literal["ping"]


class Finish(_Client):
    type: Literal["finish"]


ClientMessage = Annotated[Start | Ping | Finish, Field(discriminator="type")]
CLIENT_MESSAGES: TypeAdapter[Start | Ping | Finish] = TypeAdapter(ClientMessage)


class _Server(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProviderStatus(_Server):
    type: Literal["provider_status"] = "provider_status"
    message: str


class Ready(_Server):
    type: Literal["ready"] = "ready"
    session_limit_ms: int
    quota_ms: int
    used_ms: int
    language: str
    sample_rate: int = 16000
    encoding: str = "pcm_s16le"


class TranscriptMessage(_Server):
    type: Literal["transcript"] = "transcript"
    text: str
    is_final: bool
    provider: str = PROVIDER


class SessionLimit(_Server):
    type: Literal["session_limit"] = "session_limit"
    message: str


class Finished(_Server):
    type: Literal["finished"] = "finished"
    audio_ms: int
    billed_ms: int
    used_ms: int
    quota_ms: int


class ProviderError(_Server):
    type: Literal["provider_error"] = "provider_error"
    message: str


class Error(_Server):
    type: Literal["error"] = "error"
    code: str
    message: str


class Pong(_Server):
    type: Literal["pong"] = "pong"


ServerMessage = (ProviderStatus | Ready | TranscriptMessage | SessionLimit | Finished |
                 ProviderError | Error | Pong)
