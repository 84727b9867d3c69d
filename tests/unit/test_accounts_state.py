"""The accounts agent's transition function: FIFO, slots, ledger, and replay safety."""

from __future__ import annotations

from datetime import UTC, datetime

from pipeline.accounts import AccountState, apply
from schemas.records import (AccountLimits, Canceled, DurationKnown, Finished, SessionClosed,
                             Submitted)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LIMITS = AccountLimits(usage_limit_seconds=100, max_concurrent_jobs=2)


def run(state: AccountState, *events):
    effects = []
    for event in events:
        state, fx = apply(state, event, NOW)
        effects.append(fx)
    return state, effects


def sub(tid: str) -> Submitted:
    return Submitted(account_id="a", transcript_id=tid, at=NOW, limits=LIMITS)


def test_fifo_and_slot_limit() -> None:
    state, fx = run(AccountState(), *(sub(f"t{i}") for i in range(4)))
    started = [d.transcript_id for f in fx for d in f.dispatch]
    assert started == ["t0", "t1"] and state.queue == ["t2", "t3"]
    state, fx = run(state, DurationKnown(account_id="a", transcript_id="t0", duration=10),
                    Finished(account_id="a", transcript_id="t0", status="completed",
                             duration=10))
    assert [d.transcript_id for d in fx[1].dispatch] == ["t2"]
    assert fx[1].settled[0].transcript_id == "t0" and state.used == 10


def test_reservation_and_usage_limit() -> None:
    state, _ = run(AccountState(), sub("t0"), sub("t1"))
    state, fx = run(state, DurationKnown(account_id="a", transcript_id="t0", duration=60))
    assert fx[0].admissions[0].admitted and state.reserved == 60
    state, fx = run(state, DurationKnown(account_id="a", transcript_id="t1", duration=50))
    assert not fx[0].admissions[0].admitted, "longer than the remaining usage"
    assert state.reserved == 60 and state.remaining == 40
    state, _ = run(state, Finished(account_id="a", transcript_id="t1", status="error"))
    assert state.used == 0, "failed jobs are never counted"


def test_replays_never_count_twice() -> None:
    done = Finished(account_id="a", transcript_id="t0", status="completed", duration=10)
    state, fx = run(AccountState(), sub("t0"),
                    DurationKnown(account_id="a", transcript_id="t0", duration=10), done, done,
                    sub("t0"))
    assert state.used == 10
    assert len(fx[3].settled) == 1, "a replayed finish settles again"
    assert fx[4].dispatch == [] and state.queue == [], "a replayed submit does not requeue"
    # a replayed duration re-sends the same verdict
    state, fx = run(AccountState(), sub("t1"),
                    DurationKnown(account_id="a", transcript_id="t1", duration=5),
                    DurationKnown(account_id="a", transcript_id="t1", duration=5))
    assert fx[1].admissions == fx[2].admissions and state.reserved == 5


def test_cancel_releases_without_counting() -> None:
    state, _ = run(AccountState(), sub("t0"), sub("t1"), sub("t2"),
                   DurationKnown(account_id="a", transcript_id="t0", duration=30))
    state, fx = run(state, Canceled(account_id="a", transcript_id="t0", at=NOW),
                    Finished(account_id="a", transcript_id="t0", status="completed",
                             duration=30))
    assert state.used == 0 and state.reserved == 0
    assert [d.transcript_id for d in fx[0].dispatch] == ["t2"]
    state, _ = run(state, Canceled(account_id="a", transcript_id="t2", at=NOW))
    assert "t2" not in state.processing


def test_streaming_sessions_count_once() -> None:
    closed = SessionClosed(account_id="a", session_id="s", key_id="k", audio_ms=4000,
                           billed_ms=4000, at=NOW)
    state, _ = run(AccountState(limits=LIMITS), closed, closed)
    assert state.used == 4.0


def test_a_closed_session_is_recorded_as_stream_usage_even_on_replay() -> None:
    """The usage event is written from the agent's effects (idempotent by session id),
    so the gateway writes no usage of its own."""
    closed = SessionClosed(account_id="a", session_id="s", key_id="k", audio_ms=4500,
                           billed_ms=4000, at=NOW)
    state, fx = apply(AccountState(limits=LIMITS), closed, NOW)
    assert fx.sessions_closed == [closed] and fx.usage_seconds == 4.0
    _, again = apply(state, closed, NOW)
    assert again.sessions_closed == [closed] and again.usage_seconds == 0.0
