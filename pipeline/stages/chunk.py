"""chunk: once the quota admits the job, find its speech (Silero VAD) and merge it into
recognition chunks. The speech regions are stored for diarize too.

A multichannel job's channels are chunked one by one: each chunk names its channel, and
each channel's speech regions are stored on their own (``speech-<n>.json``)."""

from __future__ import annotations

import json

from schemas.errors import JobErrorCode, JobFailed
from schemas.records import Admission, Chunk, ChunkPlan
from stores.objects import ObjectMissing
from topologies.objects import JobFiles
from topologies.topics import CHUNKS

from ..engines import Engines
from ..types import Region
from .common import Step, inputs_missing, plan_step, stored
from .ports import Ports

__all__ = ["plan_chunk", "chunk_plan", "dump_chunks", "load_chunks", "run"]


def plan_chunk(canceled: bool, verdict: Admission, planned: bool) -> Step:
    """Raises ``JobFailed`` (``usage_limit_reached``) when the ledger refused the job."""
    if not canceled and not verdict.admitted:
        raise JobFailed(JobErrorCode.usage_limit_reached, verdict.reason or
                        "The audio is longer than the remaining usage.")
    return plan_step(canceled, planned)


def chunk_plan(verdict: Admission, chunks: list[Chunk]) -> ChunkPlan:
    return ChunkPlan(account_id=verdict.account_id, transcript_id=verdict.transcript_id,
                     duration=verdict.duration, chunks=chunks, channels=verdict.channels)


def dump_chunks(chunks: list[Chunk]) -> bytes:
    """``chunks.json``: ``[start, end]`` each, ``[start, end, channel]`` for a channel's."""
    return json.dumps([[c.start, c.end] if c.channel is None else [c.start, c.end, c.channel]
                       for c in chunks]).encode()


def load_chunks(raw: bytes) -> list[Chunk]:
    return [Chunk(start=c[0], end=c[1], channel=c[2] if len(c) > 2 else None)
            for c in json.loads(raw)]


def _chunks(regions: list[Region], channel: int | None = None) -> list[Chunk]:
    return [Chunk(start=r.start, end=r.end, channel=channel) for r in regions]


async def run(ports: Ports, verdict: Admission) -> None:
    tid, files = verdict.transcript_id, JobFiles(verdict.transcript_id)
    canceled = await ports.flags.is_canceled(tid)
    planned = None if canceled or not verdict.admitted else await stored(ports, files.chunks)
    step = plan_chunk(canceled, verdict, planned is not None)
    if step == "drop":
        return
    if step == "reuse":
        assert planned is not None
        chunks = load_chunks(planned)
    else:
        try:
            if verdict.channels is None:
                async with ports.objects.local_copy(files.audio) as pcm:
                    speech, regions = await ports.models.run(ports.models.speech, pcm)
                await ports.objects.put_bytes(files.speech, Engines.dump_regions(speech))
                chunks = _chunks(regions)
            else:
                chunks = []
                for n in range(1, verdict.channels + 1):
                    async with ports.objects.local_copy(files.channel_audio(n)) as pcm:
                        speech, regions = await ports.models.run(ports.models.speech, pcm)
                    await ports.objects.put_bytes(files.channel_speech(n),
                                                  Engines.dump_regions(speech))
                    chunks += _chunks(regions, n)
        except ObjectMissing as exc:
            return await inputs_missing(ports, tid, "chunk", exc)
        await ports.objects.put_bytes(files.chunks, dump_chunks(chunks))
    await ports.publish(CHUNKS, tid, chunk_plan(verdict, chunks))
