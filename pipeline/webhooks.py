"""Webhook deliveries: one signed event per finished job, retried on a schedule.

Finalize publishes a ``WebhookDue`` (attempt 0) when a transcript with a
``webhook_url`` completes or fails. The ``webhooks`` agent records it in the
Faust table ``webhook-deliveries`` (keyed by transcript id, changelog-backed),
and a one-second timer delivers whatever is due among the entries this worker
owns. After each attempt the entry is rewritten (next attempt and due time, or
the outcome) and the changelog is flushed, so the schedule survives a crash of
any process: a restarted worker recovers the table and carries on. Everything
about one delivery is decided by the pure :func:`advance`.

At-least-once: a record replayed for a delivery already in the table (pending or
done) is ignored, so a replay never starts a second schedule or a second event;
a crash between a receiver's 2xx and the table write repeats that one attempt,
with the same ``webhook-id``, which receivers de-duplicate on.

Once a delivery is done (delivered, refused by a 4xx, retries exhausted, or the
transcript gone) the custom auth header value is dropped from Redis and the
job's remaining ``spec.json`` is deleted; done entries are kept some hours so
late replays still find them, then pruned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from aiokafka.partitioner import murmur2
from pydantic import BaseModel, ConfigDict

from schemas.api import WebhookEvent
from schemas.assemblyai import AaiWebhook
from schemas.records import JobSpec, WebhookDue
from schemas.settings import WebhookSettings
from security import signing
from security.addresses import AddressPolicy
from security.netguard import DeliveryError, post_json
from stores.context import Context
from stores.metrics import Metrics
from stores.objects import ObjectMissing
from stores.transcripts import Transcripts
from topologies.objects import JobFiles
from topologies.tables import WEBHOOK_DELIVERIES
from topologies.topics import CHANGELOG_CONFIG

from .faust_transport import settled

__all__ = ["Outcome", "Delivery", "Decision", "decide", "advance", "register", "address_policy",
           "event_body", "WebhookSender", "WebhookScheduler", "RETRYABLE_4XX", "MAX_REDIRECTS",
           "TABLE", "SCAN_INTERVAL_S", "abandon"]

log = logging.getLogger("a5s.webhooks")

TABLE = WEBHOOK_DELIVERIES.name
RETRYABLE_4XX = frozenset({408, 429})
"""4xx answers that mean "later", not "never": request timeout and too many requests."""
MAX_REDIRECTS = 5
"""307/308 hops followed per attempt, each to an allowed address (other redirects count as
failures and are retried)."""
SCAN_INTERVAL_S = 1.0
MAX_IN_FLIGHT = 16
STORE_RETRY_S = 5.0
"""When a store (ClickHouse, Redis, objects) fails around an attempt, try again this soon
without spending an attempt."""
KEEP_DONE = timedelta(hours=6)
"""Done entries outlive any replay of their record (offsets commit within seconds)."""

Outcome = Literal["delivered", "rejected", "gave_up", "abandoned"]
"""``delivered``: a 2xx; ``rejected``: a 4xx other than 408/429; ``gave_up``: the last retry
failed too; ``abandoned``: the transcript was deleted (or expired) before delivery."""


class Delivery(BaseModel):
    """One transcript's webhook as kept in the ``webhook-deliveries`` table."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    transcript_id: str
    account_id: str
    webhook_id: str
    attempt: int = 0
    """The next attempt to make: 0 is the first delivery, ``n`` the n-th retry."""
    due_at: datetime
    last_status: int | None = None
    """The last HTTP status received; an attempt without an HTTP answer keeps it."""
    outcome: Outcome | None = None
    finished_at: datetime | None = None
    cleaned: bool = False
    """Done and its auth header value and job spec removed."""

    @property
    def done(self) -> bool:
        return self.outcome is not None


@dataclass(frozen=True)
class Decision:
    """What follows an attempt: an outcome (done), or a retry after ``retry_in_s`` seconds."""

    outcome: Outcome | None
    retry_in_s: float | None = None


def decide(attempt: int, status: int | None, schedule: Sequence[float]) -> Decision:
    """The retry rule of spec section 6 for attempt number ``attempt`` (0 = first).

    Args:
        attempt: the attempt just made; retry ``n`` waits ``schedule[n - 1]`` after it.
        status: the receiver's HTTP status, or None when there was no HTTP answer
            (timeout, network failure, refused address).
        schedule: delays in seconds between attempts, ``settings.webhooks.retry_schedule_s``.
    """
    if status is not None and 200 <= status < 300:
        return Decision("delivered")
    if status is not None and 400 <= status < 500 and status not in RETRYABLE_4XX:
        return Decision("rejected")
    if attempt < len(schedule):
        return Decision(None, float(schedule[attempt]))
    return Decision("gave_up")


def advance(delivery: Delivery, status: int | None, now: datetime,
            schedule: Sequence[float]) -> Delivery:
    """The table entry after an attempt answered ``status`` (None: no HTTP answer) at ``now``."""
    decision = decide(delivery.attempt, status, schedule)
    last = delivery.last_status if status is None else status
    if decision.outcome is not None:
        return delivery.model_copy(update={"last_status": last, "outcome": decision.outcome,
                                           "finished_at": now})
    return delivery.model_copy(update={
        "attempt": delivery.attempt + 1, "last_status": last,
        "due_at": now + timedelta(seconds=decision.retry_in_s or 0.0)})


def abandon(delivery: Delivery, now: datetime) -> Delivery:
    return delivery.model_copy(update={"outcome": "abandoned", "finished_at": now})


def register(record: WebhookDue, existing: Delivery | None, now: datetime) -> Delivery | None:
    """The new table entry for a ``WebhookDue``, or None to ignore it.

    A transcript has one event and one schedule: a record for a delivery already
    in the table, pending or done, is a replay and changes nothing.
    """
    if existing is not None:
        return None
    due = record.not_before or now
    return Delivery(transcript_id=record.transcript_id, account_id=record.account_id,
                    webhook_id=record.webhook_id, attempt=record.attempt,
                    due_at=due if due.tzinfo else due.replace(tzinfo=UTC))


def address_policy(settings: WebhookSettings) -> AddressPolicy:
    """Where deliveries may go (``WebhookSettings.address_policy``); enforced at connect
    time on every hop."""
    return settings.address_policy()


def event_body(status: str, transcript_id: str, metadata: dict[str, Any],
               fmt: Literal["a5s", "assemblyai"] = "a5s") -> bytes:
    """The exact bytes posted and signed: ``{event, id, status, metadata}``, never the text;
    for jobs created under ``/v2``, AssemblyAI's ``{transcript_id, status}``."""
    if fmt == "assemblyai":
        return AaiWebhook(transcript_id=transcript_id,
                          status="completed" if status == "completed" else "error",
                          ).model_dump_json().encode()
    event = WebhookEvent(event="transcript.completed" if status == "completed"
                         else "transcript.failed", id=transcript_id,
                         status="completed" if status == "completed" else "error",
                         metadata=metadata)
    return event.model_dump_json().encode()


_RESERVED_HEADERS = frozenset({"webhook-id", "webhook-timestamp", "webhook-signature",
                               "content-type", "content-length", "host", "transfer-encoding"})
"""A custom auth header never replaces or duplicates these."""


class WebhookSender:
    """Makes one attempt of one delivery, and cleans up after the last."""

    def __init__(self, ctx: Context, transcripts: Transcripts) -> None:
        self.ctx = ctx
        self.transcripts = transcripts
        self.settings = ctx.settings.webhooks
        self.policy = address_policy(self.settings)

    async def attempt(self, delivery: Delivery) -> int | None | Literal["gone"]:
        """POST the event once; the HTTP status, None without an answer, or ``"gone"``
        when the transcript was deleted (a canceled job never gets here: its end
        publishes no webhook). The status is stored as the transcript's ``webhook_status_code``.
        """
        tid = delivery.transcript_id
        row = await self.transcripts.get(tid, delivery.account_id)
        if row is None or not row.webhook_url or row.status not in ("completed", "error"):
            return "gone"
        spec = await self._spec(tid)
        body = event_body(row.status, tid, json.loads(row.metadata or "{}"),
                          spec.webhook_format if spec else "a5s")
        secret = (await self.ctx.accounts.get(delivery.account_id)).webhook_secret
        headers: dict[str, str] = {}
        name = spec.webhook_auth_header_name if spec else None
        value = await self.ctx.redis.webhook_auth(tid) if name else None
        if name and isinstance(value, str) and name.lower() not in _RESERVED_HEADERS:
            headers[name] = value
        headers |= signing.headers(secret, delivery.webhook_id, body)
        try:
            status: int | None = await post_json(
                row.webhook_url, body, headers, policy=self.policy,
                timeout_s=self.settings.timeout_s, max_redirects=MAX_REDIRECTS)
        except DeliveryError as exc:
            log.info("webhook %s attempt %d: %s", tid, delivery.attempt, exc)
            status = None
        else:
            log.info("webhook %s attempt %d: HTTP %d", tid, delivery.attempt, status)
            await self.transcripts.set_webhook_status(tid, status, delivery.account_id)
        return status

    async def _spec(self, transcript_id: str) -> JobSpec | None:
        """The job's spec (auth header name, body format); kept until delivery ends."""
        with contextlib.suppress(ObjectMissing):
            raw = await self.ctx.objects.get_bytes(JobFiles(transcript_id).spec)
            return JobSpec.model_validate_json(raw)
        return None

    async def clean_up(self, delivery: Delivery) -> None:
        """The secret header value and the job spec go once delivery has ended."""
        await self.ctx.redis.drop_webhook_auth(delivery.transcript_id)
        await self.ctx.objects.delete(JobFiles(delivery.transcript_id).spec)


class WebhookScheduler:
    """The ``webhooks`` agent's handler and the timer around the delivery table.

    The table holds JSON bytes of :class:`Delivery`. It is written inside the
    agent's stream (new deliveries) and from the timer's tasks (progress); with
    ``use_partitioner`` both land in the changelog partition the key hashes to,
    which is the partition its ``webhooks`` records use.
    """

    def __init__(self, app: Any, ctx: Context, sender: WebhookSender, *, topic: str,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 metrics: Metrics | None = None) -> None:
        self.app = app
        self.ctx = ctx
        self.metrics = metrics
        self.sender = sender
        self.topic = topic
        self.partitions = ctx.settings.partitions
        self.schedule = tuple(ctx.settings.webhooks.retry_schedule_s)
        self.clock = clock
        self.table = app.Table(TABLE, default=None, key_type=str, value_type=bytes,
                               partitions=self.partitions,
                               use_partitioner=WEBHOOK_DELIVERIES.use_partitioner,
                               extra_topic_configs=CHANGELOG_CONFIG)
        self._in_flight: dict[str, asyncio.Task[None]] = {}

    # --- agent ---------------------------------------------------------------------------------

    async def on_due(self, record: WebhookDue) -> None:
        new = register(record, self._load(record.transcript_id), self.clock())
        if new is not None:
            self._save(new)

    # --- timer ---------------------------------------------------------------------------------

    async def tick(self) -> None:
        """Start the due work among this worker's entries; never waits for a delivery."""
        if not self._ready():
            return
        now = self.clock()
        owned = self._owned_partitions()
        for key, raw in list(self.table.items()):
            if key in self._in_flight or len(self._in_flight) >= MAX_IN_FLIGHT:
                continue
            if self._partition(key) not in owned:
                continue
            delivery = Delivery.model_validate_json(raw)
            if delivery.done and not delivery.cleaned:
                self._start(key, self._finish(delivery))
            elif delivery.done:
                if delivery.finished_at and now - delivery.finished_at > KEEP_DONE:
                    del self.table[key]
            elif delivery.due_at <= now:
                self._start(key, self._attempt(delivery))

    def _start(self, key: str, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._in_flight[key] = task
        task.add_done_callback(lambda _: self._in_flight.pop(key, None))

    async def _attempt(self, delivery: Delivery) -> None:
        try:
            status = await self.sender.attempt(delivery)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a store failed around the attempt: same attempt, soon
            log.warning("webhook %s: %r; trying again in %g s", delivery.transcript_id, exc,
                        STORE_RETRY_S)
            self._save(delivery.model_copy(update={
                "due_at": self.clock() + timedelta(seconds=STORE_RETRY_S)}))
            return
        now = self.clock()
        new = (abandon(delivery, now) if status == "gone" else
               advance(delivery, status if isinstance(status, int) else None, now,
                       self.schedule))
        self._save(new)
        if self.metrics is not None:
            self.metrics.webhook_deliveries.labels(new.outcome or "retrying").inc()
        await self._flush()
        if new.done:
            made = delivery.attempt + (status != "gone")
            log.info("webhook %s: %s after %d attempt(s)", new.transcript_id, new.outcome, made)
            await self._finish(new)

    async def _finish(self, delivery: Delivery) -> None:
        try:
            await self.sender.clean_up(delivery)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # retried by the next tick: the entry stays uncleaned
            log.warning("webhook %s: clean-up failed: %r", delivery.transcript_id, exc)
            return
        self._save(delivery.model_copy(update={"cleaned": True}))

    # --- table ---------------------------------------------------------------------------------

    def _load(self, key: str) -> Delivery | None:
        raw = self.table.get(key)
        return None if raw is None else Delivery.model_validate_json(raw)

    def _save(self, delivery: Delivery) -> None:
        self.table[delivery.transcript_id] = delivery.model_dump_json().encode()

    async def _flush(self) -> None:
        """Send the changelog now, so the next step is on the broker before anything else."""
        try:
            await self.app.producer.flush()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the buffered change still goes out once the broker is back
            log.warning("webhook table: changelog flush failed: %r", exc)

    def _ready(self) -> bool:
        """Not while the table is being rebuilt: a half-recovered entry could repeat work."""
        return settled(self.app)

    def _owned_partitions(self) -> set[int]:
        return {tp.partition for tp in self.app.consumer.assignment() if tp.topic == self.topic}

    def _partition(self, key: str) -> int:
        """The partition the producer's default partitioner (murmur2) gives ``key``."""
        return (murmur2(key.encode()) & 0x7FFFFFFF) % self.partitions
