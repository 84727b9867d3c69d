"""The one error hierarchy of a5s, and the envelope it renders to.

Every failure a client can see is an :class:`A5sError` subclass with a stable
``code``, an HTTP status and an error ``type`` (spec section 7). The message is
what the client reads; ``log`` carries detail for operators only.

    A5sError                      500 api_error / internal_error
    ├── InvalidRequest            400 invalid_request
    │   ├── UnsupportedLanguage   400 unsupported_language
    │   └── UnsupportedModel      400 unsupported_model
    ├── Unauthorized              401 unauthorized
    ├── PermissionDenied          403 (abstract)
    │   ├── AccountSuspended, AccountDisabled, SessionRequired,
    │   ├── UsageLimitReached, ModelAccessDenied
    │   └── UploadUrlInvalid      403 upload_url_invalid (gateway-served presigned PUT only)
    ├── NotFound                  404 not_found
    │   └── FileNotFound          404 file_not_found
    ├── MethodNotAllowed          405 method_not_allowed
    ├── IdempotencyConflict       409 idempotency_conflict
    ├── TranscriptNotReady        409 transcript_not_ready
    ├── FileTooLarge              413 file_too_large
    ├── RateLimited               429 rate_limited   (Retry-After)
    │   └── QueueFull             429 queue_full     (Retry-After)
    ├── InternalError             500 internal_error
    ├── UpstreamUnavailable       502 upstream_unavailable (no request_id)
    │   └── ShuttingDown          503 upstream_unavailable (while the gateway stops)
    └── UpstreamTimeout           504 upstream_timeout     (no request_id)

Job errors (a transcript's ``error.code``) and streaming close codes are listed
here too, so one module names every code the service can emit.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

__all__ = [
    "A5sError", "InvalidRequest", "UnsupportedLanguage", "UnsupportedModel", "Unauthorized",
    "PermissionDenied", "AccountSuspended", "AccountDisabled", "SessionRequired",
    "UsageLimitReached", "ModelAccessDenied", "UploadUrlInvalid", "NotFound", "FileNotFound",
    "MethodNotAllowed", "IdempotencyConflict", "TranscriptNotReady", "FileTooLarge",
    "RateLimited", "QueueFull", "InternalError", "UpstreamUnavailable", "UpstreamTimeout",
    "ShuttingDown",
    "ErrorBody", "ErrorEnvelope", "JobErrorCode", "JobFailed", "StreamErrorCode",
    "STREAM_CLOSE_CODES", "StreamError", "HTTP_ERRORS",
]


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str
    code: str
    message: str
    param: str | None = None
    request_id: str | None = None


class ErrorEnvelope(BaseModel):
    error: ErrorBody


class A5sError(Exception):
    http_status = 500
    type = "api_error"
    code = "internal_error"
    default_message = "The server failed to handle the request; retry with backoff."
    has_request_id = True

    def __init__(self, message: str | None = None, *, param: str | None = None,
                 log: str | None = None, retry_after: int | None = None) -> None:
        self.message = message or self.default_message
        self.param = param
        self.log = log
        self.retry_after = retry_after
        super().__init__(self.message)

    def body(self, request_id: str | None) -> ErrorEnvelope:
        return ErrorEnvelope(error=ErrorBody(
            type=self.type, code=self.code, message=self.message, param=self.param,
            request_id=request_id if self.has_request_id else None))


class InvalidRequest(A5sError):
    http_status, type, code = 400, "invalid_request_error", "invalid_request"
    default_message = "The request is invalid."


class UnsupportedLanguage(InvalidRequest):
    code = "unsupported_language"
    default_message = "Only English is supported: use en or a regional variant such as en-US."


class UnsupportedModel(InvalidRequest):
    code = "unsupported_model"
    default_message = "Unknown model: the batch endpoint serves a5s-async-v1."


class Unauthorized(A5sError):
    http_status, type, code = 401, "authentication_error", "unauthorized"
    default_message = "Missing or invalid API key: send 'Authorization: Bearer a5s_sk_...'."


class PermissionDenied(A5sError):
    http_status, type = 403, "permission_error"


class AccountSuspended(PermissionDenied):
    code = "account_suspended"
    default_message = "This account is suspended."


class AccountDisabled(PermissionDenied):
    code = "account_disabled"
    default_message = "This account is disabled."


class SessionRequired(PermissionDenied):
    code = "session_required"
    default_message = "This action needs a console session, not an API key."


class UsageLimitReached(PermissionDenied):
    code = "usage_limit_reached"
    default_message = "The account's usage limit is used up."


class ModelAccessDenied(PermissionDenied):
    code = "model_access_denied"
    default_message = "This account has no access to the requested model."


class UploadUrlInvalid(PermissionDenied):
    """A presigned upload URL that is expired, altered or not issued by this service."""

    code = "upload_url_invalid"
    default_message = "The upload URL is expired or its signature does not match."


class NotFound(A5sError):
    http_status, type, code = 404, "invalid_request_error", "not_found"
    default_message = "No such resource."


class FileNotFound(NotFound):
    code = "file_not_found"
    default_message = "No such file: it is unknown, already used, or expired."


class MethodNotAllowed(A5sError):
    http_status, type, code = 405, "invalid_request_error", "method_not_allowed"
    default_message = "This method is not allowed on this path."


class IdempotencyConflict(A5sError):
    http_status, type, code = 409, "invalid_request_error", "idempotency_conflict"
    default_message = "This Idempotency-Key was already used with a different request body."


class TranscriptNotReady(A5sError):
    http_status, type, code = 409, "invalid_request_error", "transcript_not_ready"
    default_message = "The transcript is not completed yet."


class FileTooLarge(A5sError):
    http_status, type, code = 413, "invalid_request_error", "file_too_large"
    default_message = "The file is too large."


class RateLimited(A5sError):
    http_status, type, code = 429, "rate_limit_error", "rate_limited"
    default_message = "Too many requests; retry after the time in Retry-After."


class QueueFull(RateLimited):
    code = "queue_full"
    default_message = "Too many jobs are waiting; retry after the time in Retry-After."


class InternalError(A5sError):
    pass


class UpstreamUnavailable(A5sError):
    http_status, code, has_request_id = 502, "upstream_unavailable", False
    default_message = "A backing service is unavailable; retry with backoff."


class ShuttingDown(UpstreamUnavailable):
    """The gateway is stopping (or restarting): a request it will not start now.

    503 with the envelope, its request id and ``Retry-After``: the spec's rule for
    ``upstream_unavailable`` (retry with backoff) applies; a WebSocket closes with 1013.
    """

    http_status, has_request_id = 503, True
    default_message = "The service is stopping or restarting; retry in a few seconds."


class UpstreamTimeout(A5sError):
    http_status, code, has_request_id = 504, "upstream_timeout", False
    default_message = "A backing service did not answer in time; retry with backoff."


HTTP_ERRORS: tuple[type[A5sError], ...] = (
    InvalidRequest, UnsupportedLanguage, UnsupportedModel, Unauthorized, AccountSuspended,
    AccountDisabled, SessionRequired, UsageLimitReached, ModelAccessDenied, UploadUrlInvalid,
    NotFound, FileNotFound, MethodNotAllowed, IdempotencyConflict, TranscriptNotReady,
    FileTooLarge, RateLimited, QueueFull, InternalError, UpstreamUnavailable, UpstreamTimeout,
)


class JobErrorCode(StrEnum):
    """A transcript's ``error.code`` when ``status`` is ``error`` (none are counted)."""

    invalid_audio = "invalid_audio"
    audio_too_long = "audio_too_long"
    file_too_large = "file_too_large"
    download_failed = "download_failed"
    file_not_found = "file_not_found"
    usage_limit_reached = "usage_limit_reached"
    internal_error = "internal_error"
    canceled = "canceled"


class JobFailed(Exception):
    """Raised by a pipeline stage to end a job with a spec job error."""

    def __init__(self, code: JobErrorCode, message: str) -> None:
        self.code = JobErrorCode(code)
        self.message = message
        super().__init__(f"{self.code}: {message}")


class StreamErrorCode(StrEnum):
    invalid_start = "invalid_start"
    unsupported_language = "unsupported_language"
    unknown_provider = "unknown_provider"
    audio_before_ready = "audio_before_ready"
    invalid_audio_frame = "invalid_audio_frame"
    invalid_message = "invalid_message"
    unauthorized = "unauthorized"
    account_disabled = "account_disabled"
    account_suspended = "account_suspended"
    model_access_denied = "model_access_denied"
    origin_not_allowed = "origin_not_allowed"
    idle_timeout = "idle_timeout"
    quota_unavailable = "quota_unavailable"
    realtime_rate_exceeded = "realtime_rate_exceeded"
    frame_too_large = "frame_too_large"
    a5sv2_unavailable = "a5sv2_unavailable"
    upstream_unavailable = "upstream_unavailable"
    internal_error = "internal_error"


STREAM_CLOSE_CODES: dict[StreamErrorCode, int] = {
    StreamErrorCode.invalid_start: 4400,
    StreamErrorCode.unsupported_language: 4400,
    StreamErrorCode.unknown_provider: 4400,
    StreamErrorCode.audio_before_ready: 4400,
    StreamErrorCode.invalid_audio_frame: 4400,
    StreamErrorCode.invalid_message: 4400,
    StreamErrorCode.unauthorized: 4401,
    StreamErrorCode.account_disabled: 4403,
    # The spec's streaming table has no suspended row; it is refused like a disabled one.
    StreamErrorCode.account_suspended: 4403,
    StreamErrorCode.model_access_denied: 4403,
    StreamErrorCode.origin_not_allowed: 4403,
    StreamErrorCode.idle_timeout: 4408,
    StreamErrorCode.quota_unavailable: 4409,
    StreamErrorCode.realtime_rate_exceeded: 4409,
    StreamErrorCode.frame_too_large: 4409,
    StreamErrorCode.a5sv2_unavailable: 1013,
    StreamErrorCode.upstream_unavailable: 1013,
    StreamErrorCode.internal_error: 1011,
}


class StreamError(Exception):
    """Ends a live session: an ``error`` message, then a close with the code's close code."""

    def __init__(self, code: StreamErrorCode, message: str) -> None:
        self.code = StreamErrorCode(code)
        self.message = message
        self.close_code = STREAM_CLOSE_CODES[self.code]
        super().__init__(f"{self.code}: {message}")
