"""The accounts agent's transition function: FIFO, slots, ledger, and replay safety."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pipeline.accounts import (LIVE_HOLD_GRACE, RECENT_MAX, RECENT_PAGE, AccountState, apply,
                               lost_holds)
from schemas.records import (AccountLimits, Canceled, DurationKnown, Finished, SessionClosed,
                             SessionLost, SessionOpened, Submitted)

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


def test_an_aged_account_is_never_changed_in_place() -> None:
    """``apply`` copies the ids it remembers as a list only, and shares the pages' frozen
    sets: the state it was given, nested models included, stays as it was. A state stored
    before pages existed (all ``RECENT_MAX`` ids in it) moves them to pages at once."""
    old = [f"old{i}" for i in range(RECENT_MAX)]
    state, fx = run(AccountState(recent=old[:-1]), sub("t0"))
    assert [p.number for p in fx[0].pages] == list(range(RECENT_MAX // RECENT_PAGE - 1))
    assert [i for p in fx[0].pages for i in p.ids] == old[:-RECENT_PAGE]
    assert state.pages == RECENT_MAX // RECENT_PAGE - 1 and state.recent == old[-RECENT_PAGE:-1]
    before = state.model_dump_json()
    known, _ = apply(state, DurationKnown(account_id="a", transcript_id="t0", duration=10), NOW)
    assert known.processing["t0"].admitted and state.processing["t0"].admitted is None
    done, fx = apply(known, Finished(account_id="a", transcript_id="t0", status="completed",
                                     duration=10), NOW)
    assert state.model_dump_json() == before and "t0" in known.processing
    assert known.recent is not done.recent and known.recent[-1] == "old4094"
    assert done.recent == [] and done.pages == RECENT_MAX // RECENT_PAGE and done.used == 10
    assert [(p.number, p.ids) for p in fx.pages] == [(done.pages - 1,
                                                      old[-RECENT_PAGE:-1] + ["t0"])]
    assert all(done.has_left(i) for i in old[:-1] + ["t0"]) and not state.has_left("t0")


def test_the_stored_state_reads_back_as_it_was_and_none_is_an_empty_account() -> None:
    state, _ = run(AccountState(), sub("t0"), sub("t1"), sub("t2"),
                   DurationKnown(account_id="a", transcript_id="t0", duration=10))
    assert AccountState.stored(state.to_stored()) == state
    assert state.queue == ["t2"] and state.processing["t0"].admitted
    assert AccountState.stored(None) == AccountState() == AccountState.stored(b"")


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


def opened(sid: str, limit_ms: int, at: datetime = NOW) -> SessionOpened:
    return SessionOpened(account_id="a", session_id=sid, at=at, limit_ms=limit_ms)


def closed(sid: str, billed_ms: int) -> SessionClosed:
    return SessionClosed(account_id="a", session_id=sid, key_id="k", audio_ms=billed_ms,
                         billed_ms=billed_ms, at=NOW)


def test_an_open_live_session_holds_its_limit_against_batch_jobs() -> None:
    """One limit for both models: a batch job cannot take the usage a live session may
    still bill, and the session's close frees the hold and counts what it billed."""
    state, _ = run(AccountState(), sub("t0"), opened("s", 70_000))
    assert state.reserved == 70 and state.remaining == 30
    state, fx = run(state, DurationKnown(account_id="a", transcript_id="t0", duration=40))
    assert not fx[0].admissions[0].admitted, "40 s of audio, 30 s left beside the session"
    state, _ = run(state, closed("s", 12_000))
    assert state.live == {} and state.used == 12 and state.reserved == 0
    state, fx = run(state, sub("t1"), DurationKnown(account_id="a", transcript_id="t1",
                                                    duration=40))
    assert fx[1].admissions[0].admitted


def test_a_replayed_open_holds_nothing_twice_nor_after_the_close() -> None:
    state, _ = run(AccountState(limits=LIMITS), opened("s", 30_000), opened("s", 30_000))
    assert state.reserved == 30
    state, _ = run(state, closed("s", 5_000), opened("s", 30_000), closed("s", 5_000))
    assert state.reserved == 0 and state.used == 5


def test_a_hold_whose_close_never_came_ends_after_its_limit_and_the_grace() -> None:
    """A gateway that died never settles: the hold must not stay forever."""
    state, _ = run(AccountState(limits=LIMITS), opened("s", 60_000))
    edge = NOW + timedelta(seconds=60) + LIVE_HOLD_GRACE
    state, _ = apply(state, opened("other", 0), edge)
    assert state.reserved == 60, "still held at the very end of its grace"
    state, _ = apply(state, opened("other", 0), edge + timedelta(seconds=1))
    assert state.reserved == 0 and state.live == {}


def test_an_open_from_before_the_limit_field_holds_nothing() -> None:
    old = SessionOpened.model_validate({"kind": "session_opened", "account_id": "a",
                                        "session_id": "s", "at": NOW.isoformat()})
    state, _ = run(AccountState(limits=LIMITS), old)
    assert old.limit_ms == 0 and state.reserved == 0 and state.live == {}


def test_a_hold_whose_lease_is_gone_is_freed_and_a_late_close_still_counts() -> None:
    """The reconciler frees the hold of a session whose gateway died (``SessionLost``); a
    close that was only late counts its usage all the same, once."""
    state, _ = run(AccountState(limits=LIMITS), opened("dead", 60_000, NOW),
                   opened("live", 30_000, NOW), opened("new", 10_000, NOW + timedelta(seconds=25)))
    later = NOW + timedelta(seconds=40)
    assert lost_holds(state, {"live"}, later, settle_s=30) == ["dead"], \
        "a young hold waits for its close; a leased one is live"
    state, _ = apply(state, SessionLost(account_id="a", session_id="dead", at=later), later)
    assert state.reserved == 40 and "dead" not in state.live
    state, _ = run(state, closed("dead", 7_000), closed("dead", 7_000))
    assert state.used == 7 and state.reserved == 40
