"""Which accepted jobs the reconciler submits again: only those their owner never saw."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from pipeline.account_tables import AccountTables
from pipeline.accounts import AccountState, Running
from pipeline.reconcile import partition_of, unseen
from schemas.rows import TranscriptRow

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def row(tid: str, account: str = "acct_a") -> TranscriptRow:
    return TranscriptRow(id=tid, account_id=account, key_id="key_1", created_at=NOW,
                         status="queued")


def test_only_rows_unknown_to_an_owned_account_are_lost() -> None:
    state = AccountState(queue=["tr_q"], processing={"tr_p": Running(started_at=NOW)},
                         recent=["tr_done"])
    rows = [row("tr_q"), row("tr_p"), row("tr_done"), row("tr_lost"),
            row("tr_elsewhere", account="acct_b"), row("tr_new", account="acct_c")]
    states = {"acct_a": state, "acct_b": AccountState()}
    lost = unseen(rows, states.get, owned=lambda account: account != "acct_b")
    # acct_c has no state yet (its first submission was the one lost)
    assert [r.id for r in lost] == ["tr_lost", "tr_new"]


def test_partition_matches_the_producers_partitioner() -> None:
    from aiokafka.partitioner import DefaultPartitioner
    key = b"acct_01m7yybb037w7rs57s2t614r1z"
    assert partition_of(key.decode(), 4) == DefaultPartitioner()(key, [0, 1, 2, 3], [0, 1, 2, 3])


async def test_processing_jobs_are_dispatched_again_after_each_change_of_partitions() -> None:
    """A rebalance can drop records a running worker had fetched: its processing jobs
    are re-dispatched once per new assignment (and never while a rebalance is under way)."""
    import asyncio
    from types import SimpleNamespace

    from pipeline.reconcile import Reconciler
    from schemas.records import Dispatch
    from topologies.topics import DISPATCH

    recovered = asyncio.Event()
    recovered.set()
    assignment = {("a5s-account-events", 0)}
    app = SimpleNamespace(rebalancing=False, in_recovery=False,
                          tables=SimpleNamespace(recovery=SimpleNamespace(completed=recovered)),
                          consumer=SimpleNamespace(assignment=lambda: set(assignment)))
    state = AccountState(processing={"tr_p": Running(started_at=NOW)})
    table = {"acct_a": state.model_dump_json().encode()}
    sent: list[tuple[str, str, Dispatch]] = []

    async def publish(spec: object, key: str, value: Dispatch) -> None:
        sent.append((getattr(spec, "name", ""), key, value))

    async def no_lost_rows(now: datetime) -> list[str]:
        return []

    ctx = SimpleNamespace(ch=None, settings=SimpleNamespace(topic_prefix="a5s-", partitions=4))
    reconciler = Reconciler(app, ctx, AccountTables(table, {}), publish)  # type: ignore[arg-type]
    reconciler.once = no_lost_rows  # type: ignore[method-assign]

    await reconciler.tick()  # process start
    await reconciler.tick()  # nothing changed
    assert [(name, key) for name, key, _ in sent] == [(DISPATCH.name, "tr_p")]
    assert sent[0][2].account_id == "acct_a" and sent[0][2].started_at == NOW
    app.rebalancing = True
    assignment.add(("a5s-account-events", 1))
    await reconciler.tick()  # mid-rebalance: the state is incomplete, wait
    assert len(sent) == 1
    app.rebalancing = False
    await reconciler.tick()  # the new assignment: dispatched again, once
    await reconciler.tick()
    assert [key for _, key, _ in sent] == ["tr_p", "tr_p"]


class _Worker:
    """A reconciler over a stand-in Faust app: its assignment, its ledger table, the
    ``on_rebalance_complete`` signal it connects to, and the keys it dispatched."""

    def __init__(self) -> None:
        import asyncio
        from types import SimpleNamespace

        from pipeline.reconcile import Reconciler

        recovered = asyncio.Event()
        recovered.set()
        self.assignment = {("a5s-account-events", 0)}
        self.handlers: list[Any] = []
        self.app = SimpleNamespace(
            rebalancing=False, in_recovery=False,
            on_rebalance_complete=SimpleNamespace(connect=self.handlers.append),
            tables=SimpleNamespace(recovery=SimpleNamespace(completed=recovered)),
            consumer=SimpleNamespace(assignment=lambda: set(self.assignment)))
        self.table: dict[str, bytes] = {}
        self.sent: list[str] = []

        async def publish(spec: object, key: str, value: object) -> None:
            self.sent.append(key)

        async def no_lost_rows(now: datetime) -> list[str]:
            return []

        ctx = SimpleNamespace(ch=None, settings=SimpleNamespace(topic_prefix="a5s-",
                                                                partitions=4))
        tables = AccountTables(self.table, {})
        self.reconciler = Reconciler(self.app, ctx, tables, publish)  # type: ignore[arg-type]
        self.reconciler.once = no_lost_rows  # type: ignore[method-assign]

    def processing(self, *tids: str) -> None:
        state = AccountState(processing={tid: Running(started_at=NOW) for tid in tids})
        self.table["acct_a"] = state.model_dump_json().encode()

    async def rebalance_complete(self) -> None:
        """Faust's signal: the tables are recovered (at start and after each rebalance)."""
        for handler in self.handlers:
            await handler(self.app)


async def test_jobs_dispatched_since_the_recovery_are_not_dispatched_again() -> None:
    """The first tick comes up to an interval after the tables are recovered: the jobs this
    process dispatched meanwhile (their records written after any loss) are left alone; the
    recovered ledger's other processing jobs are resumed, as after every rebalance."""
    worker = _Worker()
    reconciler = worker.reconciler
    worker.processing("tr_left", "tr_new")
    await worker.rebalance_complete()  # process start: the tables are recovered
    reconciler.dispatched("tr_new")  # the accounts agent dispatched it since
    await reconciler.tick()
    assert worker.sent == ["tr_left"]
    reconciler.dispatched("tr_later")  # between rebalances nothing is collected
    assert reconciler.fresh is None
    worker.app.rebalancing = True  # a rebalance: the records dispatched before it may be lost
    worker.assignment.add(("a5s-account-events", 1))
    await reconciler.tick()
    await worker.rebalance_complete()
    worker.app.rebalancing = False
    await reconciler.tick()  # both are resumed: neither was dispatched since the recovery
    assert worker.sent == ["tr_left", "tr_left", "tr_new"]


async def test_a_rebalance_that_keeps_the_partitions_resumes_too() -> None:
    """A group settling after a broker restart can rebalance again with the same partitions,
    and a worker can drop the records it fetched around it: the jobs dispatched before that
    recovery are dispatched again; those dispatched after it are left alone."""
    worker = _Worker()
    reconciler = worker.reconciler
    await worker.rebalance_complete()  # process start
    worker.processing("tr_first")
    reconciler.dispatched("tr_first")
    await reconciler.tick()
    await reconciler.tick()
    assert worker.sent == []  # dispatched after the recovery, and nothing happened since
    await worker.rebalance_complete()  # the group rebalances again; the partitions stay
    worker.processing("tr_first", "tr_second")
    reconciler.dispatched("tr_second")
    await reconciler.tick()
    await reconciler.tick()
    assert worker.sent == ["tr_first"]


async def test_lost_holds_are_freed_and_only_holding_accounts_are_read(valkey: str) -> None:
    """After a start the tick finds the holding accounts in the table once; then the
    accounts agent keeps that set (``held``), and a session whose lease is gone gets its
    ``SessionLost``. Leases are real ones in Valkey; the store records which accounts the
    tick asks about, and the published records are collected instead of sent to Kafka."""
    from datetime import timedelta
    from types import SimpleNamespace

    from pipeline.accounts import apply
    from pipeline.reconcile import Reconciler
    from schemas.records import SessionLost, SessionOpened
    from schemas.settings import Settings
    from stores.redis import RedisStore

    asked: list[str] = []

    class AskedStore(RedisStore):
        async def live_leases(self, account_id: str) -> set[str]:
            asked.append(account_id)
            return await super().live_leases(account_id)

    def opened(account: str, sid: str) -> bytes:
        state, _ = apply(AccountState(), SessionOpened(account_id=account, session_id=sid,
                                                       at=NOW, limit_ms=60_000), NOW)
        return state.model_dump_json().encode()

    table = {"acct_a": opened("acct_a", "s_dead"), "acct_b": AccountState().model_dump_json()
             .encode()}
    store = AskedStore(valkey, prefix=f"t{uuid.uuid4().hex}:")
    settings = Settings()
    ctx = SimpleNamespace(redis=store, settings=settings, ch=None)
    owned = set(range(settings.partitions))
    sent: list[tuple[str, Any]] = []

    async def publish(spec: object, key: str, value: Any) -> None:
        sent.append((key, value))

    try:
        tables = AccountTables(table, {})
        reconciler = Reconciler(SimpleNamespace(), ctx, tables, publish)  # type: ignore[arg-type]
        later = NOW + timedelta(seconds=40)
        assert await reconciler.free_lost_holds(later, owned) == ["s_dead"]   # no lease
        assert asked == ["acct_a"], "an account holding nothing is not asked about"
        assert sent == [("acct_a", SessionLost(account_id="acct_a", session_id="s_dead",
                                               at=later))]
        table["acct_c"] = opened("acct_c", "s_live")
        assert await store.admit_session("acct_c", "s_live", places=5, quota_ms=600_000,
                                         cap_ms=60_000) == (60_000, 0)
        reconciler.held("acct_c", True)   # what the accounts agent reports after each event
        reconciler.held("acct_a", False)
        asked.clear()
        assert await reconciler.free_lost_holds(later, owned) == []            # leased
        assert asked == ["acct_c"]
    finally:
        await store.close()
