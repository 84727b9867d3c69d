"""Verifying a5s webhook deliveries in a receiver (Standard Webhooks, spec section 5.8).

::

    from a5s.webhooks import WebhookVerificationError, verify

    try:
        verify(secret, request.headers, raw_body)   # secret: the account's "whsec_..." value
    except WebhookVerificationError:
        return 400

Pass the raw body bytes exactly as received, before any JSON parsing. Deliveries are
at-least-once: de-duplicate on the ``webhook-id`` header, which stays the same for
every retry of one event. See ``docs/webhooks.md``.
"""

from __future__ import annotations

from security.signing import (DEFAULT_TOLERANCE_S, SECRET_PREFIX, SIGNATURE_VERSION,
                              WebhookVerificationError, sign, verify)

__all__ = ["verify", "sign", "WebhookVerificationError", "DEFAULT_TOLERANCE_S", "SECRET_PREFIX",
           "SIGNATURE_VERSION"]
