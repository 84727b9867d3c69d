"""What a client is told when its worker refuses to open the session, and when it fails later.

The real socket handler; what it would send the client is kept instead of written, since
the worker's answers are what is under test and a stack cannot be made to refuse on demand
without filling a worker.
"""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.realtime import StreamSocket
from schemas.records import RealtimeMessage
from schemas.settings import RealtimeSettings


def handler_sent(messages: list[RealtimeMessage]) -> tuple[list[dict[str, Any]], int | None]:
    """The messages the client gets and the close code, after the worker's ``messages``."""
    sent: list[dict[str, Any]] = []
    closed: list[int] = []

    async def go() -> None:
        handler = StreamSocket.__new__(StreamSocket)
        handler.initialize(SimpleNamespace(settings=SimpleNamespace(realtime=RealtimeSettings())),
                           SimpleNamespace(), admission=object())  # type: ignore[arg-type]
        handler._write = lambda m: sent.append(json.loads(m.model_dump_json()))  # type: ignore[method-assign]
        handler.close = lambda code=None, reason=None: closed.append(code)  # type: ignore[method-assign]
        handler.session.text(json.dumps({"type": "start"}), time.monotonic())
        for message in messages:
            handler._on_worker(message)
    asyncio.run(go())
    return sent, closed[0] if closed else None


def test_a_session_the_worker_will_not_take_is_told_to_retry() -> None:
    reason = "the recognizer is behind (finals 1.4 s after their audio with 9 sessions)"
    sent, close = handler_sent([RealtimeMessage(session_id="s", seq=0, type="provider_error",
                                                text=reason)])
    assert sent == [{"type": "provider_error", "message": reason},
                    {"type": "error", "code": "a5sv2_unavailable",
                     "message": "No recognizer can take the session now; retry shortly."}]
    assert close == 1013


@pytest.mark.parametrize("first", ["progress", "transcript"])
def test_a_session_whose_worker_fails_later_is_told_it_failed(first: str) -> None:
    sent, close = handler_sent([RealtimeMessage(session_id="s", seq=0, type=first, text=""),
                                RealtimeMessage(session_id="s", seq=1, type="provider_error",
                                                text="decode failed")])
    assert sent[-2:] == [{"type": "provider_error", "message": "decode failed"},
                         {"type": "error", "code": "a5sv2_unavailable",
                          "message": "The recognizer failed; start a new session."}]
    assert close == 1013
