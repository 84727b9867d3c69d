"""Redis keys, declared once: what each holds, who writes it and who reads it.

Redis carries the state the gateway must check at request time and the pipeline
writes (the ledger snapshot), the flags the gateway sets for the pipeline (a job
canceled, a webhook's secret header value), and the gateway's own admission state
(rate buckets, waiting jobs, idempotency records, live-session leases). Code reaches a
key only through a declaration here (``CANCELED.key(tid)``) or the typed methods of
``stores.redis.RedisStore`` built on them; graph nodes name the keys they use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["RedisKey", "REDIS_KEYS", "CANCELED", "WEBHOOK_AUTH", "LEDGER", "QUEUED", "UPLOAD",
           "UPLOAD_CLAIM", "LIVE", "LIVE_HOLDS", "IDEMPOTENCY", "RATE", "RETENTION_LOCK", "ACCOUNT_CACHE",
           "KEY_CACHE", "AUTH_GENERATION", "TRANSCRIPT", "TRANSCRIPT_LIST"]


@dataclass(frozen=True)
class RedisKey:
    """``kind:<part>:...`` under the store's prefix; ``parts`` name the variable parts."""

    kind: str
    parts: tuple[str, ...]
    type: Literal["json", "set", "zset", "counter", "hash"]
    description: str
    ttl_s: float | None = None

    @property
    def pattern(self) -> str:
        return ":".join((self.kind, *(f"<{p}>" for p in self.parts)))

    def key(self, *values: str) -> tuple[str, ...]:
        """The key's parts for ``RedisStore``; refuses a wrong number of parts."""
        if len(values) != len(self.parts):
            raise ValueError(f"{self.pattern} takes {len(self.parts)} part(s), got {values!r}")
        return (self.kind, *values)


DAY_S = 24 * 3600

CANCELED = RedisKey("canceled", ("transcript_id",), "json",
                    "set by DELETE of a queued/processing job; every stage drops its work",
                    ttl_s=7 * DAY_S)
WEBHOOK_AUTH = RedisKey("webhook-auth", ("transcript_id",), "json",
                        "the secret webhook_auth_header_value, kept out of ClickHouse and logs")
LEDGER = RedisKey("ledger", ("account_id",), "json",
                  "used/reserved seconds and job counts, the accounts agent's snapshot")
QUEUED = RedisKey("queued", ("account_id",), "set",
                  "ids of the account's waiting jobs (bounded by max_queued_jobs)")
UPLOAD = RedisKey("upload", ("file_id",), "json", "owner, size and time of an upload")
UPLOAD_CLAIM = RedisKey("upload-claim", ("file_id",), "json",
                        "the transcript that used an upload (one job per file)")
LIVE = RedisKey("live", ("account_id",), "zset", "live-session leases, scored by expiry")
LIVE_HOLDS = RedisKey("live-holds", ("account_id",), "hash",
                      "usage (ms) each leased live session was given; counted at admission "
                      "until the ledger lists the session as held", ttl_s=DAY_S)
IDEMPOTENCY = RedisKey("idem", ("account_id", "key_hash"), "json",
                       "Idempotency-Key records: body hash and transcript id")
RATE = RedisKey("rate", ("bucket",), "counter", "GCRA rate-limit buckets")
RETENTION_LOCK = RedisKey("retention-sweep", (), "json",
                          "one replica sweeps per interval")
ACCOUNT_CACHE = RedisKey("account", ("account_id",), "json", "cached account rows")
KEY_CACHE = RedisKey("key", ("key_hash",), "json", "cached API-key lookups")
AUTH_GENERATION = RedisKey("auth-generation", (), "json",
                           "a token replaced on every key revocation and account change; "
                           "a gateway reuses a key's verified account while it holds")
TRANSCRIPT = RedisKey("transcript", ("transcript_id",), "hash",
                      "read model of a live transcript: its current row and result, written "
                      "after ClickHouse by every row writer, and its processing row, kept "
                      "here only (docs/job-path.md)")

TRANSCRIPT_LIST = RedisKey("transcripts", ("account_id",), "hash",
                           "stamp of an account's transcript list: bumped after ClickHouse by "
                           "every row writer, which notes its transcript; the gateway reuses a "
                           "list page while it holds, and brings a page up to date from the "
                           "noted rows (docs/job-path.md)")

REDIS_KEYS: tuple[RedisKey, ...] = (CANCELED, WEBHOOK_AUTH, LEDGER, QUEUED, UPLOAD, UPLOAD_CLAIM,
                                    LIVE, LIVE_HOLDS, IDEMPOTENCY, RATE, RETENTION_LOCK, ACCOUNT_CACHE,
                                    KEY_CACHE, AUTH_GENERATION, TRANSCRIPT, TRANSCRIPT_LIST)
