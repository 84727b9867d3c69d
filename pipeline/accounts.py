"""Per-account state and the pure transition function the accounts agent runs.

The accounts agent is the single writer of an account's FIFO queue, processing
slots and usage ledger. ``apply`` does no I/O: it returns the new state and the
effects to carry out. Delivery is at-least-once, so a replayed event must be
harmless: duplicates re-emit their effects (downstream stages are idempotent)
but never move the ledger twice.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta

from pydantic import BaseModel, Field, PrivateAttr

from schemas.records import (AccountEvent, AccountLimits, Admission, Canceled, Dispatch,
                             DurationKnown, Finished, LimitsChanged, SessionClosed,
                             SessionLost, SessionOpened, Settled, Submitted)

__all__ = ["AccountState", "Running", "billed_seconds", "LiveReservation", "RecentPage",
           "Effects", "StateChange",
           "apply", "lost_holds", "RECENT_MAX", "RECENT_PAGE", "LIVE_HOLD_GRACE"]

RECENT_MAX = 4096
"""How many ids that left an account (jobs finished or canceled, sessions closed) are at
least remembered, to recognise replays."""

RECENT_PAGE = 256
"""Left ids kept in the account's own state. The state is written whole on every event
(three a job), so each time this many have left they move to a page of their own
(``RecentPage``, written once): an aged account's state stays a few KiB instead of
carrying all ``RECENT_MAX`` ids (128 KiB) on every write."""

RECENT_PAGES = RECENT_MAX // RECENT_PAGE
"""Pages consulted besides the state's own ids."""

LIVE_HOLD_GRACE = timedelta(minutes=15)
"""How long past its own limit a live session's reservation is held without its close,
should the reconciler never see its lease gone (``SessionLost``; Redis unreachable): a
gateway that died never settles its sessions, and their usage must not stay held forever."""


class Running(BaseModel):
    started_at: datetime
    reserved: float = 0.0
    duration: float | None = None
    admitted: bool | None = None
    channels: int | None = None
    """A multichannel job's channels, each billed its duration (``DurationKnown``)."""


def billed_seconds(duration: float, channels: int | None) -> float:
    """The usage a job's audio counts: its duration once per channel of a multichannel job
    (each channel is recognised on its own), once for a mixed-down one."""
    return duration * (channels or 1)


class LiveReservation(BaseModel):
    seconds: float
    since: datetime
    until: datetime
    """Dropped after this, closed or not (``LIVE_HOLD_GRACE``)."""


class AccountState(BaseModel):
    limits: AccountLimits | None = None
    queue: list[str] = Field(default_factory=list)
    processing: dict[str, Running] = Field(default_factory=dict)
    live: dict[str, LiveReservation] = Field(default_factory=dict)
    """Open live sessions by id, each holding the usage it may still bill."""
    used: float = 0.0
    recent: list[str] = Field(default_factory=list)
    """Ids that left the account, oldest first, not yet moved to a page."""
    pages: int = 0
    """Pages of left ids written so far; page ``n`` holds the ids that left
    ``n * RECENT_PAGE`` to ``(n + 1) * RECENT_PAGE - 1``."""
    _older: tuple[frozenset[str], ...] = PrivateAttr(default=())
    """The ids of the last ``RECENT_PAGES`` pages (up to page ``pages - 1``), oldest first:
    loaded with the state by whoever reads it from the tables (``AccountTables``)."""

    @property
    def reserved(self) -> float:
        """Usage held for running jobs and open live sessions: one limit for both models."""
        return (sum(r.reserved for r in self.processing.values())
                + sum(r.seconds for r in self.live.values()))

    @property
    def remaining(self) -> float:
        limit = self.limits.usage_limit_seconds if self.limits else 0.0
        return limit - self.used - self.reserved

    @classmethod
    def stored(cls, raw: bytes | None) -> AccountState:
        """The state kept in the accounts table (an account with none yet starts empty)."""
        return cls.model_validate_json(raw) if raw else cls()

    def to_stored(self) -> bytes:
        """What the accounts table keeps (and its changelog carries) for this state."""
        return self.model_dump_json().encode()

    def with_older(self, older: tuple[frozenset[str], ...]) -> AccountState:
        """This state, given the ids of its last pages (as ``AccountTables`` reads them)."""
        self._older = older[-RECENT_PAGES:]
        return self

    def has_left(self, id_: str) -> bool:
        """Whether the job or session ``id_`` left the account lately (finished, canceled or
        closed): a later event of it is a replay."""
        return id_ in self.recent or any(id_ in page for page in self._older)

    def forget(self, id_: str) -> None:
        if not self.has_left(id_):
            self.recent.append(id_)


class RecentPage(BaseModel):
    """``RECENT_PAGE`` ids that left an account, as the ``account-recent`` table keeps them."""

    number: int
    ids: list[str]

    @classmethod
    def stored(cls, raw: bytes) -> RecentPage:
        return cls.model_validate_json(raw)

    def to_stored(self) -> bytes:
        return self.model_dump_json().encode()


class StateChange(BaseModel):
    """A transcript state to record in ClickHouse (the store merges it into the row)."""

    transcript_id: str
    status: str
    at: datetime
    error_code: str | None = None
    error_message: str | None = None


class Effects(BaseModel):
    dispatch: list[Dispatch] = Field(default_factory=list)
    admissions: list[Admission] = Field(default_factory=list)
    settled: list[Settled] = Field(default_factory=list)
    changes: list[StateChange] = Field(default_factory=list)
    dequeued: list[str] = Field(default_factory=list)
    """Ids that left the waiting queue (for the gateway's queue-size set)."""
    usage_seconds: float = 0.0
    """Seconds newly counted toward usage by this event."""
    sessions_closed: list[SessionClosed] = Field(default_factory=list)
    """Live sessions whose ``stream`` usage event is to be recorded (idempotent by id, so
    a replay records it again harmlessly)."""
    pages: list[RecentPage] = Field(default_factory=list)
    """Pages of left ids to store (before the state: a replay writes them again, the same)."""


def apply(state: AccountState, event: AccountEvent, now: datetime) -> tuple[AccountState,
                                                                             Effects]:
    state = _copied(state)
    fx = Effects()
    match event:
        case Submitted():
            state.limits = event.limits
            tid = event.transcript_id
            if tid in state.processing:
                run = state.processing[tid]
                fx.dispatch.append(Dispatch(account_id=event.account_id, transcript_id=tid,
                                            started_at=run.started_at))
            elif tid not in state.queue and not state.has_left(tid):
                state.queue.append(tid)
        case Canceled():
            tid = event.transcript_id
            if tid in state.queue:
                state.queue.remove(tid)
                fx.dequeued.append(tid)
            state.processing.pop(tid, None)
            state.forget(tid)
            fx.changes.append(StateChange(transcript_id=tid, status="deleted", at=event.at))
        case DurationKnown():
            tid = event.transcript_id
            run = state.processing.get(tid)
            if run is not None:
                cost = billed_seconds(event.duration, event.channels)
                if run.admitted is None:
                    run.duration = event.duration
                    run.channels = event.channels
                    run.admitted = cost <= state.remaining + 1e-9
                    run.reserved = cost if run.admitted else 0.0
                fx.admissions.append(Admission(
                    account_id=event.account_id, transcript_id=tid, admitted=bool(run.admitted),
                    duration=run.duration or event.duration, channels=run.channels,
                    reason="" if run.admitted else
                    f"The audio lasts {event.duration:.1f} s"
                    + (f" on {event.channels} channels ({cost:.1f} s of usage)"
                       if event.channels else "")
                    + f" but only {max(0.0, state.remaining):.1f} s of usage remain."))
        case Finished():
            tid = event.transcript_id
            run = state.processing.pop(tid, None)
            if run is not None or state.has_left(tid):
                if run is not None and event.status == "completed":
                    seconds = event.duration if event.duration is not None else run.duration
                    counted = billed_seconds(seconds or 0.0, event.channels or run.channels)
                    state.used += counted
                    fx.usage_seconds = counted
                state.forget(tid)
                # A replay settles again (publishing is idempotent) but never counts twice.
                fx.settled.append(Settled(
                    account_id=event.account_id, transcript_id=tid, status=event.status,
                    duration=event.duration, error_code=event.error_code,
                    error_message=event.error_message, channels=event.channels))
        case LimitsChanged():
            state.limits = event.limits
        case SessionOpened():
            sid = event.session_id
            if event.limit_ms > 0 and not state.has_left(sid) and sid not in state.live:
                state.live[sid] = LiveReservation(
                    seconds=event.limit_ms / 1000.0, since=event.at,
                    until=event.at + timedelta(milliseconds=event.limit_ms) + LIVE_HOLD_GRACE)
        case SessionLost():
            state.live.pop(event.session_id, None)
        case SessionClosed():
            fx.sessions_closed.append(event)
            state.live.pop(event.session_id, None)
            if not state.has_left(event.session_id):
                state.used += event.billed_ms / 1000.0
                fx.usage_seconds = event.billed_ms / 1000.0
                state.forget(event.session_id)
    for sid in [sid for sid, held in state.live.items() if held.until < now]:
        del state.live[sid]
    _fill_slots(state, event.account_id, now, fx)
    _spill(state, fx)
    return state, fx


def _copied(state: AccountState) -> AccountState:
    """A deep copy whose left ids are copied as a list only, and whose pages are shared:
    the ids are immutable strings, the pages frozen sets, and deep-copying 4,096 ids took
    1.75 ms of an event's 2.7 ms (``python -m bench.accounts``)."""
    return copy.deepcopy(state, {id(state.recent): list(state.recent),
                                 id(state._older): state._older})


def _spill(state: AccountState, fx: Effects) -> None:
    """Moves each full page of left ids out of the state (a state stored before pages
    existed moves all of its ids at once)."""
    while len(state.recent) >= RECENT_PAGE:
        page = RecentPage(number=state.pages, ids=state.recent[:RECENT_PAGE])
        fx.pages.append(page)
        state.recent = state.recent[RECENT_PAGE:]
        state.pages += 1
        state.with_older(state._older + (frozenset(page.ids),))


def lost_holds(state: AccountState, leased: set[str], now: datetime,
               settle_s: float) -> list[str]:
    """The held sessions whose lease is gone (``leased``: the account's live leases): their
    gateway died or let them go. Holds younger than ``settle_s`` are left to their
    ``SessionClosed``, which may be on its way."""
    return [sid for sid, held in state.live.items()
            if sid not in leased and (now - held.since).total_seconds() > settle_s]


def _fill_slots(state: AccountState, account_id: str, now: datetime, fx: Effects) -> None:
    slots = state.limits.max_concurrent_jobs if state.limits else 0
    while state.queue and len(state.processing) < slots:
        tid = state.queue.pop(0)
        state.processing[tid] = Running(started_at=now)
        fx.dequeued.append(tid)
        fx.dispatch.append(Dispatch(account_id=account_id, transcript_id=tid, started_at=now))
        fx.changes.append(StateChange(transcript_id=tid, status="processing", at=now))
