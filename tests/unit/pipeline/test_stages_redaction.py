"""The transcribe stage redacts a job's words before it stores them, and writes the redacted
audio first; clean-up keeps the redacted audio only for a completed transcript."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np

from memory_ports import Harness
from pipeline.engines import Engines
from pipeline.stages import transcribe
from pipeline.stages.common import cleanup
from pipeline.types import SAMPLE_RATE, TimedWord
from schemas.records import Chunk, ChunkPlan, JobSpec, PiiRedaction
from topologies.objects import JobFiles

FILES = JobFiles("tr_1")
PLAN = ChunkPlan(account_id="acct", transcript_id="tr_1", duration=3.0,
                 chunks=[Chunk(start=0.0, end=3.0)])
SPOKEN = [TimedWord("call", 0.1, 0.4, 0.9), TimedWord("415", 0.5, 0.9, 0.8),
          TimedWord("555", 1.0, 1.4, 0.7), TimedWord("0132", 1.5, 2.0, 0.95),
          TimedWord("thanks", 2.2, 2.6, 0.9)]


async def _job(h: Harness, redaction: PiiRedaction | None) -> None:
    row = await h.job()
    spec = JobSpec.model_validate_json(await h.objects.get_bytes(FILES.spec))
    spec = spec.model_copy(update={"redaction": redaction})
    await h.objects.put_bytes(FILES.spec, spec.model_dump_json().encode())
    tone = np.sin(2 * np.pi * 300 * np.arange(3 * SAMPLE_RATE) / SAMPLE_RATE) * 8000
    await h.objects.put_bytes(FILES.audio, tone.astype("<i2").tobytes())

    async def spoken(pcm: Path, chunks: object, hotwords: str | None = None) -> list[TimedWord]:
        h.models.calls["transcribe"] += 1
        return SPOKEN
    h.models.transcribe = spoken  # type: ignore[method-assign]
    assert row.status == "processing"


async def test_words_are_stored_redacted_and_the_audio_beside_them(tmp_path: Path) -> None:
    h = Harness.for_node("transcribe", tmp_path)
    await _job(h, PiiRedaction(policies=["phone_number"], substitution="entity_name", audio=True,
                               audio_method="silence", audio_format="wav"))
    await transcribe.run(h.ports, PLAN)
    stored = Engines.load_words(await h.objects.get_bytes(FILES.words))
    assert [w.text for w in stored] == ["call"] + ["[PHONE_NUMBER]"] * 3 + ["thanks"]
    assert [(w.start, w.end) for w in stored] == [(w.start, w.end) for w in SPOKEN]
    with wave.open(io.BytesIO(await h.objects.get_bytes(FILES.redacted_audio))) as wav:
        samples = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    assert len(samples) == 3 * SAMPLE_RATE
    assert not samples[int(0.5 * SAMPLE_RATE):int(2.0 * SAMPLE_RATE)].any()
    assert samples[int(2.2 * SAMPLE_RATE):].any() and samples[:int(0.4 * SAMPLE_RATE)].any()
    await transcribe.run(h.ports, PLAN)  # a replay reuses both
    assert h.models.calls["transcribe"] == 1


async def test_without_redaction_the_words_are_kept_and_no_audio_is_written(
        tmp_path: Path) -> None:
    h = Harness.for_node("transcribe", tmp_path)
    await _job(h, None)
    await transcribe.run(h.ports, PLAN)
    assert Engines.load_words(await h.objects.get_bytes(FILES.words)) == SPOKEN
    assert not await h.objects.exists(FILES.redacted_audio)


async def test_clean_up_keeps_the_redacted_audio_only_when_asked(tmp_path: Path) -> None:
    h = Harness.for_node("publish", tmp_path)
    for keep in (True, False):
        await h.job()
        await h.objects.put_bytes(FILES.audio, b"\x00\x00")
        await h.objects.put_bytes(FILES.redacted_audio, b"RIFF")
        await cleanup(h.ports, "tr_1", None, keep_redacted=keep)
        assert await h.keys() == ([FILES.redacted_audio] if keep else [])
