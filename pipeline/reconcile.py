"""Accepted jobs the accounts agent never saw are submitted again.

The gateway records a transcript (``queued``) before it publishes the job's
``submitted`` event, so the row is the proof that a job was accepted. Around a
restart or a consumer-group rebalance a record can still go missing (a gateway
killed between the two writes; Faust dropping records it fetched while its tables
were recovering, see docs/operations.md). Every ``RECONCILE_INTERVAL_S`` the worker
that owns an account's partition looks for that account's rows still ``queued`` (or
``processing``) after ``RECONCILE_AFTER_S`` which its state has never seen (not waiting,
not processing, not recently finished) and publishes their ``submitted`` again. The
accounts agent treats a repeated submission as a no-op, so a merely slow record is
harmless.

At process start, and again after every rebalance, once its tables are recovered (whether
or not its partitions changed), the worker also re-dispatches every job its ledger holds as
``processing``. Two record losses leave such a job waiting for a record that no longer
exists: the embedded broker (noida-db) was seen to lose the last records it had
acknowledged when it is killed, and a running Faust worker can drop records it fetched
while a rebalance was under way (a member of the group left mid-load; a group settling
after a broker restart, rebalancing again with the same partitions). Every stage reuses
the outputs already stored under ``jobs/<id>/`` and the ledger never counts twice, so a job
whose records did survive is only carried to its end a second time, with the same result.
Jobs this process dispatched itself since that assignment's tables were recovered are left
alone: their records were written after any loss the re-dispatch guards against, and the
first tick comes up to ``RECONCILE_INTERVAL_S`` after start, by when a busy worker holds
every running job of its accounts (each would be decoded, chunked and often transcribed a
second time while the first run was still under way).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka.partitioner import murmur2

from schemas.records import Dispatch, SessionLost, Submitted
from schemas.rows import TranscriptRow
from stores.context import Context
from stores.transcripts import Transcripts
from topologies.topics import ACCOUNT_EVENTS, DISPATCH

from .account_tables import AccountTables
from .accounts import AccountState, lost_holds
from .faust_transport import settled

__all__ = ["unseen", "Reconciler", "RECONCILE_INTERVAL_S", "RECONCILE_AFTER_S"]

log = logging.getLogger("a5s.pipeline")

RECONCILE_INTERVAL_S = 15.0
RECONCILE_AFTER_S = 30.0
"""A ``submitted`` record normally reaches the accounts agent well within this."""


def partition_of(key: str, partitions: int) -> int:
    """The partition the producers' default partitioner (murmur2) gives ``key``."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def unseen(rows: Iterable[TranscriptRow], state_of: Callable[[str], AccountState | None],
           owned: Callable[[str], bool]) -> list[TranscriptRow]:
    """The waiting rows whose account (owned here) has no trace of them."""
    lost = []
    for row in rows:
        if not owned(row.account_id):
            continue
        state = state_of(row.account_id) or AccountState()
        if row.id not in state.queue and row.id not in state.processing \
                and not state.has_left(row.id):
            lost.append(row)
    return lost


class Reconciler:
    def __init__(self, app: Any, ctx: Context, table: AccountTables,
                 publish: Callable[..., Any]) -> None:
        self.app = app
        self.ctx = ctx
        self.table = table
        self.publish = publish
        self.transcripts = Transcripts(ctx.ch)
        self.topic = ctx.settings.topic_prefix + ACCOUNT_EVENTS.name
        self.partitions = ctx.settings.partitions
        self.assignment: frozenset[Any] | None = None
        """The partitions this worker held when it last re-dispatched its processing jobs."""
        self.recoveries = 0
        """How many times the tables were recovered (each rebalance ends with one)."""
        self.resumed_after: int | None = None
        """``recoveries`` when the processing jobs were last re-dispatched."""
        self.fresh: set[str] | None = set()
        """Jobs dispatched here since the tables were last recovered (process start too),
        until the next tick: the re-dispatch skips them. None between those times."""
        self.holding: set[str] | None = None
        """Accounts whose state holds usage for live sessions, kept by the accounts agent
        (``held``) so the tick reads only those; None until rebuilt from the table after a
        start or rebalance."""
        signal = getattr(app, "on_rebalance_complete", None)
        if signal is not None:  # sent once the tables are recovered, before streams resume
            signal.connect(self._on_rebalance_complete)

    async def _on_rebalance_complete(self, *args: Any, **kwargs: Any) -> None:
        self.fresh = set()
        self.recoveries += 1
        self.holding = None

    def held(self, account_id: str, holds: bool) -> None:
        """The accounts agent's state of ``account_id`` after an event: holding or not."""
        if self.holding is not None:
            (self.holding.add if holds else self.holding.discard)(account_id)

    def dispatched(self, transcript_id: str) -> None:
        """The accounts agent dispatched a job (its record written after recovery)."""
        if self.fresh is not None:
            self.fresh.add(transcript_id)

    async def tick(self) -> None:
        if not self._ready():
            return
        try:
            assignment = frozenset(self.app.consumer.assignment())
            if assignment != self.assignment or self.recoveries != self.resumed_after:
                await self.resume_processing(skip=self.fresh or set())
                self.assignment = assignment
                self.resumed_after = self.recoveries
            self.fresh = None
            await self.once(datetime.now(UTC))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the timer must keep running; the next tick redoes it
            log.warning("reconcile failed: %r", exc)

    async def once(self, now: datetime) -> list[str]:
        owned = {tp.partition for tp in self.app.consumer.assignment() if tp.topic == self.topic}
        rows = await self.transcripts.waiting(now - timedelta(seconds=RECONCILE_AFTER_S))
        lost = unseen(rows, self._state,
                      lambda account: partition_of(account, self.partitions) in owned)
        for row in lost:
            if await self.ctx.redis.is_canceled(row.id):
                continue
            account = await self.ctx.accounts.get(row.account_id)
            log.warning("reconcile %s: accepted %s but never seen by the accounts agent; "
                        "submitting it again", row.id, row.created_at.isoformat())
            await self.publish(ACCOUNT_EVENTS, row.account_id, Submitted(
                account_id=row.account_id, transcript_id=row.id, at=row.created_at,
                limits=account.limits))
        await self.free_lost_holds(now, owned)
        return [row.id for row in lost]

    async def free_lost_holds(self, now: datetime, owned: set[int]) -> list[str]:
        """``SessionLost`` for every live session held here whose lease is gone."""
        freed: list[str] = []
        settle_s = self.ctx.settings.realtime.lease_ttl_s
        if self.holding is None:  # once per start or rebalance: every state is parsed
            self.holding = {account_id for account_id, state in self.table.items()
                            if state.live}
        for account_id in sorted(self.holding):
            state = self._state(account_id)
            if state is None or not state.live \
                    or partition_of(account_id, self.partitions) not in owned:
                continue
            for sid in lost_holds(state, await self.ctx.redis.live_leases(account_id), now,
                                  settle_s):
                log.warning("reconcile: live session %s of %s holds usage without a lease "
                            "(its gateway died?); freeing the hold", sid, account_id)
                await self.publish(ACCOUNT_EVENTS, account_id, SessionLost(
                    account_id=account_id, session_id=sid, at=now))
                freed.append(sid)
        return freed

    async def resume_processing(self, skip: set[str] | frozenset[str] = frozenset()
                                ) -> list[str]:
        """Dispatch again every job the recovered ledger holds as processing (see above),
        but those in ``skip`` (dispatched by this process since the recovery)."""
        resumed = []
        for account_id, state in self.table.items():
            for tid, run in state.processing.items():
                if tid in skip:
                    continue
                await self.publish(DISPATCH, tid, Dispatch(
                    account_id=account_id, transcript_id=tid, started_at=run.started_at))
                resumed.append(tid)
        if resumed:
            log.info("reconcile: resuming %d processing job(s) after start or rebalance: %s",
                     len(resumed), ", ".join(resumed))
        return resumed

    def _state(self, account_id: str) -> AccountState | None:
        return self.table.get(account_id)

    def _ready(self) -> bool:
        """Not while a rebalance or table recovery is under way: the state is incomplete."""
        return settled(self.app)
