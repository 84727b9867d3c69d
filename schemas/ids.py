"""Identifiers: time-ordered, so ``ORDER BY id`` is creation order and cursors stay stable."""

from __future__ import annotations

import os
import threading
import time

__all__ = ["new_id", "transcript_id", "file_id", "request_id", "account_id", "key_id",
           "session_id"]

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lowercase
_lock = threading.Lock()
_last = (0, 0)


def _b32(value: int, width: int) -> str:
    out = []
    for _ in range(width):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_id() -> str:
    """26 characters: 48-bit milliseconds then 80 random bits, monotonic within a process."""
    global _last
    with _lock:
        ms = time.time_ns() // 1_000_000
        last_ms, last_rand = _last
        rand = last_rand + 1 if ms <= last_ms else int.from_bytes(os.urandom(10), "big")
        ms = max(ms, last_ms)
        _last = (ms, rand)
    return _b32(ms, 10) + _b32(rand & ((1 << 80) - 1), 16)


def transcript_id() -> str:
    return "tr_" + new_id()


def file_id() -> str:
    return "file_" + new_id()


def request_id() -> str:
    return "req_" + new_id()


def account_id() -> str:
    return "acct_" + new_id()


def key_id() -> str:
    return "key_" + new_id()


def session_id() -> str:
    return "sess_" + new_id()
