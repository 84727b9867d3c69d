"""The dataflow graph: which component reads and writes which topic.

This table is the source of truth: each agent is registered from its node here
(``pipeline.app``), and ``a5s topology`` prints it. Batch::

    gateway ──account-events──► accounts ──dispatch──► decode ──account-events (duration)──► accounts
    accounts ──admissions──► chunk ──chunks──► transcribe ──transcribed──► diarize ──outcomes──► finalize
    decode/chunk/transcribe/diarize ──outcomes (failed)──► finalize
    finalize ──account-events (finished)──► accounts ──settled──► publish
    publish ──webhooks──► webhooks (a timer retries on schedule);  publish ──transcripts.completed──► data engineers

Realtime::

    gateway ──realtime-audio──► realtime ──realtime-messages──► gateway (owner of the session)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .topics import (ACCOUNT_EVENTS, ADMISSIONS, CHUNKS, COMPLETED, DISPATCH, OUTCOMES,
                     REALTIME_AUDIO, REALTIME_MESSAGES, SETTLED, TRANSCRIBED, WEBHOOKS,
                     TopicSpec)

__all__ = ["Node", "GRAPH", "node", "describe"]


@dataclass(frozen=True)
class Node:
    name: str
    reads: tuple[TopicSpec[Any], ...]
    writes: tuple[TopicSpec[Any], ...]
    summary: str
    tables: tuple[str, ...] = field(default_factory=tuple)
    stores: tuple[str, ...] = field(default_factory=tuple)


GRAPH: tuple[Node, ...] = (
    Node("gateway", reads=(REALTIME_MESSAGES,), writes=(ACCOUNT_EVENTS, REALTIME_AUDIO),
         summary="REST and WebSocket edge: admits requests, records transcripts, streams audio",
         stores=("clickhouse", "redis", "objects")),
    Node("accounts", reads=(ACCOUNT_EVENTS,), writes=(DISPATCH, ADMISSIONS, SETTLED),
         summary="single writer of per-account state: FIFO queue, processing slots, usage ledger",
         tables=("accounts",), stores=("clickhouse", "redis")),
    Node("decode", reads=(DISPATCH,), writes=(ACCOUNT_EVENTS, OUTCOMES),
         summary="fetch audio_url or the upload, decode to 16 kHz mono PCM, report duration",
         stores=("objects",)),
    Node("chunk", reads=(ADMISSIONS,), writes=(CHUNKS, OUTCOMES),
         summary="Silero VAD speech regions, merged into chunks", stores=("objects",)),
    Node("transcribe", reads=(CHUNKS,), writes=(TRANSCRIBED, OUTCOMES),
         summary="Whisper (CTranslate2) word-timed recognition of each chunk",
         stores=("objects",)),
    Node("diarize", reads=(TRANSCRIBED,), writes=(OUTCOMES,),
         summary="speaker embeddings and clustering; words, utterances and speakers assembled",
         stores=("objects",)),
    Node("finalize", reads=(OUTCOMES,), writes=(ACCOUNT_EVENTS,),
         summary="one write of the result and the usage event; asks the ledger to count it",
         stores=("clickhouse", "objects")),
    Node("publish", reads=(SETTLED,), writes=(WEBHOOKS, COMPLETED),
         summary="makes the outcome visible, publishes it, schedules the webhook, cleans up",
         stores=("clickhouse", "objects")),
    Node("webhooks", reads=(WEBHOOKS,), writes=(),
         summary="signed webhook deliveries; a timer retries on the spec's schedule",
         tables=("webhook-deliveries",), stores=("clickhouse", "redis", "objects")),
    Node("retention", reads=(), writes=(),
         summary="timer: expires transcripts, unused uploads and orphaned processing copies",
         stores=("clickhouse", "redis", "objects")),
    Node("realtime", reads=(REALTIME_AUDIO,), writes=(REALTIME_MESSAGES,),
         summary="per-session streaming decoder state; transcript messages back to the gateway"),
)


def node(name: str) -> Node:
    for item in GRAPH:
        if item.name == name:
            return item
    raise KeyError(name)


def describe(prefix: str = "") -> str:
    """A plain-text table of the graph, as printed by ``a5s topology``."""
    lines = [f"{'component':<11} {'reads':<34} {'writes':<58} state"]
    for item in GRAPH:
        reads = ", ".join(prefix + t.name for t in item.reads)
        writes = ", ".join(prefix + t.name for t in item.writes)
        lines.append(f"{item.name:<11} {reads:<34} {writes:<58} {', '.join(item.tables)}")
    return "\n".join(lines)
