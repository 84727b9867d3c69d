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

__all__ = ["build_tiny_transducer", "build_tiny_streaming_transducer",
           "build_tiny_torchscript", "TOKENS"]

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
        self.subsampling = SUBSAMPLING

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, t, f = x.shape
        frames = t // self.subsampling
        x = x[:, : frames * self.subsampling].reshape(n, frames, f * self.subsampling)
        return torch.tanh(self.proj(x)), x_lens // self.subsampling


class _Decoder(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, HIDDEN)
        self.proj = nn.Linear(HIDDEN * CONTEXT_SIZE, HIDDEN)
        self.width = HIDDEN * CONTEXT_SIZE

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        e = self.embedding(y).reshape(y.shape[0], self.width)
        return torch.relu(self.proj(e))


class _Joiner(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.out = nn.Linear(HIDDEN, vocab)

    def forward(self, encoder_out: torch.Tensor, decoder_out: torch.Tensor) -> torch.Tensor:
        logits = self.out(torch.tanh(encoder_out + decoder_out))
        # Channel 0 above 1 (only the streaming encoder's silence signal) means blank.
        silence = torch.relu(encoder_out[:, :1] - 1.0) * 20.0
        blank = torch.arange(logits.shape[1], device=logits.device) == 0
        return logits + silence * blank.to(logits.dtype)


def _add_metadata(path: Path, meta: dict[str, str]) -> None:
    model = onnx.load(str(path))
    for key, value in meta.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))


def _modules(seed: int) -> tuple[_Encoder, _Decoder, _Joiner]:
    torch.manual_seed(seed)
    vocab = len(TOKENS)
    encoder, decoder, joiner = _Encoder().eval(), _Decoder(vocab).eval(), _Joiner(vocab).eval()
    with torch.no_grad():
        joiner.out.bias[0] += 1.0  # favour blank a little, so not every frame emits a token
    return encoder, decoder, joiner


class _JitEncoder(nn.Module):
    def __init__(self, encoder: _Encoder) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, features: torch.Tensor,
                feature_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encoder(features, feature_lengths)


class _JitDecoder(nn.Module):
    def __init__(self, decoder: _Decoder) -> None:
        super().__init__()
        self.decoder = decoder
        self.blank_id = 0
        self.context_size = CONTEXT_SIZE
        self.vocab_size = len(TOKENS)

    def forward(self, y: torch.Tensor, need_pad: torch.Tensor) -> torch.Tensor:
        return self.decoder(y).unsqueeze(1)


class _JitModel(nn.Module):
    """The three scripted modules of icefall's ``export.py --jit 1``, with its interface."""

    def __init__(self, encoder: _Encoder, decoder: _Decoder, joiner: _Joiner) -> None:
        super().__init__()
        self.encoder = _JitEncoder(encoder)
        self.decoder = _JitDecoder(decoder)
        self.joiner = joiner

    def forward(self, features: torch.Tensor, feature_lengths: torch.Tensor):
        return self.encoder(features, feature_lengths)


def build_tiny_torchscript(out_dir: Path, seed: int = 0, name: str = "jit_script.pt") -> Path:
    """Write the ONNX model's weights (same ``seed``) as ``jit_script.pt`` and ``tokens.txt``.

    Returns:
        ``out_dir``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    model = torch.jit.script(_JitModel(*_modules(seed)))
    model.save(str(out_dir / name))
    (out_dir / "tokens.txt").write_text(
        "".join(f"{tok} {i}\n" for i, tok in enumerate(TOKENS)), encoding="utf-8")
    return out_dir


def build_tiny_transducer(out_dir: Path, seed: int = 0) -> Path:
    """Write ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx`` and ``tokens.txt`` to ``out_dir``.

    Returns:
        ``out_dir``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = len(TOKENS)
    encoder, decoder, joiner = _modules(seed)
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


# --- streaming: the icefall ``export-onnx-streaming.py`` layout of a causal Zipformer2 -------

STREAM_CHUNK = 16
"""Feature frames the encoder advances per call (``decode_chunk_len``)."""
STREAM_PAD = 7
"""Extra look-ahead frames per call: ``T = decode_chunk_len + 7``, as icefall's export."""
_S_DIM, _S_KEY, _S_VALUE, _S_LEFT, _S_KERNEL = 16, 4, 4, 8, 3
_EMBED_DIM = ((FEATURE_DIM - 1) // 2 - 1) // 2


class _StreamingEncoder(nn.Module):
    """One chunk in, ``STREAM_CHUNK / 4`` frames out, and every Zipformer2 state carried.

    The states have the shapes sherpa-onnx builds for a one-stack, one-layer Zipformer2;
    the cached key keeps a running summary of past chunks, so the output depends on them.
    """

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(FEATURE_DIM * SUBSAMPLING, HIDDEN)
        self.memory = nn.Linear(_S_KEY, HIDDEN)
        self.summary = nn.Linear(HIDDEN, _S_KEY)

    def forward(self, x: torch.Tensor, key: torch.Tensor, nonlin: torch.Tensor,
                val1: torch.Tensor, val2: torch.Tensor, conv1: torch.Tensor,
                conv2: torch.Tensor, embed: torch.Tensor, processed: torch.Tensor):
        n = x.shape[0]
        frames = STREAM_CHUNK // SUBSAMPLING
        chunk = x[:, :STREAM_CHUNK].reshape(n, frames, FEATURE_DIM * SUBSAMPLING)
        context = self.memory(key[-1]).unsqueeze(1)                       # (N, 1, HIDDEN)
        out = torch.tanh(self.proj(chunk) + 0.1 * context)
        # Quiet frames (log-mel mean far below speech) set the joiner's blank channel.
        quiet = torch.sigmoid(-2.0 * (chunk.mean(-1, keepdim=True) + 9.0))
        out = torch.cat([out[..., :1] * (1 - quiet) + 2.0 * quiet, out[..., 1:]], -1)
        new_key = torch.cat([key[1:], torch.tanh(self.summary(out.mean(1))).unsqueeze(0)], 0)
        return (out, new_key, nonlin * 1.0, val1 * 1.0, val2 * 1.0, conv1 * 1.0, conv2 * 1.0,
                embed * 1.0, processed + STREAM_CHUNK)


def build_tiny_streaming_transducer(out_dir: Path, seed: int = 0) -> Path:
    """Write a streaming ``encoder.onnx`` (with its states), ``decoder.onnx``, ``joiner.onnx``
    and ``tokens.txt`` that sherpa-onnx's online recognizer loads as a Zipformer2.

    Returns:
        ``out_dir``.
    """
    out_dir = build_tiny_transducer(out_dir, seed)  # decoder, joiner and tokens are shared
    torch.manual_seed(seed + 1)
    encoder = _StreamingEncoder().eval()
    n = 1
    states = (torch.zeros(_S_LEFT, n, _S_KEY), torch.zeros(1, n, _S_LEFT, 3 * _S_DIM // 4),
              torch.zeros(_S_LEFT, n, _S_VALUE), torch.zeros(_S_LEFT, n, _S_VALUE),
              torch.zeros(n, _S_DIM, _S_KERNEL // 2), torch.zeros(n, _S_DIM, _S_KERNEL // 2),
              torch.zeros(n, 128, 3, _EMBED_DIM), torch.zeros(n, dtype=torch.int64))
    names = ["cached_key_0", "cached_nonlin_attn_0", "cached_val1_0", "cached_val2_0",
             "cached_conv1_0", "cached_conv2_0", "embed_states", "processed_lens"]
    batch_axis = {"cached_key_0": 1, "cached_nonlin_attn_0": 1, "cached_val1_0": 1,
                  "cached_val2_0": 1}
    axes = {"x": {0: "N"}, "encoder_out": {0: "N"}}
    for name in names:
        axes[name] = axes[f"new_{name}"] = {batch_axis.get(name, 0): "N"}
    with torch.no_grad():
        torch.onnx.export(encoder, (torch.randn(n, STREAM_CHUNK + STREAM_PAD, FEATURE_DIM),
                                    *states),
                          str(out_dir / "encoder.onnx"), input_names=["x", *names],
                          output_names=["encoder_out", *(f"new_{k}" for k in names)],
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    _add_metadata(out_dir / "encoder.onnx", {
        "model_type": "zipformer2", "version": "1", "model_author": "a5s tests",
        "comment": "tiny random-weight streaming test model",
        "encoder_dims": str(_S_DIM), "query_head_dims": str(_S_KEY),
        "value_head_dims": str(_S_VALUE), "num_heads": "1", "num_encoder_layers": "1",
        "cnn_module_kernels": str(_S_KERNEL), "left_context_len": str(_S_LEFT),
        "T": str(STREAM_CHUNK + STREAM_PAD), "decode_chunk_len": str(STREAM_CHUNK)})
    return out_dir
