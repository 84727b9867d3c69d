"""transcribe: word-timed recognition of each chunk of the decoded audio."""

from __future__ import annotations

from schemas.records import ChunkPlan, Transcribed
from stores.objects import ObjectMissing
from topologies.objects import JobFiles
from topologies.topics import TRANSCRIBED

from ..engines import Engines
from ..types import Region
from .common import inputs_missing, plan_step
from .ports import Ports

__all__ = ["run"]


async def run(ports: Ports, plan: ChunkPlan) -> None:
    tid, files = plan.transcript_id, JobFiles(plan.transcript_id)
    canceled = await ports.flags.is_canceled(tid)
    done = not canceled and await ports.objects.exists(files.words)
    step = plan_step(canceled, done)
    if step == "drop":
        return
    if step == "run":
        chunks = [Region(c.start, c.end) for c in plan.chunks]
        try:
            async with ports.objects.local_copy(files.audio) as pcm:
                words = await ports.models.run(ports.models.transcribe, pcm, chunks)
        except ObjectMissing as exc:
            return await inputs_missing(ports, tid, "transcribe", exc)
        await ports.objects.put_bytes(files.words, Engines.dump_words(words))
    await ports.publish(TRANSCRIBED, tid, Transcribed(
        account_id=plan.account_id, transcript_id=tid, duration=plan.duration,
        result_key=files.words))
