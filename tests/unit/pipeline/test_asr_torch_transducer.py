"""The TorchScript transducer engine, on tiny random-weight models these tests script.

The TorchScript model holds the same weights as the ONNX one built with the same seed,
so the torch searches written here can be held against sherpa-onnx's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.asr import AsrEngine, BatchAsrEngine, TransducerEngine, TransducerOptions
from pipeline.asr.torch_transducer import TorchTransducerEngine, TorchTransducerOptions, fbank
from pipeline.audio import decode_to_pcm, read_pcm
from pipeline.engines import AsrLayout, load_zipformer
from pipeline.models import check_engines, zipformer_form
from pipeline.types import SAMPLE_RATE
from schemas.settings import ModelSettings

from asr_support import JFK
from tiny_transducer import (build_tiny_streaming_transducer, build_tiny_torchscript,
                             build_tiny_transducer)


@pytest.fixture(scope="module")
def jit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_torchscript(tmp_path_factory.mktemp("tiny-jit"))


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_transducer(tmp_path_factory.mktemp("tiny-onnx"))


@pytest.fixture(scope="module")
def engine(jit_dir: Path) -> TorchTransducerEngine:
    return TorchTransducerEngine(jit_dir, TorchTransducerOptions(device="cpu"))


@pytest.fixture(scope="module")
def jfk_audio(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    pcm = tmp_path_factory.mktemp("pcm") / "jfk.pcm"
    with pcm.open("wb") as out:
        decode_to_pcm(JFK, out)
    return read_pcm(pcm)


def test_greedy_words_agree_with_sherpa_onnx_on_the_same_weights(
        engine: TorchTransducerEngine, onnx_dir: Path, jfk_audio: np.ndarray) -> None:
    assert isinstance(engine, BatchAsrEngine) and isinstance(engine, AsrEngine)
    ours = engine.transcribe(jfk_audio, 3.0)
    theirs = TransducerEngine(onnx_dir, TransducerOptions(num_threads=1)).transcribe(jfk_audio, 3.0)
    assert len(ours) >= 10
    same = {(w.text, w.start) for w in ours} & {(w.text, w.start) for w in theirs}
    assert len(same) >= 0.8 * max(len(ours), len(theirs)), (ours[:5], theirs[:5])
    end = 3.0 + jfk_audio.size / SAMPLE_RATE
    assert all(3.0 <= w.start <= w.end <= end and 0 < w.probability <= 1 for w in ours)


def test_a_batch_decodes_as_each_chunk_alone(engine: TorchTransducerEngine,
                                             jfk_audio: np.ndarray) -> None:
    items = [(jfk_audio, 0.0), (jfk_audio[: 4 * SAMPLE_RATE], 20.0),
             (np.zeros(0, dtype=np.float32), 5.0), (jfk_audio[2 * SAMPLE_RATE:], 40.0)]
    batched = engine.transcribe_batch(items)
    assert batched[2] == []
    for (audio, offset), words in zip(items, batched):
        assert words == engine.transcribe(audio, offset)


def test_modified_beam_search_runs_batched(jit_dir: Path, jfk_audio: np.ndarray) -> None:
    beam = TorchTransducerEngine(jit_dir, TorchTransducerOptions(
        device="cpu", decoding_method="modified_beam_search", beam=4))
    items = [(jfk_audio[: 5 * SAMPLE_RATE], 0.0), (jfk_audio[5 * SAMPLE_RATE:], 5.0)]
    batched = beam.transcribe_batch(items)
    assert all(batched)
    assert batched == [beam.transcribe(a, o) for a, o in items]
    assert all(0.0 <= w.start <= w.end <= 5.0 for w in batched[0])


def test_fbank_is_kaldi_80_bins_at_100_frames_per_second(jfk_audio: np.ndarray) -> None:
    feats = fbank(jfk_audio[:SAMPLE_RATE])
    assert feats.shape == (100, 80) and feats.dtype == np.float32
    assert np.isfinite(feats).all()


def test_lhotse_features_on_the_device_decode_as_kaldi_native_fbank(
        jit_dir: Path, engine: TorchTransducerEngine, jfk_audio: np.ndarray) -> None:
    lhotse = TorchTransducerEngine(jit_dir, TorchTransducerOptions(device="cpu",
                                                                   features="lhotse"))
    items = [(jfk_audio, 0.0), (jfk_audio[: 3 * SAMPLE_RATE + 77], 1.0)]
    x_l, lens_l = lhotse._features([a for a, _ in items])
    x_k, lens_k = engine._features([a for a, _ in items])
    assert lens_l.tolist() == lens_k.tolist() and x_l.shape == x_k.shape
    gap = (x_l - x_k).abs().amax(-1)
    gap[1, int(lens_k[1]) - 1] = 0  # a batched row's last frame sees the padding, not its edge
    assert float(gap.max()) < 0.01
    ours, theirs = lhotse.transcribe_batch(items), engine.transcribe_batch(items)
    assert [w.text for w in ours[0]] == [w.text for w in theirs[0]]


def test_engine_selection_by_directory(jit_dir: Path, onnx_dir: Path, tmp_path: Path) -> None:
    assert zipformer_form(jit_dir) == "torchscript" and zipformer_form(onnx_dir) == "onnx"
    layout = AsrLayout("cpu", 1, 1, 4)
    for path, kind in ((jit_dir, TorchTransducerEngine), (onnx_dir, TransducerEngine)):
        m = ModelSettings(batch_engine="zipformer", batch_model_dir=str(path))
        assert isinstance(load_zipformer(m, layout), kind)
    (tmp_path / "cpu_jit.pt").write_bytes((jit_dir / "jit_script.pt").read_bytes())
    with pytest.raises(FileNotFoundError, match="tokens.txt"):
        zipformer_form(tmp_path)


def test_start_up_check_names_the_setting_and_the_missing_file(
        jit_dir: Path, onnx_dir: Path, tmp_path: Path) -> None:
    assert check_engines("whisper", "", "whisper", "") == {
        "a5s-async-v1": "whisper", "a5s-v2-streaming": "whisper"}
    (tmp_path / "encoder.onnx").write_bytes(b"")
    with pytest.raises(FileNotFoundError) as err:
        check_engines("zipformer", str(tmp_path), "whisper", "")
    message = str(err.value)
    assert "\n" not in message and "A5S_MODELS__BATCH_MODEL_DIR" in message
    assert "tokens.txt" in message
    with pytest.raises(FileNotFoundError, match="A5S_MODELS__STREAMING_MODEL_DIR.*not found"):
        check_engines("whisper", "", "zipformer", str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="A5S_MODELS__BATCH_MODEL_DIR.*is empty"):
        check_engines("zipformer", "", "whisper", "")
    with pytest.raises(FileNotFoundError, match="TorchScript"):
        check_engines("whisper", "", "zipformer", str(jit_dir))
    streaming = build_tiny_streaming_transducer(tmp_path / "streaming")
    with pytest.raises(FileNotFoundError, match="holds a streaming export.*export-onnx.py"):
        check_engines("zipformer", str(streaming), "whisper", "")
    with pytest.raises(FileNotFoundError, match="non-streaming export.*export-onnx-streaming"):
        check_engines("whisper", "", "zipformer", str(onnx_dir))
    found = check_engines("zipformer", str(jit_dir), "zipformer", str(streaming))
    assert found["a5s-async-v1"].startswith("zipformer (torchscript")
    assert found["a5s-v2-streaming"].startswith("zipformer (onnx")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-only: no CUDA device here")
def test_cuda_decodes_as_the_cpu(jit_dir: Path, engine: TorchTransducerEngine,
                                 jfk_audio: np.ndarray) -> None:
    gpu = TorchTransducerEngine(jit_dir, TorchTransducerOptions(device="cuda"))
    assert gpu.device == "cuda" and gpu._lhotse is not None  # features made on the GPU
    assert [w.text for w in gpu.transcribe(jfk_audio, 0.0)] == \
        [w.text for w in engine.transcribe(jfk_audio, 0.0)]
    items = [(jfk_audio, 0.0), (jfk_audio[: 4 * SAMPLE_RATE], 20.0),
             (np.zeros(0, dtype=np.float32), 5.0), (jfk_audio[2 * SAMPLE_RATE:], 40.0)]
    on_gpu, on_cpu = gpu.transcribe_batch(items), engine.transcribe_batch(items)
    assert [[w.text for w in ws] for ws in on_gpu] == [[w.text for w in ws] for ws in on_cpu]
    assert all(abs(g.start - c.start) <= 0.04 for gs, cs in zip(on_gpu, on_cpu)
               for g, c in zip(gs, cs))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-only: no CUDA device here")
def test_cuda_beam_search_decodes_as_the_cpu(jit_dir: Path, jfk_audio: np.ndarray) -> None:
    def beam(device: str) -> TorchTransducerEngine:
        return TorchTransducerEngine(jit_dir, TorchTransducerOptions(
            device=device, decoding_method="modified_beam_search", beam=4))
    items = [(jfk_audio[: 5 * SAMPLE_RATE], 0.0), (jfk_audio[5 * SAMPLE_RATE:], 5.0)]
    on_gpu, on_cpu = beam("cuda").transcribe_batch(items), beam("cpu").transcribe_batch(items)
    assert all(on_gpu)
    assert [[w.text for w in ws] for ws in on_gpu] == [[w.text for w in ws] for ws in on_cpu]


def test_two_asr_threads_share_one_engine(engine: TorchTransducerEngine,
                                          jfk_audio: np.ndarray) -> None:
    from concurrent.futures import ThreadPoolExecutor
    items = [(jfk_audio[k * SAMPLE_RATE:(k + 4) * SAMPLE_RATE], float(k)) for k in range(6)]
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda it: engine.transcribe(*it), items))
    assert together == [engine.transcribe(a, o) for a, o in items]
