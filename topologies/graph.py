"""The dataflow graph: every node and every channel it reads and writes.

This table is the source of truth. The worker registers its agents, timers and tasks
from the nodes here alone (``pipeline.app.Pipeline.register``: each node names its
handler; only the consumer's own partition watch is not a node), a node's publish
function refuses a topic the node does not declare in ``writes``, and ``a5s topology``
prints it. Batch::

    gateway ──account-events──► accounts ──dispatch──► decode ──account-events (duration)──► accounts
    accounts ──admissions──► chunk ──chunks──► transcribe ──transcribed──► diarize ──outcomes──► finalize
    transcribe ──outcomes (completed, not diarized: /v2 without speaker_labels)──► finalize
    decode/chunk/transcribe/diarize ──outcomes (failed)──► finalize
    finalize ──account-events (finished)──► accounts ──settled──► publish
    publish ──webhooks──► webhooks (a timer retries on schedule);  publish ──transcripts.completed──► data engineers
    reconcile (timer) ──account-events (submitted again, session lost) / dispatch (resumed)──► accounts / decode

Realtime::

    gateway ──realtime-audio──► realtime ──realtime-messages──► gateway (owner of the session)
    realtime ──realtime-audio (checkpoints)──► realtime (a worker taking a session over)

Object keys and Redis keys are channels too: diarize reads ``speech.json`` that chunk
wrote, and every stage reads the ``canceled`` flag the gateway sets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args, get_origin

from . import objects as O
from . import redis_keys as R
from .objects import ObjectKey
from .redis_keys import RedisKey
from .tables import ACCOUNT_RECENT, ACCOUNTS, WEBHOOK_DELIVERIES, TableSpec
from .topics import (ACCOUNT_EVENTS, ADMISSIONS, CHUNKS, COMPLETED, DISPATCH, OUTCOMES,
                     REALTIME_AUDIO, REALTIME_MESSAGES, SETTLED, TOPICS, TRANSCRIBED, WEBHOOKS,
                     TopicSpec)

__all__ = ["Node", "GRAPH", "node", "describe", "worker_nodes", "UndeclaredWrite"]

Kind = Literal["edge", "stage", "service"]


class UndeclaredWrite(RuntimeError):
    """A node published to a topic its declaration does not list in ``writes``."""


@dataclass(frozen=True)
class Node:
    """One component of the dataflow.

    ``kind``: ``edge`` runs in the gateway process (no handler); ``stage`` is a batch
    stage whose ``handler`` (``module:function``) is ``run(ports, record)`` for each record
    of ``reads[0]``; ``service`` names a ``handler`` that installs the node's agents,
    timers or tasks on the worker (``handler(pipeline, node)``).
    """

    name: str
    kind: Kind
    summary: str
    handler: str | None = None
    reads: tuple[TopicSpec[Any], ...] = ()
    writes: tuple[TopicSpec[Any], ...] = ()
    tables: tuple[TableSpec, ...] = ()
    """Tables the node owns (the only writer)."""
    tables_read: tuple[TableSpec, ...] = ()
    """Tables of another node it reads in the same worker (same partitions)."""
    objects_read: tuple[ObjectKey, ...] = ()
    objects_written: tuple[ObjectKey, ...] = ()
    objects_deleted: tuple[ObjectKey, ...] = ()
    """Clean-up: what the node removes once a job no longer needs it."""
    redis_read: tuple[RedisKey, ...] = ()
    redis_written: tuple[RedisKey, ...] = ()
    trims: tuple[TopicSpec[Any], ...] = ()
    """Topics whose records the node deletes once no reader needs them (before retention)."""
    clickhouse: bool = False
    """Reads or writes ClickHouse's tables (transcripts, results, usage, accounts)."""
    retry_forever: bool = False
    """A stage that must not end a job itself (it counts or announces it): retried until it
    succeeds. Other stages end the job with ``internal_error`` once retries run out."""
    batched: bool = False
    """Several records in flight at once (``models.transcribe_concurrency`` actors)."""
    parallel: bool = False
    """Several records at once, one per thread of the models pool (``models.stage_workers``
    actors)."""

    @property
    def stores(self) -> tuple[str, ...]:
        """The stores the node touches, derived from what it declares."""
        redis = self.redis_read or self.redis_written
        objects = self.objects_read or self.objects_written or self.objects_deleted
        return tuple(name for name, used in (("clickhouse", self.clickhouse), ("redis", redis),
                                             ("objects", objects)) if used)

    def check_write(self, spec: TopicSpec[Any]) -> None:
        """Raises ``UndeclaredWrite`` unless this node declares ``spec`` in ``writes``."""
        if spec not in self.writes:
            raise UndeclaredWrite(f"node {self.name!r} does not declare a write to "
                                  f"{spec.name!r} (declared: "
                                  f"{', '.join(t.name for t in self.writes) or 'none'})")


GRAPH: tuple[Node, ...] = (
    Node("gateway", "edge",
         "REST and WebSocket edge: admits requests, records transcripts, streams audio",
         reads=(REALTIME_MESSAGES,), writes=(ACCOUNT_EVENTS, REALTIME_AUDIO),
         objects_written=(O.UPLOAD, O.SPEC), objects_read=(O.UPLOAD, O.REDACTED_AUDIO),
         objects_deleted=O.OBJECT_KEYS,
         redis_read=(R.LEDGER, R.QUEUED, R.UPLOAD, R.UPLOAD_CLAIM, R.LIVE, R.LIVE_HOLDS,
                     R.IDEMPOTENCY, R.RATE, R.ACCOUNT_CACHE, R.KEY_CACHE, R.AUTH_GENERATION,
                     R.TRANSCRIPT, R.TRANSCRIPT_LIST),
         redis_written=(R.CANCELED, R.WEBHOOK_AUTH, R.QUEUED, R.UPLOAD, R.UPLOAD_CLAIM, R.LIVE,
                        R.LIVE_HOLDS, R.IDEMPOTENCY, R.RATE, R.ACCOUNT_CACHE, R.KEY_CACHE,
                        R.AUTH_GENERATION, R.TRANSCRIPT, R.TRANSCRIPT_LIST),
         clickhouse=True),
    Node("accounts", "service",
         "single writer of per-account state: FIFO queue, processing slots, usage ledger",
         handler="pipeline.app:Pipeline.install_accounts",
         reads=(ACCOUNT_EVENTS,), writes=(DISPATCH, ADMISSIONS, SETTLED),
         tables=(ACCOUNTS, ACCOUNT_RECENT),
         redis_read=(R.TRANSCRIPT,),
         redis_written=(R.LEDGER, R.QUEUED, R.TRANSCRIPT, R.TRANSCRIPT_LIST),
         clickhouse=True),
    Node("reconcile", "service",
         "timer: submits again accepted jobs the accounts agent never saw, re-dispatches "
         "the jobs its recovered ledger holds as processing, and frees the usage held for "
         "live sessions whose lease is gone",
         handler="pipeline.app:Pipeline.install_reconcile",
         writes=(ACCOUNT_EVENTS, DISPATCH), tables_read=(ACCOUNTS, ACCOUNT_RECENT),
         redis_read=(R.CANCELED, R.ACCOUNT_CACHE, R.LIVE),
         clickhouse=True),
    Node("decode", "stage",
         "fetch audio_url or the upload, decode to 16 kHz mono PCM (one a channel for a "
         "multichannel job), report duration",
         handler="pipeline.stages.decode:run", parallel=True,
         reads=(DISPATCH,), writes=(ACCOUNT_EVENTS, OUTCOMES),
         objects_read=(O.SPEC, O.UPLOAD, O.DURATION, O.CHANNELS),
         objects_written=(O.AUDIO, O.DURATION, O.CHANNEL_AUDIO, O.CHANNELS),
         redis_read=(R.CANCELED,)),
    Node("chunk", "stage", "Silero VAD speech regions (of each channel of a multichannel "
         "job), merged into chunks",
         handler="pipeline.stages.chunk:run", parallel=True,
         reads=(ADMISSIONS,), writes=(CHUNKS, OUTCOMES),
         objects_read=(O.AUDIO, O.CHANNEL_AUDIO, O.CHUNKS),
         objects_written=(O.SPEECH, O.CHANNEL_SPEECH, O.CHUNKS),
         redis_read=(R.CANCELED,)),
    Node("transcribe", "stage", "Whisper (CTranslate2) word-timed recognition of each chunk; "
         "PII redacted from the words (and audio) before they are stored; prompted with the job's "
         "key terms; completes a job that is not diarized and mixed down to one audio "
         "(JobSpec.assembled_by_transcribe)",
         handler="pipeline.stages.transcribe:run", batched=True,
         reads=(CHUNKS,), writes=(TRANSCRIBED, OUTCOMES),
         objects_read=(O.AUDIO, O.CHANNEL_AUDIO, O.WORDS, O.SPEC),
         objects_written=(O.WORDS, O.REDACTED_AUDIO, O.RESULT),
         redis_read=(R.CANCELED,)),
    Node("diarize", "stage",
         "speaker embeddings and clustering (a multichannel job's speaker is its channel); "
         "words, utterances and speakers assembled",
         handler="pipeline.stages.diarize:run", parallel=True,
         reads=(TRANSCRIBED,), writes=(OUTCOMES,),
         objects_read=(O.AUDIO, O.SPEECH, O.CHANNEL_SPEECH, O.WORDS, O.SPEC, O.RESULT),
         objects_written=(O.RESULT,), redis_read=(R.CANCELED,)),
    Node("finalize", "stage",
         "one write of the result and the usage event; asks the ledger to count it",
         handler="pipeline.stages.finalize:run", retry_forever=True,
         reads=(OUTCOMES,), writes=(ACCOUNT_EVENTS,),
         objects_read=(O.RESULT,), objects_deleted=O.PROCESSING_KEYS,
         redis_read=(R.TRANSCRIPT,), redis_written=(R.TRANSCRIPT,),
         clickhouse=True),
    Node("publish", "stage",
         "makes the outcome visible, publishes it, schedules the webhook, cleans up",
         handler="pipeline.stages.publish:run", retry_forever=True,
         reads=(SETTLED,), writes=(WEBHOOKS, COMPLETED),
         objects_read=(O.RESULT, O.SPEC), objects_deleted=O.PROCESSING_KEYS,
         redis_read=(R.TRANSCRIPT,), redis_written=(R.TRANSCRIPT, R.TRANSCRIPT_LIST),
         clickhouse=True),
    Node("webhooks", "service",
         "signed webhook deliveries; a timer retries on the spec's schedule",
         handler="pipeline.app:Pipeline.install_webhooks",
         reads=(WEBHOOKS,), tables=(WEBHOOK_DELIVERIES,),
         objects_read=(O.SPEC,), objects_deleted=(O.SPEC,),
         redis_read=(R.WEBHOOK_AUTH, R.ACCOUNT_CACHE, R.TRANSCRIPT),
         redis_written=(R.WEBHOOK_AUTH, R.TRANSCRIPT, R.TRANSCRIPT_LIST),
         clickhouse=True),
    Node("retention", "service",
         "timer: expires transcripts, unused uploads and orphaned processing copies",
         handler="pipeline.app:Pipeline.install_retention",
         objects_deleted=O.OBJECT_KEYS,
         redis_read=(R.UPLOAD, R.UPLOAD_CLAIM, R.RETENTION_LOCK, R.TRANSCRIPT),
         redis_written=(R.WEBHOOK_AUTH, R.UPLOAD, R.UPLOAD_CLAIM, R.RETENTION_LOCK,
                        R.TRANSCRIPT, R.TRANSCRIPT_LIST),
         clickhouse=True),
    Node("realtime", "service",
         "per-session streaming decoder state; transcript messages back to the gateway",
         handler="pipeline.app:Pipeline.install_realtime",
         reads=(REALTIME_AUDIO,), writes=(REALTIME_MESSAGES, REALTIME_AUDIO),
         trims=(REALTIME_AUDIO, REALTIME_MESSAGES)),
    Node("trim", "service",
         "timer: deletes the batch topics' records the workers' group committed log_keep_s "
         "ago (the embedded broker's CPU grows with its log)",
         handler="pipeline.app:Pipeline.install_trim",
         trims=(ACCOUNT_EVENTS, DISPATCH, ADMISSIONS, CHUNKS, TRANSCRIBED, OUTCOMES, SETTLED,
                WEBHOOKS)),
)


def node(name: str) -> Node:
    for item in GRAPH:
        if item.name == name:
            return item
    raise KeyError(name)


def worker_nodes() -> tuple[Node, ...]:
    """The nodes a pipeline worker runs: every node with a handler."""
    return tuple(item for item in GRAPH if item.handler is not None)


def _names(items: Iterable[Any], attr: str, prefix: str = "") -> str:
    return ", ".join(prefix + getattr(i, attr) for i in items) or "-"


def _who(pred: Any) -> str:
    return ", ".join(n.name for n in GRAPH if pred(n)) or "-"


def _type_name(value: Any) -> str:
    """``AccountEvent`` is an annotated union of event models: named by its members."""
    args = get_args(value)
    if args and get_origin(value) is Annotated:
        return " | ".join(a.__name__ for a in get_args(args[0]))
    return str(getattr(value, "__name__", value))


def describe(prefix: str = "") -> str:
    """Every node and channel as plain text, as printed by ``a5s topology``."""
    out = ["NODES (kind, handler [x records at once])"]
    for item in GRAPH:
        at_once = (" x models.transcribe_concurrency" if item.batched else
                   " x models.stage_workers" if item.parallel else "")
        out.append(f"  {item.name:<11} {item.kind:<8} {item.handler or '(gateway process)'}"
                   f"{at_once}")
        out.append(f"      {item.summary}")
    out += ["", "TOPICS (key -> value)                          written by / read by"]
    for t in TOPICS:
        out.append(f"  {prefix + t.name:<24} {t.key:<15} {_type_name(t.value)}")
        out.append(f"      writers: {_who(lambda n, t=t: t in n.writes)}; "
                   f"readers: {_who(lambda n, t=t: t in n.reads)}; "
                   f"trimmed by: {_who(lambda n, t=t: t in n.trims)}")
    out += ["", "TABLES (key -> value)                          owned by / read by"]
    from .tables import TABLES
    for tb in TABLES:
        out.append(f"  {tb.name:<24} {tb.key:<15} {tb.value}")
        out.append(f"      owner: {_who(lambda n, tb=tb: tb in n.tables)}; "
                   f"also read by: {_who(lambda n, tb=tb: tb in n.tables_read)}")
    out += ["", "OBJECT KEYS                                    written by / read by"]
    for ok in O.OBJECT_KEYS:
        out.append(f"  {ok.pattern:<28} {ok.description}")
        out.append(f"      writers: {_who(lambda n, ok=ok: ok in n.objects_written)}; "
                   f"readers: {_who(lambda n, ok=ok: ok in n.objects_read)}; "
                   f"deleted by: {_who(lambda n, ok=ok: ok in n.objects_deleted)}")
    out += ["", "REDIS KEYS                                     written by / read by"]
    for rk in R.REDIS_KEYS:
        out.append(f"  {rk.pattern:<28} {rk.type:<7} {rk.description}")
        out.append(f"      writers: {_who(lambda n, rk=rk: rk in n.redis_written)}; "
                   f"readers: {_who(lambda n, rk=rk: rk in n.redis_read)}")
    return "\n".join(out)
