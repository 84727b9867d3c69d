"""chunk: once the quota admits the job, find its speech (Silero VAD) and merge it into
recognition chunks. The speech regions are stored for diarize too."""

from __future__ import annotations

from schemas.errors import JobErrorCode, JobFailed
from schemas.records import Admission, Chunk, ChunkPlan
from stores.objects import ObjectMissing
from topologies.objects import JobFiles
from topologies.topics import CHUNKS

from ..engines import Engines
from ..types import Region
from .common import Step, inputs_missing, plan_step, stored
from .ports import Ports

__all__ = ["plan_chunk", "chunk_plan", "run"]


def plan_chunk(canceled: bool, verdict: Admission, planned: bool) -> Step:
    """Raises ``JobFailed`` (``usage_limit_reached``) when the ledger refused the job."""
    if not canceled and not verdict.admitted:
        raise JobFailed(JobErrorCode.usage_limit_reached, verdict.reason or
                        "The audio is longer than the remaining usage.")
    return plan_step(canceled, planned)


def chunk_plan(verdict: Admission, chunks: list[Region]) -> ChunkPlan:
    return ChunkPlan(account_id=verdict.account_id, transcript_id=verdict.transcript_id,
                     duration=verdict.duration,
                     chunks=[Chunk(start=c.start, end=c.end) for c in chunks])


async def run(ports: Ports, verdict: Admission) -> None:
    tid, files = verdict.transcript_id, JobFiles(verdict.transcript_id)
    canceled = await ports.flags.is_canceled(tid)
    planned = None if canceled or not verdict.admitted else await stored(ports, files.chunks)
    step = plan_chunk(canceled, verdict, planned is not None)
    if step == "drop":
        return
    if step == "reuse":
        assert planned is not None
        chunks = Engines.load_regions(planned)
    else:
        try:
            async with ports.objects.local_copy(files.audio) as pcm:
                speech, chunks = await ports.models.run(ports.models.speech, pcm)
        except ObjectMissing as exc:
            return await inputs_missing(ports, tid, "chunk", exc)
        await ports.objects.put_bytes(files.speech, Engines.dump_regions(speech))
        await ports.objects.put_bytes(files.chunks, Engines.dump_regions(chunks))
    await ports.publish(CHUNKS, tid, chunk_plan(verdict, chunks))
