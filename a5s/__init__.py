"""a5s client-side helpers: what API clients and webhook receivers import.

::

    from a5s import Client
    transcript = Client("a5s_sk_...").transcribe("meeting.mp3")

``a5s.webhooks.verify`` checks webhook signatures; ``a5s.realtime.stream`` streams live
audio. See ``docs/client.md``.
"""

from .client import DEFAULT_URL, AsyncClient, Client
from .errors import (A5sError, APIConnectionError, APIStatusError, APITimeoutError,
                     AuthenticationError, BadRequestError, ConflictError, NotFoundError,
                     PermissionDeniedError, RateLimitError, RequestTooLargeError, ServerError,
                     StreamError, TranscriptFailed, WaitTimeout)
from .webhooks import WebhookVerificationError, verify

__all__ = ["Client", "AsyncClient", "DEFAULT_URL", "A5sError", "APIConnectionError",
           "APITimeoutError", "APIStatusError", "BadRequestError", "AuthenticationError",
           "PermissionDeniedError", "NotFoundError", "ConflictError", "RequestTooLargeError",
           "RateLimitError", "ServerError", "TranscriptFailed", "WaitTimeout", "StreamError",
           "verify", "WebhookVerificationError"]
