"""The gateway reaches the broker only through ``gateway.base.publish``, bound to its node.

The producer here is a recording stand-in (only the refusal is under test; the real
broker path is exercised by every integration test that submits a job).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.base import publish
from schemas.records import Dispatch
from topologies.graph import UndeclaredWrite, node
from topologies.topics import DISPATCH

GATEWAY_DIR = Path(__file__).resolve().parents[3] / "gateway"


class RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def send(self, spec: Any, key: str, value: Any) -> int:
        self.sent.append((spec.name, key))
        return len(self.sent) - 1


def test_a_topic_the_gateway_does_not_declare_is_refused_and_nothing_is_sent() -> None:
    assert DISPATCH not in node("gateway").writes
    ctx = SimpleNamespace(producer=RecordingProducer())
    record = Dispatch(account_id="acc_x", transcript_id="tr_x", started_at="2026-01-01T00:00:00Z")
    with pytest.raises(UndeclaredWrite, match="gateway"):
        asyncio.run(publish(ctx, DISPATCH, "tr_x", record))  # type: ignore[arg-type]
    assert ctx.producer.sent == []


def test_every_declared_write_goes_through() -> None:
    ctx = SimpleNamespace(producer=RecordingProducer())
    for spec in node("gateway").writes:
        asyncio.run(publish(ctx, spec, "k", None))  # type: ignore[arg-type]
    assert [name for name, _ in ctx.producer.sent] == [s.name for s in node("gateway").writes]


def test_no_gateway_module_sends_to_the_broker_directly() -> None:
    direct = [f"{path.name}:{n}" for path in sorted(GATEWAY_DIR.glob("*.py"))
              if path.name != "base.py"
              for n, line in enumerate(path.read_text().splitlines(), 1)
              if re.search(r"producer\.send\(", line)]
    assert direct == []
