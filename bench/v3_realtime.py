"""A ``/v3/ws`` session of :mod:`bench.realtime` (``--v3``), recorded in the a5s protocol's terms.

The session streams its programme exactly as :func:`bench.realtime.run_session` does (20 ms
frames at real-time pace after ``Begin``; ``Terminate`` at the end) with AssemblyAI's v3
defaults and ``format_turns`` (``--v3-query`` adds parameters). Its messages are kept as the a5s messages they stand for, so
that :func:`bench.realtime.score` measures both protocols alike: a growing ``Turn`` is a
partial, an ended (unformatted) ``Turn`` a final (its arrival minus the phrase end it settles
is the **end-of-turn latency**), ``Termination`` is ``finished``; the text scored is the
formatted turns joined.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from bench.realtime import send_paced
from schemas.assemblyai_streaming import V3Params

__all__ = ["run_v3_session", "v3_url"]

UNSURE_BELOW = V3Params().end_of_turn_confidence_threshold
"""v3's default threshold, which these sessions keep."""


def v3_url(realtime_url: str, query: str = "") -> str:
    """``ws://host:port/v1/realtime`` → the same service's ``/v3/ws`` with the session's
    parameters, and ``query`` (more of them, ``name=value&...``)."""
    base = realtime_url.split("/v1/")[0]
    return f"{base}/v3/ws?sample_rate=16000&format_turns=true" + (f"&{query}" if query else "")


async def run_v3_session(url: str, key: str, res: Any, delay: float, query: str = "") -> None:
    """``res`` is a :class:`bench.realtime.Session`; ``url`` the service's ``/v1/realtime``;
    ``query`` more connection parameters (v3's defaults otherwise)."""
    import websockets
    await asyncio.sleep(delay)
    t_connect = time.perf_counter()
    async with websockets.connect(v3_url(url, query), additional_headers={"Authorization": key},
                                  max_size=None) as ws:
        msg = json.loads(await ws.recv())
        if msg["type"] != "Begin":
            res.error = f"{msg.get('error_code')}: {msg.get('error')}"
            return
        res.ready_s = time.perf_counter() - t_connect
        t0 = time.perf_counter()
        done = asyncio.Event()
        t_finish = 0.0
        settled: list[str] = []
        formatted: list[str] = []

        async def reader() -> None:
            try:
                async for raw in ws:
                    msg = json.loads(raw)
                    now = time.perf_counter() - t0
                    if msg["type"] == "Turn":
                        if msg["turn_is_formatted"]:
                            formatted.append(msg["transcript"])
                            continue
                        text = " ".join(settled + [msg["transcript"]])
                        res.messages.append((now, {"type": "transcript", "text": text,
                                                   "is_final": msg["end_of_turn"]}))
                        if msg["end_of_turn"]:
                            settled.append(msg["transcript"])
                            res.unsure_turns += msg["end_of_turn_confidence"] < UNSURE_BELOW
                    elif msg["type"] == "Termination":
                        res.finished = msg
                        res.finish_s = now - t_finish
                    elif msg["type"] == "Error":
                        res.error = f"{msg['error_code']}: {msg['error']}"
            except websockets.ConnectionClosed as exc:
                res.error = res.error or f"closed {exc.rcvd.code if exc.rcvd else '?'}"
            finally:
                done.set()

        task = asyncio.create_task(reader())
        t_finish = await send_paced(ws, res, t0, {"type": "Terminate"})
        await done.wait()
        await task
    res.text = " ".join(formatted)
