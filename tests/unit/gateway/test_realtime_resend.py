"""The socket handler publishes again the audio its worker lacks, in order, from the gap.

The hub here is a stand-in for the broker and the worker together: a broker that loses a
record after acknowledging it (a killed noida-db can) cannot be made to on demand. It
loses record 2 once and, like the worker, takes records only in order and acknowledges
the last one it has. Everything else is the real handler and its session state machine.
"""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

from gateway.realtime import StreamSocket
from schemas.records import RealtimeAudio, RealtimeMessage
from schemas.settings import RealtimeSettings

RECORD = RealtimeSettings().batch_ms * 32        # one record of 16 kHz s16le


class LossyHub:
    gateway_id = "gw_test"

    def __init__(self, lose: int) -> None:
        self.lose = lose
        self.published: list[int] = []
        self.taken = 0
        self.final_taken = False
        self.route = lambda message: None

    async def enqueue(self, record: RealtimeAudio) -> asyncio.Future[int]:
        self.published.append(record.seq)
        if record.seq == self.lose:
            self.lose = -1                 # acknowledged by the broker, then lost
        elif record.seq == self.taken + 1:
            self.taken = record.seq
            self.final_taken = record.final
        self.route(RealtimeMessage(session_id="s", seq=self.taken, type="progress"))
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        done.set_result(len(self.published))
        return done


def test_a_lost_record_and_those_after_it_are_sent_again_until_the_worker_has_them() -> None:
    async def go() -> tuple[LossyHub, StreamSocket]:
        hub = LossyHub(lose=2)
        opts = RealtimeSettings(resend_after_s=0.3)
        handler = StreamSocket.__new__(StreamSocket)
        handler.initialize(SimpleNamespace(settings=SimpleNamespace(realtime=opts)),
                           hub, admission=object())  # type: ignore[arg-type]
        handler.ws_connection = None       # no client: what it would be sent is dropped
        hub.route = handler._on_worker
        handler.session.text(json.dumps({"type": "start"}), time.monotonic())
        assert handler.session.ready(300_000, time.monotonic())
        handler._spawn(handler._watch())
        pump = asyncio.create_task(handler._pump())
        for _ in range(5):                 # records 1-5, then the final one
            handler._on_audio(bytes(RECORD), time.monotonic())
            await asyncio.sleep(0.07)
        handler.session.begin_finish()
        handler.final_pending = True
        handler.audio_ready.set()
        await pump
        deadline = time.monotonic() + 5
        while not hub.final_taken and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        handler.session.close()
        for task in handler.tasks:
            task.cancel()
        return hub, handler

    hub, handler = asyncio.run(go())
    # every record once (the last the final one; six unless the pump joined two), then
    # once again from the lost one on, in order
    last = max(hub.published)
    assert last >= 3
    assert hub.published == list(range(1, last + 1)) + list(range(2, last + 1))
    assert hub.taken == last and hub.final_taken
    assert not handler.session.unacknowledged(), "acknowledged records are not kept"
