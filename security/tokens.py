"""Bearer credentials: reading ``Authorization: Bearer <token>`` and comparing a shared token.

Every place that reads a bearer token (API keys, the console token, the ClickHouse
proxy's token, the SQL listener) goes through :func:`bearer_token`, and a token
compared with a configured one goes through :func:`token_matches` (constant time: an
``==`` on a secret leaks its prefix through timing).
"""

from __future__ import annotations

import hmac

__all__ = ["bearer_token", "token_matches"]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization`` value whose scheme is ``Bearer`` (any case), or None
    for another scheme or none; an empty token comes back as ``""``."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def token_matches(given: str | None, expected: str) -> bool:
    """Whether ``given`` is the configured token; a missing or empty one never matches."""
    return bool(given) and bool(expected) and hmac.compare_digest(
        given.encode(), expected.encode())  # type: ignore[union-attr]
