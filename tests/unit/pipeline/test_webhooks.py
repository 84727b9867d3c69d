"""Webhook delivery rules without a broker: retry decisions, the schedule, the table entries."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from a5s.webhooks import WebhookVerificationError, verify
from security import signing
from stores.retention import webhook_window
from pipeline.webhooks import (Delivery, WebhookScheduler, address_policy, advance, decide,
                               event_body, register)
from schemas.records import WebhookDue
from schemas.settings import Settings, WebhookSettings

SPEC_DELAYS = (30, 120, 600, 1800, 3600, 7200, 14400, 28800, 28800)
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _delivery(**fields: Any) -> Delivery:
    return Delivery(transcript_id="tr_1", account_id="acct", webhook_id="msg_1", due_at=T0,
                    **fields)


def test_production_schedule_is_the_spec_schedule() -> None:
    hooks = Settings().webhooks
    assert tuple(hooks.retry_schedule_s) == SPEC_DELAYS
    assert hooks.timeout_s == 15
    assert 23 * 3600 < sum(hooks.retry_schedule_s) < 25 * 3600  # "about 24 hours"


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_any_2xx_is_delivered(status: int) -> None:
    assert decide(0, status, SPEC_DELAYS).outcome == "delivered"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 413, 422, 499])
def test_a_4xx_other_than_408_and_429_stops(status: int) -> None:
    assert decide(0, status, SPEC_DELAYS).outcome == "rejected"


@pytest.mark.parametrize("status", [None, 408, 429, 500, 502, 503, 504, 301, 302, 100])
def test_timeouts_408_429_5xx_and_redirects_are_retried(status: int | None) -> None:
    decision = decide(0, status, SPEC_DELAYS)
    assert decision.outcome is None and decision.retry_in_s == 30


def test_failures_follow_the_schedule_then_give_up() -> None:
    delivery, now, waits = _delivery(), T0, []
    while not delivery.done:
        before = now
        delivery = advance(delivery, 503, now, SPEC_DELAYS)
        if not delivery.done:
            waits.append((delivery.due_at - before).total_seconds())
            now = delivery.due_at
    assert tuple(waits) == SPEC_DELAYS
    assert delivery.outcome == "gave_up" and delivery.attempt == len(SPEC_DELAYS)
    assert delivery.last_status == 503 and delivery.finished_at == now


def test_no_answer_keeps_the_last_http_status() -> None:
    delivery = advance(_delivery(), 500, T0, SPEC_DELAYS)
    delivery = advance(delivery, None, T0, SPEC_DELAYS)
    assert delivery.last_status == 500 and delivery.attempt == 2 and not delivery.done
    done = advance(delivery, 204, T0, SPEC_DELAYS)
    assert done.outcome == "delivered" and done.last_status == 204 and not done.cleaned


def test_a_replayed_record_never_starts_a_second_schedule() -> None:
    record = WebhookDue(transcript_id="tr_1", account_id="acct", webhook_id="msg_1")
    first = register(record, None, T0)
    assert first is not None and first.attempt == 0 and first.due_at == T0
    assert register(record, first, T0) is None
    delivered = first.model_copy(update={"outcome": "delivered", "finished_at": T0})
    assert register(record, delivered, T0 + timedelta(hours=1)) is None


def test_not_before_sets_the_due_time() -> None:
    later = datetime(2025, 1, 2, 3, 4, 5)
    record = WebhookDue(transcript_id="tr_1", account_id="a", webhook_id="m", attempt=3,
                        not_before=later)
    entry = register(record, None, T0)
    assert entry is not None and entry.attempt == 3 and entry.due_at == later.replace(tzinfo=UTC)


def test_body_is_exactly_event_id_status_metadata() -> None:
    body = json.loads(event_body("completed", "tr_9", {"order": 7}))
    assert body == {"event": "transcript.completed", "id": "tr_9", "status": "completed",
                    "metadata": {"order": 7}}
    failed = json.loads(event_body("error", "tr_9", {}))
    assert failed == {"event": "transcript.failed", "id": "tr_9", "status": "error",
                      "metadata": {}}


def test_address_policy_defaults_allow_private_but_not_loopback_or_metadata() -> None:
    policy = address_policy(WebhookSettings())
    assert policy.allows("10.1.2.3") and policy.allows("192.168.1.10")
    assert policy.allows("8.8.8.8")
    assert not policy.allows("127.0.0.1") and not policy.allows("::1")
    assert not policy.allows("169.254.169.254") and not policy.allows("fe80::1")
    strict = address_policy(WebhookSettings(allow_private=False))
    assert not strict.allows("10.1.2.3")


def test_receivers_verify_with_the_public_helper() -> None:
    secret = signing.new_secret()
    body = event_body("completed", "tr_1", {})
    headers = signing.headers(secret, "msg_1", body)
    verify(secret, headers, body)
    with pytest.raises(WebhookVerificationError):
        verify(secret, headers, body + b" ")
    with pytest.raises(WebhookVerificationError):
        verify(signing.new_secret(), headers, body)


def test_spec_is_kept_for_the_whole_webhook_window() -> None:
    assert webhook_window(Settings()) > timedelta(seconds=sum(SPEC_DELAYS))


# --- the scheduler around a stand-in table ------------------------------------------------------

class _Table(dict):  # type: ignore[type-arg]
    pass


class _App:
    def __init__(self) -> None:
        self.tables = SimpleNamespace(recovery=SimpleNamespace(
            completed=SimpleNamespace(is_set=lambda: True)))
        self.rebalancing = False
        self.in_recovery = False
        self.table = _Table()
        self.consumer = SimpleNamespace(assignment=lambda: {
            TP("t.webhooks", p) for p in range(4)})
        self.producer = SimpleNamespace(flush=self._flush)

    async def _flush(self) -> None:
        return None

    def Table(self, name: str, **_: Any) -> _Table:  # noqa: N802 - faust's spelling
        return self.table


class _Sender:
    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.attempts: list[int] = []
        self.cleaned: list[str] = []

    async def attempt(self, delivery: Delivery) -> Any:
        self.attempts.append(delivery.attempt)
        return self.answers.pop(0)

    async def clean_up(self, delivery: Delivery) -> None:
        self.cleaned.append(delivery.transcript_id)


async def _settle(scheduler: WebhookScheduler) -> None:
    while scheduler._in_flight:
        await asyncio.gather(*scheduler._in_flight.values())


async def test_scheduler_retries_when_due_and_cleans_up_once_done() -> None:
    clock = [T0]
    ctx = SimpleNamespace(settings=Settings(webhooks=WebhookSettings(retry_schedule_s=(5, 10)),
                                            partitions=4))
    sender = _Sender([500, None, 200])
    app = _App()
    scheduler = WebhookScheduler(app, ctx, sender, topic="t.webhooks",  # type: ignore[arg-type]
                                 clock=lambda: clock[0])
    await scheduler.on_due(WebhookDue(transcript_id="tr_1", account_id="a", webhook_id="m"))
    for step in (0, 1, 4, 5, 14, 15):  # seconds after T0
        clock[0] = T0 + timedelta(seconds=step)
        await scheduler.tick()
        await _settle(scheduler)
    entry = Delivery.model_validate_json(app.table["tr_1"])
    assert sender.attempts == [0, 1, 2]
    assert entry.outcome == "delivered" and entry.last_status == 200 and entry.cleaned
    assert sender.cleaned == ["tr_1"]
    await scheduler.on_due(WebhookDue(transcript_id="tr_1", account_id="a", webhook_id="m"))
    clock[0] += timedelta(hours=1)
    await scheduler.tick()
    await _settle(scheduler)
    assert sender.attempts == [0, 1, 2]  # a replay after success sends nothing
    clock[0] += timedelta(days=1)
    await scheduler.tick()
    assert "tr_1" not in app.table  # done entries are pruned after a while


async def test_deleted_transcript_is_abandoned_and_cleaned() -> None:
    ctx = SimpleNamespace(settings=Settings(partitions=4))
    sender = _Sender(["gone"])
    app = _App()
    scheduler = WebhookScheduler(app, ctx, sender, topic="t.webhooks",  # type: ignore[arg-type]
                                 clock=lambda: T0)
    await scheduler.on_due(WebhookDue(transcript_id="tr_2", account_id="a", webhook_id="m"))
    await scheduler.tick()
    await _settle(scheduler)
    entry = Delivery.model_validate_json(app.table["tr_2"])
    assert entry.outcome == "abandoned" and entry.cleaned and sender.cleaned == ["tr_2"]


async def test_entries_of_partitions_owned_elsewhere_are_left_alone() -> None:
    ctx = SimpleNamespace(settings=Settings(partitions=4))
    sender = _Sender([200])
    app = _App()
    app.consumer = SimpleNamespace(assignment=lambda: set())
    scheduler = WebhookScheduler(app, ctx, sender, topic="t.webhooks",  # type: ignore[arg-type]
                                 clock=lambda: T0)
    await scheduler.on_due(WebhookDue(transcript_id="tr_3", account_id="a", webhook_id="m"))
    await scheduler.tick()
    await _settle(scheduler)
    assert sender.attempts == []
