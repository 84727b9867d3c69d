"""The sherpa-onnx transducer engine, on a tiny random-weight model these tests export."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline.asr import AsrEngine, TransducerEngine, TransducerOptions
from pipeline.asr.transducer import _words
from pipeline.audio import decode_to_pcm, read_pcm
from pipeline.models import resolve_transducer
from pipeline.types import SAMPLE_RATE

from asr_support import JFK
from tiny_transducer import build_tiny_transducer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_transducer(tmp_path_factory.mktemp("tiny-transducer"))


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> TransducerEngine:
    return TransducerEngine(model_dir, TransducerOptions(num_threads=1))


@pytest.fixture(scope="module")
def jfk_audio(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    pcm = tmp_path_factory.mktemp("pcm") / "jfk.pcm"
    with pcm.open("wb") as out:
        decode_to_pcm(JFK, out)
    return read_pcm(pcm)


def test_loads_and_decodes_real_audio(engine: TransducerEngine, jfk_audio: np.ndarray) -> None:
    assert isinstance(engine, AsrEngine)
    offset = 42.0
    words = engine.transcribe(jfk_audio, offset)
    assert words, "a random model still emits tokens"
    end = offset + jfk_audio.size / SAMPLE_RATE
    for w in words:
        assert w.text and w.text == w.text.lower() and "\u2581" not in w.text and " " not in w.text
        assert offset <= w.start <= w.end <= end
        assert 0.0 < w.probability <= 1.0
    assert [w.start for w in words] == sorted(w.start for w in words)


def test_empty_audio_gives_no_words(engine: TransducerEngine) -> None:
    assert engine.transcribe(np.zeros(0, dtype=np.float32), 0.0) == []


def test_beam_search_and_explicit_files(model_dir: Path, jfk_audio: np.ndarray) -> None:
    files = resolve_transducer(model_dir)
    beam = TransducerEngine(files, TransducerOptions(num_threads=1,
                                                     decoding_method="modified_beam_search"))
    words = beam.transcribe(jfk_audio[: 3 * SAMPLE_RATE], 0.0)
    assert all(0.0 <= w.start <= w.end <= 3.0 for w in words)


def test_resolve_transducer_prefers_int8_when_asked(model_dir: Path, tmp_path: Path) -> None:
    for name in ("encoder", "decoder", "joiner"):
        shutil.copy(model_dir / f"{name}.onnx", tmp_path / f"{name}-epoch-99-avg-1.onnx")
        shutil.copy(model_dir / f"{name}.onnx", tmp_path / f"{name}-epoch-99-avg-1.int8.onnx")
    with pytest.raises(FileNotFoundError, match="tokens.txt"):
        resolve_transducer(tmp_path)
    shutil.copy(model_dir / "tokens.txt", tmp_path / "tokens.txt")
    assert resolve_transducer(tmp_path).encoder.name == "encoder-epoch-99-avg-1.onnx"
    int8 = resolve_transducer(tmp_path, prefer_int8=True)
    assert int8.joiner.name == "joiner-epoch-99-avg-1.int8.onnx"
    with pytest.raises(FileNotFoundError):
        resolve_transducer(tmp_path / "missing")


def test_pieces_become_words_with_times() -> None:
    words = _words([" HE", "LLO", " WOR", "LD", "<unk>", " AGAIN"], [0.2, 0.3, 0.8, 0.9, 1.0, 2.0],
                   [-0.1] * 6, length=2.5, frame_s=0.04)
    assert [w.text for w in words] == ["HELLO", "WORLD", "AGAIN"]
    assert (words[0].start, words[0].end) == (0.2, pytest.approx(0.34))
    assert (words[1].start, words[1].end) == (0.8, pytest.approx(0.94))
    assert (words[2].start, words[2].end) == (2.0, pytest.approx(2.04))
    assert words[0].probability == pytest.approx(np.exp(-0.1), abs=1e-4)
