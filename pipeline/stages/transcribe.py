"""transcribe: word-timed recognition of each chunk of the decoded audio (a multichannel
job's chunks each from its own channel's audio, its words marked with that channel).

A job that asks for PII redaction has its words redacted here, before they are first
stored: nothing downstream (the result, ClickHouse, the topics, webhooks) ever holds
the words as spoken. The redacted audio, when asked for, is written before the words,
so a replay that finds the words stored finds it too. A job with key terms
(``JobSpec.vocabulary``) has the recogniser prompted with them.

A job that is not diarized and mixed down to one audio (``JobSpec.assembled_by_transcribe``:
``/v2`` without ``speaker_labels``) is completed here, one speaker's: its result goes to
finalize and the diarize stage never sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from schemas.records import Chunk, ChunkPlan, JobOutcome, JobSpec, PiiRedaction, Transcribed
from stores.objects import ObjectMissing
from topologies.objects import JobFiles
from topologies.topics import OUTCOMES, TRANSCRIBED

from ..engines import Engines
from ..redaction import audio_regions, find_pii, redact_words, write_redacted_audio
from ..types import Region, TimedWord
from .common import inputs_missing, plan_step
from .ports import Ports

__all__ = ["by_channel", "hotwords", "run"]


def by_channel(chunks: list[Chunk]) -> dict[int | None, list[Region]]:
    """The chunks of each channel (None: the mixed-down audio), in plan order."""
    out: dict[int | None, list[Region]] = {}
    for c in chunks:
        out.setdefault(c.channel, []).append(Region(c.start, c.end))
    return out


def hotwords(vocabulary: list[tuple[str, int]] | None) -> str | None:
    """The recogniser's prompt for a job's key terms, as a live session's custom
    vocabulary is written (:class:`~pipeline.realtime.vocabulary.Vocabulary`); None for
    none."""
    if not vocabulary:
        return None
    from ..realtime.vocabulary import Vocabulary, VocabularyTerm
    text = Vocabulary([VocabularyTerm(text=t, strength=s) for t, s in vocabulary]).prompt_text
    return text or None


async def run(ports: Ports, plan: ChunkPlan) -> None:
    tid, files = plan.transcript_id, JobFiles(plan.transcript_id)
    canceled = await ports.flags.is_canceled(tid)
    done = not canceled and await ports.objects.exists(files.words)
    step = plan_step(canceled, done)
    if step == "drop":
        return
    try:
        spec = JobSpec.model_validate_json(await ports.objects.get_bytes(files.spec))
        if step == "run":
            # a job without speech still reads its audio (a lost copy fails the job); a
            # multichannel job's silent channels have no chunks and nothing to read
            chunks = by_channel(plan.chunks) or ({} if plan.channels else {None: []})
            words = await _recognise(ports, files, chunks, hotwords(spec.vocabulary))
            if spec.redaction is not None:
                words = await _redact(ports, files, words, spec.redaction)
        elif spec.assembled_by_transcribe:
            words = Engines.load_words(await ports.objects.get_bytes(files.words))
    except ObjectMissing as exc:
        return await inputs_missing(ports, tid, "transcribe", exc)
    if step == "run":
        await ports.objects.put_bytes(files.words, Engines.dump_words(words))
    if spec.assembled_by_transcribe:
        result = Engines.undiarized(words)
        await ports.objects.put_bytes(files.result, result.model_dump_json().encode())
        await ports.publish(OUTCOMES, tid, JobOutcome(
            account_id=plan.account_id, transcript_id=tid, status="completed",
            duration=plan.duration, result_key=files.result))
        return
    await ports.publish(TRANSCRIBED, tid, Transcribed(
        account_id=plan.account_id, transcript_id=tid, duration=plan.duration,
        result_key=files.words, channels=plan.channels))


async def _recognise(ports: Ports, files: JobFiles, chunks: dict[int | None, list[Region]],
                     prompt: str | None = None) -> list[TimedWord]:
    """All channels at once, so their chunks share the recogniser's batches; ``prompt``:
    the job's key terms (:func:`hotwords`)."""
    async with contextlib.AsyncExitStack() as stack:
        pcms = {n: await stack.enter_async_context(ports.objects.local_copy(
            files.channel_audio(n))) for n in chunks}
        parts = await asyncio.gather(*(ports.models.run(ports.models.transcribe, pcms[n], regions,
                                                        prompt)
                                       for n, regions in chunks.items()))
    return [w if n is None else dataclasses.replace(w, channel=n)
            for n, part in zip(chunks, parts) for w in part]


async def _redact(ports: Ports, files: JobFiles, words: list[TimedWord],
                  redaction: PiiRedaction) -> list[TimedWord]:
    """The words with their PII substituted; the redacted audio (of a job mixed down to one
    audio: the gateway refuses it for a multichannel one) written first if asked."""
    spans = find_pii(words, redaction.policies)
    if redaction.audio:
        async with ports.objects.local_copy(files.audio) as pcm, \
                ports.objects.writer(files.redacted_audio) as out:
            await ports.models.run(write_redacted_audio, pcm, audio_regions(words, spans), out,
                                   redaction.audio_method, redaction.audio_format)
    return redact_words(words, spans, redaction.substitution)
