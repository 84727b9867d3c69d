"""Every topic of a5s, declared once: name, key, value schema, partitions, retention.

Topics are created explicitly at start-up (``ensure_topics``); nothing relies on
broker auto-creation. Agents and the gateway take topic objects from here, so no
topic name is a string literal anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter

from schemas.records import (AccountEvent, Admission, ChunkPlan, CompletedTranscript, Dispatch,
                             JobOutcome, RealtimeAudio, RealtimeMessage, Settled, Transcribed,
                             WebhookDue)

__all__ = ["TopicSpec", "TOPICS", "ACCOUNT_EVENTS", "DISPATCH", "ADMISSIONS", "CHUNKS",
           "TRANSCRIBED", "OUTCOMES", "SETTLED", "WEBHOOKS", "COMPLETED", "REALTIME_AUDIO",
           "REALTIME_MESSAGES", "CHANGELOG_CONFIG"]

T = TypeVar("T")
DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class TopicSpec(Generic[T]):
    """One topic: ``name`` is prefixed with the configured ``topic_prefix`` at run time."""

    name: str
    key: str
    value: Any
    retention_ms: int = 7 * DAY_MS
    compacted: bool = False
    partitions: int | None = None
    """``None`` takes the configured default; realtime topics are sized the same way."""
    description: str = ""

    @property
    def adapter(self) -> TypeAdapter[T]:
        return _adapter(self.value)

    def encode(self, value: T) -> bytes:
        return self.adapter.dump_json(value)

    def decode(self, raw: bytes) -> T:
        return self.adapter.validate_json(raw)

    def config(self) -> dict[str, str]:
        cfg = {"retention.ms": str(self.retention_ms),
               "cleanup.policy": "compact" if self.compacted else "delete"}
        if self.retention_ms < DAY_MS:
            cfg["segment.ms"] = str(max(self.retention_ms // 4, 60_000))
        return cfg


_ADAPTERS: dict[int, TypeAdapter[Any]] = {}


def _adapter(value: Any) -> TypeAdapter[Any]:
    key = id(value)
    if key not in _ADAPTERS:
        _ADAPTERS[key] = TypeAdapter(value)
    return _ADAPTERS[key]


ACCOUNT_EVENTS = TopicSpec("account-events", "account_id", AccountEvent,
                           description="submitted, canceled, duration known, finished, "
                                       "limits changed, live sessions opened/closed")
DISPATCH = TopicSpec("dispatch", "transcript_id", Dispatch,
                     description="a queued job got a processing slot")
ADMISSIONS = TopicSpec("admissions", "transcript_id", Admission,
                       description="quota verdict once the audio duration is known")
CHUNKS = TopicSpec("chunks", "transcript_id", ChunkPlan,
                   description="speech chunks found by VAD, audio by object-store key")
TRANSCRIBED = TopicSpec("transcribed", "transcript_id", Transcribed,
                        description="recognised words, by object-store key")
OUTCOMES = TopicSpec("outcomes", "transcript_id", JobOutcome,
                     description="a job's end, completed or failed, for finalize")
SETTLED = TopicSpec("settled", "transcript_id", Settled,
                    description="outcome counted by the ledger, ready to be made visible")
WEBHOOKS = TopicSpec("webhooks", "transcript_id", WebhookDue,
                     description="webhook deliveries due, with their attempt number")
COMPLETED = TopicSpec("transcripts.completed", "transcript_id", CompletedTranscript,
                      retention_ms=30 * DAY_MS,
                      description="public: every finished transcript, for data engineers")
REALTIME_AUDIO = TopicSpec("realtime-audio", "session_id", RealtimeAudio,
                           retention_ms=10 * 60 * 1000,
                           description="live audio frames (kept minutes only)")
REALTIME_MESSAGES = TopicSpec("realtime-messages", "session_id", RealtimeMessage,
                              retention_ms=10 * 60 * 1000,
                              description="live transcript messages for the owning gateway")

CHANGELOG_CONFIG = {"segment.bytes": str(1 << 20)}
"""Topic settings for the changelogs of Faust tables (Faust creates them, compacted).

Compaction only rewrites closed segments, and a segment closes at ``segment.bytes``
(1 GiB by default). An account's state is written whole on every change, so until a
segment closes the changelog holds every version: 300 queued jobs left 21 MB in the
accounts changelog of the embedded broker, which keeps its log in memory. With
1 MiB segments old versions are compacted away as they go (measured: 2,000 writes of
20 KB on 3 keys kept 2.7 MB on disk instead of 80 MB), and a recovering worker reads
little more than the latest state.
"""

TOPICS: tuple[TopicSpec[Any], ...] = (
    ACCOUNT_EVENTS, DISPATCH, ADMISSIONS, CHUNKS, TRANSCRIBED, OUTCOMES, SETTLED, WEBHOOKS, COMPLETED,
    REALTIME_AUDIO, REALTIME_MESSAGES,
)
