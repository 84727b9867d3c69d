"""Faust tables: changelog-backed state owned by one node, declared once.

The value models live with the logic that evolves them (the pipeline); a table names
its value by dotted path so this layer imports nothing above ``schemas``. A test
checks that every path resolves to a pydantic model.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TableSpec", "TABLES", "ACCOUNTS", "ACCOUNT_RECENT", "WEBHOOK_DELIVERIES"]


@dataclass(frozen=True)
class TableSpec:
    name: str
    key: str
    value: str
    """``module:Class`` of the pydantic model stored (as JSON bytes)."""
    description: str
    use_partitioner: bool = False
    """Written outside the agent's stream (a timer): the key picks the changelog partition."""


ACCOUNTS = TableSpec("accounts", "account_id", "pipeline.accounts:AccountState",
                     "per-account FIFO queue, processing slots and usage ledger")
ACCOUNT_RECENT = TableSpec("account-recent", "account_id/slot", "pipeline.accounts:RecentPage",
                           "pages of the ids that left each account, to recognise replays "
                           "(one written per 256 ids)")
WEBHOOK_DELIVERIES = TableSpec("webhook-deliveries", "transcript_id", "pipeline.webhooks:Delivery",
                               "each transcript's webhook schedule and outcome",
                               use_partitioner=True)

TABLES: tuple[TableSpec, ...] = (ACCOUNTS, ACCOUNT_RECENT, WEBHOOK_DELIVERIES)
