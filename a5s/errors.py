"""The exceptions the a5s client raises.

::

    A5sError                         root of everything below
    ├── APIConnectionError           the service could not be reached (after retries)
    │   └── APITimeoutError          no answer in time
    ├── APIStatusError               an error envelope: status_code, code, message, param,
    │   │                            request_id, retry_after
    │   ├── BadRequestError          400 invalid_request, unsupported_language, ...
    │   ├── AuthenticationError      401 unauthorized
    │   ├── PermissionDeniedError    403 account_suspended, usage_limit_reached, ...
    │   ├── NotFoundError            404 not_found, file_not_found
    │   ├── ConflictError            409 idempotency_conflict, transcript_not_ready
    │   ├── RequestTooLargeError     413 file_too_large
    │   ├── RateLimitError           429 rate_limited, queue_full
    │   └── ServerError              5xx internal_error, upstream_unavailable, ...
    ├── TranscriptFailed             the job ended with status ``error`` (code from the job)
    ├── WaitTimeout                  ``wait``/``transcribe`` gave up before the job finished
    └── StreamError                  a realtime session ended with an ``error`` message

httpx exceptions are translated in one place, :func:`map_httpx_errors`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx

__all__ = ["A5sError", "APIConnectionError", "APITimeoutError", "APIStatusError",
           "BadRequestError", "AuthenticationError", "PermissionDeniedError", "NotFoundError",
           "ConflictError", "RequestTooLargeError", "RateLimitError", "ServerError",
           "TranscriptFailed", "WaitTimeout", "StreamError", "map_httpx_errors", "from_response"]


class A5sError(Exception):
    """Root of every exception the client raises."""


class APIConnectionError(A5sError):
    pass


class APITimeoutError(APIConnectionError):
    pass


class APIStatusError(A5sError):
    """The service answered with an error envelope (spec section 7)."""

    def __init__(self, message: str, *, status_code: int, code: str | None = None,
                 type: str | None = None, param: str | None = None,
                 request_id: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(f"{status_code} {code}: {message}" if code else
                         f"{status_code}: {message}")
        self.message = message
        self.status_code = status_code
        self.code = code
        self.type = type
        self.param = param
        self.request_id = request_id
        self.retry_after = retry_after


class BadRequestError(APIStatusError):
    pass


class AuthenticationError(APIStatusError):
    pass


class PermissionDeniedError(APIStatusError):
    pass


class NotFoundError(APIStatusError):
    pass


class ConflictError(APIStatusError):
    pass


class RequestTooLargeError(APIStatusError):
    pass


class RateLimitError(APIStatusError):
    pass


class ServerError(APIStatusError):
    pass


class TranscriptFailed(A5sError):
    """A transcript ended with status ``error``; ``code`` is its job error code."""

    def __init__(self, transcript: Any) -> None:
        err = transcript.error
        self.transcript = transcript
        self.code = err.code if err else "internal_error"
        self.message = err.message if err else "The job failed."
        super().__init__(f"{transcript.id} failed: {self.code}: {self.message}")


class WaitTimeout(A5sError):
    """The job had not finished when the caller's timeout ran out; it keeps running."""

    def __init__(self, transcript: Any, timeout: float) -> None:
        self.transcript = transcript
        super().__init__(f"{transcript.id} still {transcript.status} after {timeout:g} s")


class StreamError(A5sError):
    """A realtime session's ``error`` message (``code`` per spec section 7) or a lost socket."""

    def __init__(self, code: str, message: str, close_code: int | None = None) -> None:
        self.code = code
        self.message = message
        self.close_code = close_code
        super().__init__(f"{code}: {message}")


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError,
    404: NotFoundError, 405: BadRequestError, 409: ConflictError, 413: RequestTooLargeError,
    429: RateLimitError,
}


def from_response(response: httpx.Response) -> APIStatusError:
    """The typed exception for an error response (envelope or not)."""
    try:
        body = response.json().get("error") or {}
    except (ValueError, AttributeError):
        body = {}
    if not isinstance(body, dict):
        body = {}
    retry = response.headers.get("Retry-After")
    cls = _BY_STATUS.get(response.status_code,
                         ServerError if response.status_code >= 500 else APIStatusError)
    return cls(str(body.get("message") or response.reason_phrase or "error"),
               status_code=response.status_code, code=body.get("code"), type=body.get("type"),
               param=body.get("param"),
               request_id=body.get("request_id") or response.headers.get("x-request-id"),
               retry_after=float(retry) if retry and retry.isdigit() else None)


@contextlib.contextmanager
def map_httpx_errors() -> Iterator[None]:
    try:
        yield
    except httpx.TimeoutException as exc:
        raise APITimeoutError(f"no answer in time: {exc}") from exc
    except httpx.TransportError as exc:
        raise APIConnectionError(f"cannot reach the service: {exc}") from exc
