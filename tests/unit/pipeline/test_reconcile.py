"""Which accepted jobs the reconciler submits again: only those their owner never saw."""

from __future__ import annotations

from datetime import UTC, datetime

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
