"""Key terms of a batch job: from the spec to the recogniser's prompt, batched only with
chunks of the same terms, and refused past the limits at ``/v2``."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gateway.assemblyai_compat import create_body, vocabulary_of
from memory_ports import Harness
from pipeline.asr.batching import BatchingTranscriber, BatchOptions
from pipeline.engines import Engines
from pipeline.stages import transcribe
from pipeline.stages.transcribe import hotwords
from pipeline.types import SAMPLE_RATE, TimedWord
from schemas.assemblyai import AaiCreateTranscript
from schemas.errors import InvalidRequest
from schemas.records import Chunk, ChunkPlan
from topologies.objects import JobFiles


class PromptedEngine:
    """Records each call's offsets and hotwords; ``takes_hotwords`` as given."""

    name = "prompted"

    def __init__(self, takes_hotwords: bool = True) -> None:
        self.takes_hotwords = takes_hotwords
        self.calls: list[tuple[list[float], str | None]] = []

    def transcribe(self, audio: np.ndarray, offset: float, **kw: Any) -> list[TimedWord]:
        return self.transcribe_batch([(audio, offset)], **kw)[0]

    def transcribe_batch(self, items: list[tuple[np.ndarray, float]],
                         hotwords: str | None = None) -> list[list[TimedWord]]:
        self.calls.append(([o for _, o in items], hotwords))
        return [[TimedWord(f"w{o:g}", o, o + 0.1)] for _, o in items]


def _batcher(engine: Any, pool: ThreadPoolExecutor) -> BatchingTranscriber:
    async def run(fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)
    return BatchingTranscriber(lambda: engine, run, BatchOptions(max_batch=8, max_wait_ms=50))


def _second() -> np.ndarray:
    return np.full(SAMPLE_RATE, 0.1, dtype=np.float32)


async def test_chunks_with_other_terms_never_share_a_batch() -> None:
    engine = PromptedEngine()
    with ThreadPoolExecutor(1) as pool:
        b = _batcher(engine, pool)
        jobs = [(None, 0.0), ("Kubernetes.", 100.0), ("Acme, Zorblax.", 200.0)]
        out = await asyncio.gather(*(b.transcribe(_second(), base + k, None, terms)
                                     for terms, base in jobs for k in range(3)))
        await b.close()
    assert [w[0].text for w in out] == [f"w{base + k:g}" for _, base in jobs for k in range(3)]
    seen = {terms: offsets for offsets, terms in engine.calls}
    assert seen == {None: [0.0, 1.0, 2.0], "Kubernetes.": [100.0, 101.0, 102.0],
                    "Acme, Zorblax.": [200.0, 201.0, 202.0]}


async def test_an_engine_without_a_prompt_gets_no_terms() -> None:
    engine = PromptedEngine(takes_hotwords=False)
    with ThreadPoolExecutor(1) as pool:
        b = _batcher(engine, pool)
        await b.transcribe(_second(), 0.0, None, "Kubernetes.")
        await b.close()
    assert engine.calls == [([0.0], None)]


def test_the_prompt_is_written_as_a_live_sessions_vocabulary() -> None:
    assert hotwords(None) is None and hotwords([]) is None
    assert hotwords([("kubectl", 6), ("Acme Corp", 9)]) == "Acme Corp, kubectl."
    assert hotwords([("casing only", 0)]) is None


async def test_the_transcribe_stage_prompts_with_the_specs_terms(tmp_path: Path) -> None:
    h = Harness.for_node("transcribe", tmp_path)
    await h.job(vocabulary=[("Zorblax", 6)])
    files = JobFiles("tr_1")
    await h.objects.put_bytes(files.audio, b"\x00" * 100)
    await transcribe.run(h.ports, ChunkPlan(account_id="acct", transcript_id="tr_1",
                                            duration=2.5, chunks=[Chunk(start=0.1, end=2.4)]))
    assert h.models.hotwords == "Zorblax."
    assert Engines.load_words(await h.objects.get_bytes(files.words))


def _req(**fields: object) -> AaiCreateTranscript:
    return AaiCreateTranscript.model_validate({"audio_url": "https://cdn.example/a.wav",
                                               **fields})


def test_keyterms_and_word_boost_map_to_strengths() -> None:
    assert vocabulary_of(_req()) is None
    assert vocabulary_of(_req(keyterms_prompt=["Kubernetes", " kubectl "])) == \
        [("Kubernetes", 6), ("kubectl", 6)]
    assert vocabulary_of(_req(word_boost=["Acme"], boost_param="high")) == [("Acme", 9)]
    assert vocabulary_of(_req(word_boost=["Acme"], boost_param="low")) == [("Acme", 3)]
    assert vocabulary_of(_req(word_boost=["Acme"])) == [("Acme", 6)]
    body = create_body(_req(word_boost=["Acme"], boost_param="high"), {"a5s.example"})
    assert body["metadata"]["assemblyai"]["word_boost"] == ["Acme"]


@pytest.mark.parametrize(("fields", "param", "says"), [
    ({"keyterms_prompt": ["a"], "word_boost": ["b"]}, "word_boost", "not both"),
    ({"boost_param": "high"}, "boost_param", "needs word_boost"),
    ({"keyterms_prompt": ["x"] * 101}, "keyterms_prompt", "at most 100 terms"),
    ({"keyterms_prompt": ["x" * 101]}, "keyterms_prompt", "1 to 100 characters"),
    ({"word_boost": ["one two three four five six seven"]}, "word_boost", "at most 6 words"),
    ({"word_boost": ["  "]}, "word_boost", "1 to 100 characters"),
    ({"keyterms_prompt": ["y" * 90] * 12}, "keyterms_prompt", "1000 characters in all"),
])
def test_key_terms_past_the_limits_are_refused(fields: dict[str, Any], param: str,
                                               says: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        create_body(_req(**fields), {"a5s.example"})
    assert exc.value.param == param and says in exc.value.message


def test_a_boost_param_outside_its_values_is_refused() -> None:
    with pytest.raises(ValueError):
        _req(word_boost=["a"], boost_param="max")


def test_a_trailing_echo_of_the_prompt_is_dropped() -> None:
    from pipeline.asr.whisper import _drop_prompt_echo
    words = [TimedWord(" a", 29.0, 29.2, 0.99), TimedWord(" telephone.", 29.2, 29.76, 0.98),
             TimedWord(" Asterisk,", 29.76, 30.1, 0.17), TimedWord(" PBX.", 30.24, 30.24, 0.004)]
    assert _drop_prompt_echo(words, "Asterisk, PBX.", 0.5) == words[:2]
    assert _drop_prompt_echo(words, None, 0.5) == words  # no prompt, nothing to echo
    sure = [*words[:2], TimedWord(" Asterisk.", 29.76, 30.1, 0.9)]
    assert _drop_prompt_echo(sure, "Asterisk, PBX.", 0.5) == sure  # said, and heard so
    inner = [TimedWord(" PBX", 0.0, 0.3, 0.2), TimedWord(" phones.", 0.3, 0.8, 0.9)]
    assert _drop_prompt_echo(inner, "Asterisk, PBX.", 0.5, 0.01) == inner  # only at the end
    unheard = [TimedWord(" IVR,", 0.0, 0.3, 0.0004), *inner]
    assert _drop_prompt_echo(unheard, "IVR, PBX.", 0.5, 0.01) == inner  # anywhere below 0.01
