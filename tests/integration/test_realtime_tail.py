"""Nothing lost at the end of a live session, on every dev item with speech.

Each item of :func:`evaluation.coverage.dev_items` (the conversations, the real recordings
with a quoted reference, an even sample of 20 Asterisk prompts) is cut 100 ms after its
speech ends, so the stream stops while its last segment is still open, the case where a
session's last words are lost if anything is. Each cut goes through a real stack twice:
streamed over ``WSS /v1/realtime`` (at 8 times real time, which this module's stack allows
with a larger burst, then ``finish``), and transcribed by the batch API. The last
``transcript`` message before ``finished`` must be final and cover the batch transcript to
its end: the batch words it lacks at the end of the alignment (a lost tail) must be none,
and it must hold most of the batch words overall.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jiwer
import pytest
import websockets

from evaluation.coverage import CoverageItem, dev_items, matched_words
from evaluation.text import numbers_joined
from ops.stack import EVAL, EvalServer, Stack

from .live_conversation import cut_in_speech, pcm_of

pytestmark = pytest.mark.stack

MAX_FRAME = 64 * 1024
"""The largest audio frame the protocol takes (2048 ms)."""
PARALLEL = 5
"""Sessions streamed at once: one account's limit."""
PACE = 8
"""Times real time the audio is sent at: a 64 KB frame every 0.26 s. The gateway forwards
what it has gathered as one record, and several such frames at once would pass the broker's
record size."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # A burst of 10 minutes lets a client send faster than real time; the worker then has
    # much of it to decode at ``finish``, which it is given time for. A worker gives up a
    # session without audio after 5 s here: one that has its final record must not be given
    # up while its last finals decode (a session was, after 90 s of backlog, before).
    env = {"A5S_REALTIME__BURST_MS": "600000", "A5S_REALTIME__FINISH_TIMEOUT_S": "600",
           "A5S_REALTIME__WORKER_ORPHAN_S": "5",
           "A5S_REALTIME__PROVIDER_START_TIMEOUT_S": "120"}
    s = Stack(tmp_path_factory.mktemp("realtime-tail") / "data", env=env)
    s.data_dir.mkdir(parents=True)
    s.start()
    yield s
    s.stop()


def tail_lost(batch: list[str], stream: list[str]) -> list[str]:
    """The batch words the stream lacks after the last one it has a word for (the
    alignment's trailing deletions)."""
    if not stream:
        return batch
    alignment = jiwer.process_words(" ".join(batch) or "<empty>", " ".join(stream))
    lost = 0
    for chunk in reversed(alignment.alignments[0]):
        if chunk.type == "insert":
            continue
        if chunk.type != "delete":
            break
        lost += chunk.ref_end_idx - chunk.ref_start_idx
    return batch[len(batch) - lost:]


def test_tail_lost_is_the_trailing_deletions() -> None:
    assert tail_lost("a b c d".split(), "a b c d".split()) == []
    assert tail_lost("a b c d".split(), "a x c d e".split()) == []
    assert tail_lost("a b c d".split(), "a b".split()) == ["c", "d"]
    assert tail_lost("a b".split(), []) == ["a", "b"]
    assert tail_lost([], "a".split()) == []


async def stream(stack: Stack, key: str, pcm: bytes) -> list[dict[str, Any]]:
    """One session: the whole clip at once, ``finish``, every message up to the close."""
    messages: list[dict[str, Any]] = []
    async with websockets.connect(stack.ws_url, max_size=None,
                                  additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        await ws.send(json.dumps({"type": "start"}))
        while (message := json.loads(await ws.recv()))["type"] != "ready":
            assert message["type"] != "error", (message, stack.log_tail(60))
        t0 = time.perf_counter()
        for i in range(0, len(pcm), MAX_FRAME):
            await ws.send(pcm[i:i + MAX_FRAME])
            await asyncio.sleep(max(0.0, t0 + (i + MAX_FRAME) / 32000 / PACE
                                    - time.perf_counter()))
        await ws.send(json.dumps({"type": "finish"}))
        with contextlib.suppress(websockets.ConnectionClosed):
            async for raw in ws:
                messages.append(json.loads(raw))
        assert ws.close_code == 1000, (messages[-3:], stack.log_tail(40))
    return messages


def write_wav(path: Path, pcm: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm)


def test_every_dev_item_ends_with_all_its_words(stack: Stack, tmp_path: Path) -> None:
    items: list[CoverageItem] = dev_items(EVAL)
    clips = {item.path: cut_in_speech(pcm_of(EVAL / item.path)) for item in items}
    for path, pcm in clips.items():
        write_wav(tmp_path / f"{path}.wav", pcm)
    _, key = stack.new_account()
    server = EvalServer(tmp_path)
    try:
        with stack.client(key) as http:
            jobs = {}
            for path in clips:
                resp = http.post("/v1/transcripts", json={"audio_url": server.url(f"{path}.wav")})
                assert resp.is_success, resp.text
                jobs[path] = resp.json()["id"]

            async def all_streams() -> dict[str, list[dict[str, Any]]]:
                gate = asyncio.Semaphore(PARALLEL)

                async def one(path: str) -> list[dict[str, Any]]:
                    async with gate:
                        return await stream(stack, key, clips[path])

                done = await asyncio.gather(*(one(path) for path in clips))
                return dict(zip(clips, done))

            streamed = asyncio.run(asyncio.wait_for(all_streams(), 1800))
            batch = {path: stack.wait_transcript(http, tid, timeout_s=1800)
                     for path, tid in jobs.items()}
    finally:
        server.close()

    problems, matched, total = [], 0, 0
    for path, messages in streamed.items():
        assert batch[path]["status"] == "completed", batch[path]
        kinds = [m["type"] for m in messages]
        assert kinds[-1] == "finished" and "error" not in kinds, (path, messages[-3:])
        last = messages[-2]
        if last["type"] != "transcript" or not last["is_final"]:
            problems.append(f"{path}: the message before finished is {last}")
            continue
        want = numbers_joined(batch[path]["text"] or "").split()
        have = numbers_joined(last["text"]).split()
        lost = tail_lost(want, have)
        if lost:
            problems.append(f"{path}: the last transcript lacks the batch's last words "
                            f"{' '.join(lost)!r}: ...{' '.join(have[-12:])!r}")
        matched += len(matched_words(want, have))
        total += len(want)
    assert not problems, "\n".join(problems)
    # Offline, the streaming recognizer's text of the whole items holds 93% of the batch words
    # (tiny.en against base); a lost utterance anywhere costs several points.
    assert total and matched / total >= 0.85, f"{matched} of {total} batch words shown"
