"""diarize: speakers of the recognised words (embeddings of the speech regions chunk stored,
clustered), assembled into the job's result; a ``completed`` outcome for finalize."""

from __future__ import annotations

from schemas.records import JobOutcome, JobSpec, Transcribed
from stores.objects import ObjectMissing
from topologies.objects import JobFiles
from topologies.topics import OUTCOMES

from ..engines import Engines
from .common import inputs_missing, plan_step
from .ports import Ports

__all__ = ["run"]


async def run(ports: Ports, done: Transcribed) -> None:
    tid, files = done.transcript_id, JobFiles(done.transcript_id)
    canceled = await ports.flags.is_canceled(tid)
    step = plan_step(canceled, not canceled and await ports.objects.exists(files.result))
    if step == "drop":
        return
    if step == "run":
        try:
            words = Engines.load_words(await ports.objects.get_bytes(done.result_key))
            speech = Engines.load_regions(await ports.objects.get_bytes(files.speech))
            spec = JobSpec.model_validate_json(await ports.objects.get_bytes(files.spec))
            async with ports.objects.local_copy(files.audio) as pcm:
                result = await ports.models.run(ports.models.diarize, pcm, speech, words,
                                                spec.speakers_expected)
        except ObjectMissing as exc:
            return await inputs_missing(ports, tid, "diarize", exc)
        await ports.objects.put_bytes(files.result, result.model_dump_json().encode())
    await ports.publish(OUTCOMES, tid, JobOutcome(
        account_id=done.account_id, transcript_id=tid, status="completed",
        duration=done.duration, result_key=files.result))
