"""What the live-session scenarios share: the conversation they stream at real-time pace,
its reference, how its words are compared, and where speech ends in a clip."""

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


def speech_end(pcm: bytes) -> int:
    """Byte offset just past the last 32 ms window Silero VAD calls speech (0: none), as the
    streaming recognizer's VAD hears the clip."""
    from pipeline.realtime import StreamingVad, VadOptions, default_vad_path
    from pipeline.realtime.recognizer import pcm_to_float
    from pipeline.realtime.vad import VAD_WINDOW
    probs = StreamingVad(default_vad_path()).stream().accept(pcm_to_float(pcm[:len(pcm) // 2 * 2]))
    spoken = [k for k, p in enumerate(probs) if p >= VadOptions().threshold]
    return (spoken[-1] + 1) * VAD_WINDOW * 2 if spoken else 0


def cut_in_speech(pcm: bytes, after_ms: int = 100) -> bytes:
    """The clip cut ``after_ms`` after its speech ends: a stream that stops while its last
    segment is still open (the recognizer closes one after 192 ms of silence)."""
    return pcm[:min(len(pcm), speech_end(pcm) + after_ms * 32)]
