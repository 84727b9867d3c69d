"""The engines on CUDA: Whisper (CTranslate2, float16) and the transducer (ONNX Runtime CUDA).

These run wherever a CUDA device is present and are skipped only where there is
none. They check that the GPU path loads, decodes real speech as well as the
CPU path, batches (one batched call beats the same chunks one at a time), and
that ``device = "auto"`` picks the GPU.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.asr import TransducerEngine, TransducerOptions, WhisperEngine, WhisperOptions
from pipeline.asr.base import cuda_device_count, resolve_device
from pipeline.audio import decode_to_pcm, read_pcm
from pipeline.engines import CUDA_BATCH, Engines
from pipeline.models import resolve_whisper
from pipeline.types import SAMPLE_RATE
from schemas.settings import ModelSettings, Settings

from asr_support import EVAL, JFK, wer
from test_batching import CLIPS, speech_chunks
from tiny_transducer import build_tiny_transducer

pytestmark = pytest.mark.skipif(cuda_device_count() == 0, reason="no CUDA device")


@pytest.fixture(scope="module")
def whisper_cuda(tmp_path_factory: pytest.TempPathFactory) -> WhisperEngine:
    path = resolve_whisper("base", tmp_path_factory.mktemp("models"))
    return WhisperEngine(path, WhisperOptions(device="cuda"), name="whisper:base")


@pytest.fixture(scope="module")
def jfk(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    pcm = tmp_path_factory.mktemp("pcm") / "jfk.pcm"
    with pcm.open("wb") as out:
        decode_to_pcm(JFK, out)
    return read_pcm(pcm)


def test_auto_device_is_cuda() -> None:
    assert resolve_device("auto") == "cuda"


def test_whisper_float16_on_cuda(whisper_cuda: WhisperEngine, jfk: np.ndarray,
                                 manifest: dict[str, dict]) -> None:
    assert whisper_cuda.device == "cuda"
    assert whisper_cuda._model.model.device == "cuda"
    assert whisper_cuda._model.model.compute_type == "float16"
    words = whisper_cuda.transcribe(jfk, 0.0)
    assert wer(manifest["real/whisper/jfk.flac"]["reference_text"], words) <= 0.10
    assert all(0.0 <= w.start <= w.end <= 11.1 for w in words)


def test_whisper_batched_on_cuda_matches_and_is_faster(whisper_cuda: WhisperEngine,
                                                       tmp_path: Path) -> None:
    items = speech_chunks(tmp_path, CLIPS) * 4  # 16+ chunks of real speech
    whisper_cuda.transcribe_batch(items[:2])  # CUDA kernels warmed
    started = time.perf_counter()
    single = [whisper_cuda.transcribe(a, o) for a, o in items]
    one_at_a_time = time.perf_counter() - started
    started = time.perf_counter()
    batched = whisper_cuda.transcribe_batch(items)
    together = time.perf_counter() - started
    same = sum([w.text for w in b] == [w.text for w in s] for b, s in zip(batched, single))
    assert same >= len(items) - 1  # float16 batched GEMMs may round one word differently
    assert together < one_at_a_time, (together, one_at_a_time)


def test_engines_auto_settings_load_whisper_on_cuda(tmp_path: Path) -> None:
    engines = Engines(Settings(data_dir=tmp_path,  # type: ignore[call-arg]
                               models=ModelSettings(device="auto")))
    try:
        assert engines.batch_size == CUDA_BATCH == 16  # the default batches on a GPU
        assert not engines.asr.opts.timestamp_tokens  # ... without timestamp tokens
        assert engines.asr.device == "cuda"
        assert engines.asr._model.model.compute_type == "float16"
    finally:
        engines.close()


def test_transducer_on_cuda_provider_matches_cpu(tmp_path: Path, jfk: np.ndarray) -> None:
    model = build_tiny_transducer(tmp_path / "model")
    cpu = TransducerEngine(model, TransducerOptions(num_threads=1, provider="cpu"))
    gpu = TransducerEngine(model, TransducerOptions(num_threads=1, provider="auto"))
    assert gpu.provider == "cuda"
    items = [(jfk[: 4 * SAMPLE_RATE], 0.0), (jfk[4 * SAMPLE_RATE:], 4.0)]
    expected = cpu.transcribe_batch(items)
    got = gpu.transcribe_batch(items)
    assert [[w.text for w in ws] for ws in got] == [[w.text for w in ws] for ws in expected]


def test_eval_set_is_present() -> None:
    assert (EVAL / "manifest.json").is_file()
