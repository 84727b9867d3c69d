"""HMAC signatures the service hands out and checks: webhook deliveries and upload URLs.

**Webhooks** (Standard Webhooks, spec section 5.8). A delivery carries ``webhook-id``,
``webhook-timestamp`` and ``webhook-signature``. The signature is ``v1,<base64
HMAC-SHA256>`` keyed with the base64-decoded account secret (``whsec_<base64>``) over
``{webhook-id}.{webhook-timestamp}.{raw body}``. Receivers reject timestamps more than
five minutes away from their clock, which bounds replays; ``webhook-id`` stays the same
across retries so they can de-duplicate. ``verify`` is what a receiver runs; the client
SDK (:mod:`a5s.webhooks`) re-exports it, so both sides of the contract live in one module.

**Upload URLs** served by the gateway for the file store: ``<UPLOAD_PATH><file_id>?expires=
<unix s>&signature=<hex>``, the signature an HMAC-SHA256 over ``PUT\n<path>\n<expires>``
keyed with a per-data-directory secret (:func:`upload_url_key`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "SECRET_PREFIX", "SIGNATURE_VERSION", "DEFAULT_TOLERANCE_S", "WebhookVerificationError",
    "new_secret", "sign", "headers", "verify",
    "UPLOAD_PATH", "upload_url_key", "sign_url", "url_signature_matches", "sign_upload",
    "upload_signature_matches",
]

SECRET_PREFIX = "whsec_"
SIGNATURE_VERSION = "v1"
DEFAULT_TOLERANCE_S = 300
_SECRET_BYTES = 32


class WebhookVerificationError(Exception):
    """A delivery's signature headers are missing, malformed, stale or do not match."""


def new_secret() -> str:
    """A fresh account secret: ``whsec_`` and the base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(_SECRET_BYTES)).decode("ascii")


def _key(secret: str) -> bytes:
    raw = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("webhook secret must be 'whsec_' followed by base64") from exc
    if not key:
        raise ValueError("webhook secret is empty")
    return key


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value, ``v1,<base64>``, for one delivery.

    Args:
        secret: the account secret, with or without the ``whsec_`` prefix.
        msg_id: the ``webhook-id`` (stable across retries of one event).
        timestamp: the ``webhook-timestamp``, integer Unix seconds.
        body: the exact bytes sent as the request body.
    """
    signed = f"{msg_id}.{int(timestamp)}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode('ascii')}"


def headers(secret: str, msg_id: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """The headers of one signed JSON delivery; ``now`` (Unix seconds) defaults to the clock."""
    timestamp = int(time.time() if now is None else now)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, msg_id, timestamp, body),
        "content-type": "application/json",
    }


def verify(secret: str, headers: Mapping[str, str], body: bytes, *,
           tolerance_s: int = DEFAULT_TOLERANCE_S, now: float | None = None) -> None:
    """Check a delivery; return quietly when it is authentic and fresh.

    ``webhook-signature`` may hold several space-separated signatures (as during a
    secret rotation); one matching ``v1`` entry is enough. Header names are matched
    case-insensitively, whatever mapping they arrive in.

    Raises:
        WebhookVerificationError: a header is missing or malformed, the timestamp is
            more than ``tolerance_s`` seconds in the past or the future, or no
            signature matches.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    try:
        msg_id = lowered["webhook-id"]
        stamp = lowered["webhook-timestamp"]
        signatures = lowered["webhook-signature"]
    except KeyError as exc:
        raise WebhookVerificationError(f"missing header {exc.args[0]}") from None
    if not stamp.isascii() or not stamp.isdigit():
        raise WebhookVerificationError("webhook-timestamp is not an integer")
    timestamp = int(stamp)
    clock = time.time() if now is None else now
    if timestamp < clock - tolerance_s:
        raise WebhookVerificationError("webhook-timestamp is too old")
    if timestamp > clock + tolerance_s:
        raise WebhookVerificationError("webhook-timestamp is too far in the future")
    try:
        expected = sign(secret, msg_id, timestamp, body).partition(",")[2].encode()
    except ValueError as exc:
        raise WebhookVerificationError(str(exc)) from exc
    for entry in signatures.split():
        version, _, value = entry.partition(",")
        if version == SIGNATURE_VERSION and hmac.compare_digest(value.encode(), expected):
            return
    raise WebhookVerificationError("no matching signature")


# --- upload URLs -----------------------------------------------------------------------------

UPLOAD_PATH = "/v1/uploads/"
"""The path of a gateway-served upload URL; the signature covers it."""


def upload_url_key(path: Path) -> bytes:
    """The secret of upload URLs, kept in ``path`` (mode 0600); created on first use."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return bytes.fromhex(path.read_text().strip())


def sign_url(key: bytes, method: str, path: str, expires: int) -> str:
    """The hex ``signature`` of a gateway URL: ``method`` on ``path`` until ``expires``."""
    message = f"{method}\n{path}\n{expires}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def url_signature_matches(key: bytes, method: str, path: str, expires: str,
                          signature: str) -> bool:
    """Whether the query's ``expires`` and ``signature`` were signed for ``method`` on
    ``path`` (compared in constant time; expiry is the caller's to check)."""
    return expires.isascii() and expires.isdigit() and hmac.compare_digest(
        signature.encode(), sign_url(key, method, path, int(expires)).encode())


def sign_upload(key: bytes, file_id: str, expires: int) -> str:
    """The hex ``signature`` of an upload URL for ``file_id`` valid until ``expires``."""
    return sign_url(key, "PUT", f"{UPLOAD_PATH}{file_id}", expires)


def upload_signature_matches(key: bytes, file_id: str, expires: str, signature: str) -> bool:
    """Whether the query's ``expires`` and ``signature`` were signed for ``file_id``."""
    return url_signature_matches(key, "PUT", f"{UPLOAD_PATH}{file_id}", expires, signature)
