"""What the live-session scenarios share: the conversation they stream at real-time pace,
its reference, and how its words are compared."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from typing import Any

from ops.stack import EVAL

CONVERSATION = EVAL / "synthetic" / "conv01_support_call.wav"
FRAME = 640
"""20 ms of 16 kHz 16-bit audio: what a client sends at a time."""


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " ")).split()


def pcm_of(path: Path = CONVERSATION) -> bytes:
    from pipeline.audio import decode_to_pcm
    out = io.BytesIO()
    decode_to_pcm(path, out)
    return out.getvalue()


def reference_of(path: Path = CONVERSATION) -> str:
    """The reference turns' text in order of their start."""
    turns = json.loads(path.with_suffix(".json").read_text())["turns"]
    return " ".join(t["text"] for t in sorted(turns, key=lambda t: t["start"]))


async def started(ws: Any) -> float:
    """Open the session (``start`` until ``ready``); the clock its audio is paced on."""
    await ws.send(json.dumps({"type": "start"}))
    while json.loads(await ws.recv())["type"] != "ready":
        pass
    return time.monotonic()
