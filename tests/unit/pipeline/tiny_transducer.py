"""Build a tiny random-weight transducer in the k2/icefall ONNX layout, for tests.

No transducer weights ship in any package, so the tests make their own: an
encoder (80-bin fbank in, 4x subsampled frames out), a stateless decoder over
the last ``context_size`` tokens and a joiner, exported with the names and
metadata sherpa-onnx reads from an icefall export. Its output is gibberish; it
exercises loading, feature extraction, search and timestamps.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import torch
from torch import nn

__all__ = ["build_tiny_transducer", "TOKENS"]

FEATURE_DIM = 80
HIDDEN = 32
CONTEXT_SIZE = 2
SUBSAMPLING = 4

TOKENS = ["<blk>", "<sos/eos>", "<unk>",
          *[f"\u2581{w}" for w in ("THE", "AND", "SO", "MY", "ASK", "NOT", "WHAT", "YOUR", "CAN",
                                    "DO")],
          "S", "ING", "ED", "\u2581A", "\u2581I", "'", "T", "ER", "LY"]
"""Icefall-style BPE pieces: "\u2581" starts a word, upper case as icefall's LibriSpeech models."""


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(FEATURE_DIM * SUBSAMPLING, HIDDEN)

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, t, f = x.shape
        frames = t // SUBSAMPLING
        x = x[:, : frames * SUBSAMPLING].reshape(n, frames, f * SUBSAMPLING)
        return torch.tanh(self.proj(x)), x_lens // SUBSAMPLING


class _Decoder(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, HIDDEN)
        self.proj = nn.Linear(HIDDEN * CONTEXT_SIZE, HIDDEN)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        e = self.embedding(y).reshape(y.shape[0], HIDDEN * CONTEXT_SIZE)
        return torch.relu(self.proj(e))


class _Joiner(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.out = nn.Linear(HIDDEN, vocab)

    def forward(self, encoder_out: torch.Tensor, decoder_out: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(encoder_out + decoder_out))


def _add_metadata(path: Path, meta: dict[str, str]) -> None:
    model = onnx.load(str(path))
    for key, value in meta.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))


def build_tiny_transducer(out_dir: Path, seed: int = 0) -> Path:
    """Write ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx`` and ``tokens.txt`` to ``out_dir``.

    Returns:
        ``out_dir``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    vocab = len(TOKENS)
    encoder, decoder, joiner = _Encoder().eval(), _Decoder(vocab).eval(), _Joiner(vocab).eval()
    with torch.no_grad():
        joiner.out.bias[0] += 1.0  # favour blank a little, so not every frame emits a token
    common = {"opset_version": 17, "dynamo": False}
    with torch.no_grad():
        torch.onnx.export(encoder, (torch.randn(1, 100, FEATURE_DIM), torch.tensor([100])),
                          str(out_dir / "encoder.onnx"), input_names=["x", "x_lens"],
                          output_names=["encoder_out", "encoder_out_lens"],
                          dynamic_axes={"x": {0: "N", 1: "T"}, "x_lens": {0: "N"},
                                        "encoder_out": {0: "N", 1: "T"},
                                        "encoder_out_lens": {0: "N"}}, **common)
        torch.onnx.export(decoder, (torch.zeros(1, CONTEXT_SIZE, dtype=torch.int64),),
                          str(out_dir / "decoder.onnx"), input_names=["y"],
                          output_names=["decoder_out"],
                          dynamic_axes={"y": {0: "N"}, "decoder_out": {0: "N"}}, **common)
        torch.onnx.export(joiner, (torch.randn(1, HIDDEN), torch.randn(1, HIDDEN)),
                          str(out_dir / "joiner.onnx"),
                          input_names=["encoder_out", "decoder_out"], output_names=["logit"],
                          dynamic_axes={"encoder_out": {0: "N"}, "decoder_out": {0: "N"},
                                        "logit": {0: "N"}}, **common)
    _add_metadata(out_dir / "encoder.onnx", {"model_type": "zipformer2", "version": "1",
                                             "model_author": "a5s tests",
                                             "comment": "tiny random-weight test model"})
    _add_metadata(out_dir / "decoder.onnx", {"vocab_size": str(vocab),
                                             "context_size": str(CONTEXT_SIZE)})
    _add_metadata(out_dir / "joiner.onnx", {"joiner_dim": str(HIDDEN)})
    (out_dir / "tokens.txt").write_text(
        "".join(f"{tok} {i}\n" for i, tok in enumerate(TOKENS)), encoding="utf-8")
    return out_dir
