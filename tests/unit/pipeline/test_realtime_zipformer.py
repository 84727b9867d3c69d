"""The streaming Zipformer engine on a tiny streaming export these tests build.

The model's weights are random, but its encoder marks quiet audio as silence (its
joiner then says blank), so sherpa-onnx's endpoint rules fire on real pauses.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from pipeline.audio import decode_to_pcm
from pipeline.realtime import VocabularyTerm
from pipeline.realtime.vocabulary import Vocabulary
from pipeline.realtime.zipformer import (ZipformerModel, ZipformerOptions,
                                         ZipformerRealtimeEngine, _spellable)
from schemas.errors import StreamError

from asr_support import JFK
from tiny_transducer import TOKENS, build_tiny_streaming_transducer

SR = 16000


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_streaming_transducer(tmp_path_factory.mktemp("tiny-streaming"))


@pytest.fixture(scope="module")
def model(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> ZipformerModel:
    return ZipformerModel(model_dir, tmp_path_factory.mktemp("cache"),
                          ZipformerOptions(truecase=False))


@pytest.fixture(scope="module")
def jfk_pcm(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    pcm = tmp_path_factory.mktemp("pcm") / "jfk.pcm"
    with pcm.open("wb") as out:
        decode_to_pcm(JFK, out)
    return pcm.read_bytes()


def session(model: ZipformerModel, pcm: bytes, terms: list[VocabularyTerm] = (),
            step: int = 3200, max_sessions: int = 4):
    async def go():
        engine = ZipformerRealtimeEngine(model, ZipformerOptions(max_sessions=max_sessions))
        engine.open("s", terms)
        updates = []
        for i in range(0, len(pcm), step):
            updates += await engine.accept("s", pcm[i:i + step])
        updates += await engine.finish("s")
        await engine.aclose()
        return updates
    return asyncio.run(go())


def test_partials_every_chunk_then_sentences_at_endpoints(model: ZipformerModel,
                                                          jfk_pcm: bytes) -> None:
    pcm = jfk_pcm[: 5 * SR * 2] + bytes(3 * SR) + jfk_pcm[5 * SR * 2:]   # 1.5 s pause
    updates = session(model, pcm)
    partials = [u for u in updates if not u.is_final]
    finals = [u for u in updates if u.is_final]
    chunks = len(pcm) // 3200
    assert len(partials) >= chunks // 2, "a partial for (nearly) every 100 ms sent"
    assert len(finals) >= 2 and updates[-1].is_final
    first = finals[0]
    assert first.text.endswith(".") and first.text[0].isupper()
    assert 4.0 < first.end < 7.5, "the pause, not the end of the stream, settled it"
    assert updates[-1].text.startswith(first.text) and updates[-1].end > first.end
    assert "<" not in updates[-1].text
    assert [u.segment for u in finals] == list(range(len(finals)))


def test_hotwords_map_strength_and_skip_what_the_pieces_cannot_spell(
        model: ZipformerModel) -> None:
    vocab = Vocabulary([VocabularyTerm(text="ask  not", strength=12),
                        VocabularyTerm(text="Kubernetes", strength=6),
                        VocabularyTerm(text="so", strength=0),
                        VocabularyTerm(text="your", strength=6)])
    assert model.uppercase
    assert model.hotwords(vocab).splitlines() == ["ASK NOT :3", "YOUR :1.5"]
    pieces = [t for t in TOKENS]
    assert _spellable("DOING", pieces) and not _spellable("ZEBRA", pieces)


def test_hotwords_bias_the_search(model: ZipformerModel, jfk_pcm: bytes) -> None:
    plain = session(model, jfk_pcm)[-1].text.lower().split()
    boosted = session(model, jfk_pcm, [VocabularyTerm(text="ask not", strength=12)])[-1]
    assert boosted.text.lower().split().count("ask") > plain.count("ask")


def test_capacity_and_bad_audio(model: ZipformerModel) -> None:
    async def go() -> None:
        engine = ZipformerRealtimeEngine(model, ZipformerOptions(max_sessions=1))
        engine.open("a")
        with pytest.raises(StreamError) as full:
            engine.open("b")
        assert full.value.code.value == "a5sv2_unavailable"
        with pytest.raises(StreamError) as odd:
            await engine.accept("a", b"\x00" * 3)
        assert odd.value.code.value == "invalid_audio_frame"
        silent = await engine.finish("a")
        assert silent[-1].is_final and silent[-1].text == ""
        await engine.aclose()
    asyncio.run(go())


def test_casing_restored_for_uppercase_models(model_dir: Path, tmp_path: Path) -> None:
    cased = ZipformerModel(model_dir, tmp_path, ZipformerOptions(truecase=True))
    vocab = Vocabulary([VocabularyTerm(text="NASA", strength=0)])
    text = cased.format("I WENT TO NEW YORK WITH JOHN AND NASA".split(), vocab, sentence=True)
    assert text == "I went to New York with John and NASA."
    assert cased.format(["SO"], Vocabulary(), sentence=False) == "So"


def test_bpe_vocab_written_once_from_tokens(model: ZipformerModel, tmp_path: Path,
                                            model_dir: Path) -> None:
    ZipformerModel(model_dir, tmp_path, ZipformerOptions(truecase=False))
    written = list(tmp_path.glob("bpe-*.vocab"))
    assert len(written) == 1
    lines = written[0].read_text(encoding="utf-8").splitlines()
    assert lines[3] == f"{TOKENS[3]}\t-3" and len(lines) == len(TOKENS)
    assert np.all(np.diff([int(x.split("\t")[1]) for x in lines]) < 0)


def test_concurrent_sessions_decode_together_with_the_same_words(model: ZipformerModel,
                                                                 jfk_pcm: bytes) -> None:
    alone = session(model, jfk_pcm)[-1].text

    async def go():
        engine = ZipformerRealtimeEngine(model, ZipformerOptions(max_sessions=3))
        for sid in "abc":
            engine.open(sid)

        async def feed(sid: str, offset: int):
            pcm = jfk_pcm[offset:] + jfk_pcm[:offset] if offset else jfk_pcm
            for i in range(0, len(pcm), 3200):
                await engine.accept(sid, pcm[i:i + 3200])
            return (await engine.finish(sid))[-1].text

        texts = await asyncio.gather(feed("a", 0), feed("b", 0), feed("c", 64000))
        rounds = engine.rounds
        await engine.aclose()
        return texts, rounds

    texts, rounds = asyncio.run(go())
    assert texts[0] == texts[1] == alone and texts[2] != alone
    assert max(rounds) == 3, "the three sessions' chunks went through one decode_streams call"
