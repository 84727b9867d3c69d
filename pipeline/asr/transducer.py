"""k2/icefall transducers (e.g. Zipformer) exported to ONNX, run with sherpa-onnx.

For operators who bring their own weights: the usual icefall export is an
encoder, a decoder and a joiner ``.onnx`` plus ``tokens.txt``. sherpa-onnx
(k2-fsa's runtime) computes the fbank features and runs the search on ONNX
Runtime, so neither k2 nor icefall (nor torch) is needed at run time.

Words are rebuilt from the BPE pieces: a piece that starts with a space
(sherpa-onnx's rendering of SentencePiece's "\u2581") starts a word. A word
starts at its first piece's timestamp and ends where the next word starts, but
no later than one encoder frame after its last piece.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..models import TransducerFiles, resolve_transducer
from ..text import collapse_repeats, normalise_words
from ..types import SAMPLE_RATE, TimedWord
from .base import map_engine_errors, resolve_device

__all__ = ["TransducerOptions", "TransducerEngine"]

_SPECIAL = frozenset({"<blk>", "<blank>", "<sos/eos>", "<unk>", "<s>", "</s>"})


class TransducerOptions(BaseModel):
    """How the transducer is loaded and searched."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_threads: int = Field(2, ge=1)
    """ONNX Runtime threads per decode."""
    provider: Literal["auto", "cpu", "cuda"] = "cpu"
    """ONNX Runtime execution provider; ``auto``: ``cuda`` where a CUDA device is present.
    CUDA needs a GPU build of sherpa-onnx (the PyPI wheel runs on CPU and falls back to
    it, with a warning, when asked for ``cuda``)."""
    prefer_int8: bool = False
    """Load ``*.int8.onnx`` files where a model directory has both."""
    decoding_method: Literal["greedy_search", "modified_beam_search"] = "greedy_search"
    """Search; beam search is slower and usually a little more accurate."""
    max_active_paths: int = Field(4, ge=1)
    """Beam width for ``modified_beam_search``."""
    feature_dim: int = Field(80, ge=1)
    """Mel bins the model was trained on (icefall: 80)."""
    blank_penalty: float = 0.0
    """Subtracted from the blank logit; raise it if the model drops words."""
    frame_s: float = Field(0.04, gt=0)
    """Encoder frame length (seconds): 10 ms features subsampled 4x in icefall models."""
    max_repeats: int = Field(4, ge=1)
    """A word or phrase repeated more often than this in a row is kept once."""


class TransducerEngine:
    """A transducer loaded once; :meth:`transcribe` is called from one worker thread."""

    def __init__(self, model: TransducerFiles | str | Path,
                 opts: TransducerOptions | None = None) -> None:
        """Load a model from its files, or from a directory holding them."""
        import sherpa_onnx  # only workers configured for a transducer need it

        self.opts = opts = opts or TransducerOptions()
        files = model if isinstance(model, TransducerFiles) else resolve_transducer(
            model, prefer_int8=opts.prefer_int8)
        self.name = f"transducer:{files.encoder.parent.name}"
        self.provider = resolve_device(opts.provider)
        with map_engine_errors("sherpa-onnx"):
            self._recognizer = sherpa_onnx.OfflineRecognizer.from_transducer(
                encoder=str(files.encoder), decoder=str(files.decoder), joiner=str(files.joiner),
                tokens=str(files.tokens), num_threads=opts.num_threads, sample_rate=SAMPLE_RATE,
                feature_dim=opts.feature_dim, decoding_method=opts.decoding_method,
                max_active_paths=opts.max_active_paths, blank_penalty=opts.blank_penalty,
                provider=self.provider)

    def transcribe(self, audio: np.ndarray, offset: float) -> list[TimedWord]:
        """Recognise one chunk; see :class:`~pipeline.asr.base.AsrEngine`."""
        return self.transcribe_batch([(audio, offset)])[0]

    def transcribe_batch(self, items: Sequence[tuple[np.ndarray, float]]) -> list[list[TimedWord]]:
        """Recognise several chunks in one ``decode_streams`` call (batched on the device)."""
        out: list[list[TimedWord]] = [[] for _ in items]
        live = [(i, np.ascontiguousarray(audio, dtype=np.float32), offset)
                for i, (audio, offset) in enumerate(items) if np.size(audio)]
        if not live:
            return out
        with map_engine_errors("sherpa-onnx"):
            streams = []
            for _, audio, _ in live:
                stream = self._recognizer.create_stream()
                stream.accept_waveform(SAMPLE_RATE, audio)
                streams.append(stream)
            self._recognizer.decode_streams(streams)
            results = [(list(s.result.tokens), list(s.result.timestamps),
                        list(s.result.ys_log_probs)) for s in streams]
        for (i, audio, offset), (tokens, times, log_probs) in zip(live, results, strict=True):
            out[i] = self._finish(tokens, times, log_probs, audio.size / SAMPLE_RATE, offset)
        return out

    def _finish(self, tokens: list[str], times: list[float], log_probs: list[float],
                length: float, offset: float) -> list[TimedWord]:
        words = _words(tokens, times, log_probs, length, self.opts.frame_s)
        shifted = [TimedWord(w.text, round(offset + w.start, 3), round(offset + w.end, 3),
                             w.probability) for w in words]
        return collapse_repeats(normalise_words(shifted), self.opts.max_repeats)


def _words(tokens: list[str], times: list[float], log_probs: list[float], length: float,
           frame_s: float) -> list[TimedWord]:
    """Group BPE pieces into words with times (seconds within the chunk) and probabilities."""
    if len(log_probs) != len(tokens):
        log_probs = [0.0] * len(tokens)
    groups: list[tuple[str, float, float, list[float]]] = []  # text, first, last, log-probs
    for token, time, log_prob in zip(tokens, times, log_probs, strict=False):
        if token.strip() in _SPECIAL:
            continue
        time = min(max(float(time), 0.0), length)
        if token[:1].isspace() or token.startswith("\u2581") or not groups:
            groups.append((token.lstrip().lstrip("\u2581"), time, time, [log_prob]))
        else:
            text, first, _, lps = groups[-1]
            groups[-1] = (text + token, first, time, [*lps, log_prob])
    words = []
    for k, (text, first, last, lps) in enumerate(groups):
        following = groups[k + 1][1] if k + 1 < len(groups) else length
        end = min(max(following, first), last + frame_s, length)
        probability = math.exp(sum(lps) / len(lps))
        words.append(TimedWord(text, first, max(end, first), round(probability, 4)))
    return words
