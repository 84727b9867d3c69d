"""diarize: speakers of the recognised words (embeddings of the speech regions chunk stored,
clustered), assembled into the job's result; a ``completed`` outcome for finalize.

A multichannel job is not diarized: its speakers are its channels, each bounded by the
channel's own speech regions."""

from __future__ import annotations

from schemas.records import JobOutcome, JobSpec, Transcribed, TranscriptResult
from stores.objects import ObjectMissing
from topologies.objects import JobFiles
from topologies.topics import OUTCOMES

from ..engines import Engines
from ..types import TimedWord
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
            if done.channels is not None:
                result = await _channel_result(ports, files, words, done.channels)
            else:
                speech = Engines.load_regions(await ports.objects.get_bytes(files.speech))
                spec = JobSpec.model_validate_json(await ports.objects.get_bytes(files.spec))
                async with ports.objects.local_copy(files.audio) as pcm:
                    result = await ports.models.run(ports.models.diarize, pcm, speech, words,
                                                    spec.speaker_count())
        except ObjectMissing as exc:
            return await inputs_missing(ports, tid, "diarize", exc)
        await ports.objects.put_bytes(files.result, result.model_dump_json().encode())
    await ports.publish(OUTCOMES, tid, JobOutcome(
        account_id=done.account_id, transcript_id=tid, status="completed",
        duration=done.duration, result_key=files.result, channels=done.channels))


async def _channel_result(ports: Ports, files: JobFiles, words: list[TimedWord],
                          channels: int) -> TranscriptResult:
    """A multichannel job's result from each channel's speech regions (chunk stored them)."""
    speech = {n: Engines.load_regions(await ports.objects.get_bytes(files.channel_speech(n)))
              for n in range(1, channels + 1)}
    result: TranscriptResult = await ports.models.run(ports.models.channel_result, speech,
                                                      words, channels)
    return result
