"""API resources of spec section 2, and the request bodies of section 4.

These models are the contract: the gateway serialises them, the OpenAPI document
is generated from them, the client parses with them, and tests assert against
them. Field order follows the spec tables.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (BaseModel, ConfigDict, Field, PlainSerializer, SerializerFunctionWrapHandler,
                      StrictStr, field_validator, model_serializer, model_validator)

from .errors import InvalidRequest, UnsupportedLanguage, UnsupportedModel

__all__ = [
    "ASYNC_MODEL", "STREAMING_MODEL", "ENGLISH_VARIANTS", "Timestamp", "rfc3339", "utcnow",
    "normalise_language", "TranscriptStatus", "Word", "Utterance", "Speaker", "JobError",
    "TranscriptSummary", "Transcript", "DeletedTranscript", "TranscriptList", "FileObject",
    "UploadUrl", "Model", "ModelList", "UsageLimit", "AsyncModelEntry", "StreamingModelEntry",
    "AccountModels", "Account", "UsageModelRef", "UsageDay", "UsageTotals", "UsageByKey",
    "Usage", "WebhookEvent", "CreateTranscript", "Health", "ComponentHealth", "MODELS",
    "model_list",
    "FIELD_MAXIMA", "METADATA_MAX_BYTES",
]

ASYNC_MODEL = "a5s-async-v1"
STREAMING_MODEL = "a5s-v2-streaming"
ENGLISH_VARIANTS = ("en", "en-us", "en-gb", "en-au", "en-ca", "en-in", "en-ie", "en-nz", "en-za")
FIELD_MAXIMA = {"audio_url": 8192, "file_id": 64, "language_code": 16, "webhook_url": 2048,
                "webhook_auth_header_name": 256, "webhook_auth_header_value": 4096}
METADATA_MAX_BYTES = 16 * 1024


def utcnow() -> datetime:
    return datetime.now(UTC)


def rfc3339(value: datetime) -> str:
    """RFC 3339 UTC with millisecond precision and a ``Z`` suffix (naive means UTC).

    Formatted field by field: ``strftime`` was most of a transcript list's serialisation."""
    if value.tzinfo is not None and value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (
        value.year, value.month, value.day, value.hour, value.minute, value.second,
        value.microsecond // 1000)


Timestamp = Annotated[datetime, PlainSerializer(rfc3339, return_type=str, when_used="json")]
TranscriptStatus = Literal["queued", "processing", "completed", "error"]


def normalise_language(value: str, *, allow_underscore: bool = True) -> str:
    """Map an English variant to ``en``; raise ``unsupported_language`` otherwise."""
    key = value.strip().lower()
    if allow_underscore:
        key = key.replace("_", "-")
    if key not in ENGLISH_VARIANTS:
        raise UnsupportedLanguage(f"Language {value!r} is not supported; use en or one of "
                                  "en-US, en-GB, en-AU, en-CA, en-IN, en-IE, en-NZ, en-ZA.",
                                  param="language_code")
    return "en"


class _Resource(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Word(_Resource):
    text: str
    start: float
    end: float
    speaker: str


class Utterance(_Resource):
    speaker: str
    start: float
    end: float
    text: str
    words: list[Word]


class Speaker(_Resource):
    id: str
    speaking_time: float


class JobError(_Resource):
    code: str
    message: str


class TranscriptSummary(_Resource):
    id: str
    object: Literal["transcript"] = "transcript"
    status: TranscriptStatus
    created_at: Timestamp
    started_at: Timestamp | None = None
    completed_at: Timestamp | None = None
    audio_url: str | None = None
    file_id: str | None = None
    language_code: str = "en"
    model: str = ASYNC_MODEL
    audio_duration: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    webhook_url: str | None = None
    webhook_status_code: int | None = None
    error: JobError | None = None


class Transcript(TranscriptSummary):
    """A transcript; the result fields are present only once ``status`` is ``completed``."""

    text: str | None = None
    speakers: list[Speaker] | None = None
    utterances: list[Utterance] | None = None
    words: list[Word] | None = None

    @model_serializer(mode="wrap")
    def _drop_absent_results(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if self.status != "completed":
            for name in ("text", "speakers", "utterances", "words"):
                data.pop(name, None)
        return data


class DeletedTranscript(TranscriptSummary):
    deleted: Literal[True] = True


class TranscriptList(_Resource):
    object: Literal["list"] = "list"
    data: list[TranscriptSummary]
    has_more: bool
    next_before: str | None = None


class FileObject(_Resource):
    """An upload. Beyond ``id`` the spec leaves the shape open; these follow common practice."""

    id: str
    object: Literal["file"] = "file"
    bytes: int | None = None
    created_at: Timestamp
    expires_at: Timestamp


class UploadUrl(_Resource):
    id: str
    object: Literal["upload_url"] = "upload_url"
    upload_url: str
    method: Literal["PUT"] = "PUT"
    max_bytes: int
    expires_at: Timestamp
    file_expires_at: Timestamp


class Model(_Resource):
    id: str
    object: Literal["model"] = "model"
    name: str
    type: Literal["async", "streaming"]
    languages: list[str] = Field(default_factory=lambda: ["en"])
    endpoint: str
    engine: str | None = None
    """Which recognition engine serves it (``whisper`` or ``zipformer``); a5s extension."""


class ModelList(_Resource):
    object: Literal["list"] = "list"
    data: list[Model]


MODELS = ModelList(data=[
    Model(id=ASYNC_MODEL, name="a5s async v1", type="async", endpoint="/v1/transcripts"),
    Model(id=STREAMING_MODEL, name="a5s v2 streaming", type="streaming", endpoint="/v1/realtime"),
])


class UsageLimit(_Resource):
    limit_seconds: float
    used_seconds: float
    reserved_seconds: float
    remaining_seconds: float


class AsyncModelEntry(_Resource):
    name: str = "a5s async v1"
    type: Literal["async"] = "async"
    enabled: bool
    max_concurrent_jobs: int
    max_queued_jobs: int
    max_requests_per_minute: int
    max_audio_duration_seconds: int
    retention_days: int
    jobs_queued: int
    jobs_processing: int


class StreamingModelEntry(_Resource):
    name: str = "a5s v2 streaming"
    type: Literal["streaming"] = "streaming"
    enabled: bool
    max_concurrent_sessions: int
    max_session_seconds: int


class AccountModels(_Resource):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    async_v1: AsyncModelEntry = Field(alias=ASYNC_MODEL, serialization_alias=ASYNC_MODEL)
    streaming_v2: StreamingModelEntry = Field(alias=STREAMING_MODEL,
                                              serialization_alias=STREAMING_MODEL)


class Account(_Resource):
    id: str
    object: Literal["account"] = "account"
    email: str
    display_name: str
    created_at: Timestamp
    status: Literal["active", "suspended"]
    tier: str
    usage_limit: UsageLimit
    models: AccountModels


class UsageModelRef(_Resource):
    id: str
    name: str


class UsageDay(_Resource):
    date: str
    model: str
    requests: int
    completed: int
    failed: int
    audio_seconds: float


class UsageTotals(_Resource):
    requests: int = 0
    completed: int = 0
    failed: int = 0
    audio_seconds: float = 0.0


class UsageByKey(_Resource):
    key_id: str
    name: str
    model: str
    requests: int
    audio_seconds: float


class Usage(_Resource):
    object: Literal["usage"] = "usage"
    timezone: str
    start_date: str
    end_date: str
    models: list[UsageModelRef]
    daily: list[UsageDay]
    totals: dict[str, UsageTotals]
    by_key: list[UsageByKey]


class WebhookEvent(_Resource):
    event: Literal["transcript.completed", "transcript.failed"]
    id: str
    status: TranscriptStatus
    metadata: dict[str, Any]


class ComponentHealth(_Resource):
    ok: bool
    detail: str = ""
    latency_ms: float | None = None


class Health(_Resource):
    status: Literal["ok", "degraded"]
    components: dict[str, ComponentHealth]
    engines: dict[str, str] = Field(default_factory=dict)
    """Model id -> the engine serving it (``whisper`` or ``zipformer``)."""


def model_list(engines: dict[str, str]) -> ModelList:
    """:data:`MODELS` with each model's engine filled in."""
    return ModelList(data=[m.model_copy(update={"engine": engines.get(m.id)})
                           for m in MODELS.data])


_CREDENTIALS = re.compile(r"^[^/]*@")


class CreateTranscript(_Resource):
    """Body of ``POST /v1/transcripts``; every rule of spec sections 4 and 8."""

    model: StrictStr = ASYNC_MODEL
    audio_url: StrictStr | None = Field(None, max_length=FIELD_MAXIMA["audio_url"])
    file_id: StrictStr | None = Field(None, max_length=FIELD_MAXIMA["file_id"])
    language_code: StrictStr = Field("en", max_length=FIELD_MAXIMA["language_code"])
    webhook_url: StrictStr | None = Field(None, max_length=FIELD_MAXIMA["webhook_url"])
    # An HTTP header name is a token, and its value visible ASCII, space or tab (RFC 9110):
    # anything else cannot be sent, and CR or LF would inject headers.
    webhook_auth_header_name: StrictStr | None = Field(
        None, max_length=FIELD_MAXIMA["webhook_auth_header_name"],
        pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
    webhook_auth_header_value: StrictStr | None = Field(
        None, max_length=FIELD_MAXIMA["webhook_auth_header_value"], pattern=r"^[\t\x20-\x7e]*$")
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        if value != ASYNC_MODEL:
            raise UnsupportedModel(f"Model {value!r} is not served here; use {ASYNC_MODEL}.",
                                   param="model")
        return value

    @field_validator("language_code")
    @classmethod
    def _language(cls, value: str) -> str:
        return normalise_language(value)

    @field_validator("audio_url", "webhook_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an absolute http or https URL")
        if "@" in parts.netloc or _CREDENTIALS.match(value.split("://", 1)[-1]):
            raise ValueError("must not carry credentials; use a presigned URL instead")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_size(cls, value: dict[str, Any]) -> dict[str, Any]:
        import json
        if len(json.dumps(value, separators=(",", ":")).encode()) > METADATA_MAX_BYTES:
            raise ValueError("must be at most 16 KB as JSON")
        return value

    @model_validator(mode="after")
    def _cross_field(self) -> CreateTranscript:
        if (self.audio_url is None) == (self.file_id is None):
            raise InvalidRequest("Give exactly one of audio_url or file_id.",
                                 param="audio_url" if self.audio_url is None else "file_id")
        for name in ("webhook_auth_header_name", "webhook_auth_header_value"):
            if getattr(self, name) is not None and self.webhook_url is None:
                raise InvalidRequest(f"{name} requires webhook_url.", param=name)
        if (self.webhook_auth_header_name is None) != (self.webhook_auth_header_value is None):
            missing = ("webhook_auth_header_value" if self.webhook_auth_header_value is None
                       else "webhook_auth_header_name")
            raise InvalidRequest("Give both webhook_auth_header_name and "
                                 "webhook_auth_header_value, or neither.", param=missing)
        return self
