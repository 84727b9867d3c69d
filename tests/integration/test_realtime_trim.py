"""The worker deletes the live topics' records no session needs, never what a takeover needs.

The embedded broker's CPU grows with what its log holds (docs/realtime.md, "The broker's
CPU"), so the realtime agent trims ``realtime-audio`` and ``realtime-messages``
(:mod:`pipeline.realtime.trim`). Here the records are kept 30 s: a session streams a 56 s
conversation; while it lives its transcript messages older than that are gone, and so is
its audio before its latest checkpoint, but the log still holds a checkpoint of the
session and every audio record after the one it names (what a takeover replays,
:func:`pipeline.realtime.checkpoint.resume_audio`); once it has ended, its audio goes too.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import jiwer
import pytest
import websockets
from aiokafka import AIOKafkaConsumer, TopicPartition

from ops.stack import Stack
from pipeline.realtime.checkpoint import resume_audio
from schemas.records import RealtimeAudio, RealtimeCheckpoint
from topologies.topics import REALTIME_AUDIO

from .live_conversation import FRAME, pcm_of, reference_of, started, words

pytestmark = [pytest.mark.stack, pytest.mark.timeout(400)]

KEEP_S = 30
OPENED = re.compile(r"realtime: session (\S+) opened on partition")


@pytest.fixture(scope="module")
def trimming(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("trim") / "data",
              env={"A5S_REALTIME__LOG_KEEP_S": str(KEEP_S)})
    s.data_dir.mkdir(parents=True)
    s.start()
    yield s
    s.stop()


async def log_starts(stack: Stack) -> dict[str, int]:
    """The summed first offset of each live topic's partitions (0: nothing deleted)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{stack.env['A5S_EMBEDDED__KAFKA']}",
                                group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        starts = {}
        for topic in ("realtime-audio", "realtime-messages"):
            tps = [TopicPartition(f"a5s.{topic}", p)
                   for p in sorted(consumer.partitions_for_topic(f"a5s.{topic}") or
                                   await _partitions(consumer, f"a5s.{topic}"))]
            starts[topic] = sum((await consumer.beginning_offsets(tps)).values())
        return starts
    finally:
        await consumer.stop()


async def resumable(stack: Stack, session_id: str) -> tuple[int, int]:
    """Read the session's audio log from its start as a takeover would: the seq its latest
    checkpoint names and the records after it (``resume_audio`` raises if any is gone)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{stack.env['A5S_EMBEDDED__KAFKA']}",
                                group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        topic = "a5s.realtime-audio"
        tps = [TopicPartition(topic, p) for p in sorted(await _partitions(consumer, topic))]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        audio: dict[int, RealtimeAudio] = {}
        last: tuple[int, RealtimeCheckpoint] | None = None
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for record in records:
                    value = REALTIME_AUDIO.decode(record.value)
                    if value.session_id != session_id:
                        continue
                    if value.checkpoint is not None:
                        last = value.seq, value.checkpoint
                    else:
                        audio[value.seq] = value
        assert last is not None, "no checkpoint of the live session in its log"
        seq, checkpoint = last
        resume_audio(checkpoint, seq, [audio[k] for k in sorted(audio) if k >= seq])
        return seq, min(audio)
    finally:
        await consumer.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    await consumer.topics()
    return consumer.partitions_for_topic(topic) or {0}


def test_what_a_takeover_needs_is_kept_and_the_rest_deleted(trimming: Stack) -> None:
    stack = trimming
    key = stack.new_account()[1]
    pcm = pcm_of()
    reference = reference_of()

    async def session() -> dict[str, Any]:
        got: list[dict[str, Any]] = []
        async with websockets.connect(stack.ws_url, max_size=None,
                                      additional_headers={"Authorization": f"Bearer {key}"}) as ws:
            t0 = await started(ws)

            async def reader() -> None:
                async for raw in ws:
                    got.append(json.loads(raw))

            task = asyncio.create_task(reader())
            for i in range(0, len(pcm), FRAME):
                await asyncio.sleep(max(0.0, t0 + i / 32000 - time.monotonic()))
                await ws.send(pcm[i:i + FRAME])
            live = await log_starts(stack)           # the session is still open
            log = stack.log_path
            session_id = OPENED.findall(log.read_text(errors="replace"))[-1]
            live["checkpoint"], live["first seq"] = await resumable(stack, session_id)
            await ws.send(json.dumps({"type": "finish"}))
            await task
            return {"messages": got, "live": live, "close": ws.close_code}

    result = asyncio.run(asyncio.wait_for(session(), 240))
    kinds = [m["type"] for m in result["messages"]]
    assert "error" not in kinds and kinds[-1] == "finished" and result["close"] == 1000, kinds
    final = [m["text"] for m in result["messages"] if m["type"] == "transcript"][-1]
    assert jiwer.wer(" ".join(words(reference)), " ".join(words(final))) < 0.2, final
    live = result["live"]
    assert live["realtime-messages"] > 0, f"messages older than {KEEP_S} s were kept: {live}"
    # its audio before the latest checkpoint went (record 0 with it); what a takeover
    # replays is all there (``resumable`` checked it)
    assert live["realtime-audio"] > 0 and live["first seq"] > 0, live
    deadline = time.monotonic() + KEEP_S + 60
    while (after := asyncio.run(log_starts(stack)))["realtime-audio"] <= live["realtime-audio"]:
        assert time.monotonic() < deadline, f"the ended session's audio was kept: {after}"
        time.sleep(2)
