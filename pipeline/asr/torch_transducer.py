"""A k2/icefall transducer exported to TorchScript (``export.py --jit 1``), run with torch.

icefall's export holds three scripted modules with a fixed interface, which is all
this engine relies on (no k2, no icefall):

* ``encoder(features, feature_lengths) -> (encoder_out, encoder_out_lens)`` on 80-bin
  kaldi fbank, 10 ms frames, padded with ``log(1e-10)``;
* ``decoder(y, need_pad) -> (N, 1, D)`` over the last ``decoder.context_size`` tokens,
  with ``decoder.blank_id``;
* ``joiner(encoder_frame, decoder_out) -> logits`` (it projects both inputs itself).

A batch of chunks shares one encoder pass and one search: greedy search over the
packed encoder output (the frame loop runs once for all chunks), or modified beam
search with every chunk's hypotheses in one decoder and one joiner call per frame.
Features are icefall's training fbank (80 bins, 25/10 ms povey windows, no dither,
``snip_edges=False``, ``high_freq=-400``) from one of two extractors that agree within
0.003 (log-mel units) on the eval clips: kaldi-native-fbank on the CPU (4.7x faster than
lhotse's there: 0.04 s vs 0.19 s for 11 s of audio), or lhotse's torch ``Wav2LogFilterBank``,
which runs batched on the model's device, so on a GPU the waveforms go up and features
never come back to the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..models import resolve_torchscript
from ..text import collapse_repeats, normalise_words
from ..types import SAMPLE_RATE, TimedWord
from .base import map_engine_errors
from .transducer import _words

__all__ = ["TorchTransducerOptions", "TorchTransducerEngine", "fbank"]

_LOG_EPS = math.log(1e-10)


class TorchTransducerOptions(BaseModel):
    """How the TorchScript transducer is loaded and searched."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    device: Literal["auto", "cpu", "cuda"] = "auto"
    """``auto``: CUDA where torch sees a GPU."""
    num_threads: int = Field(1, ge=1)
    """torch intra-op threads on CPU."""
    decoding_method: Literal["greedy_search", "modified_beam_search"] = "greedy_search"
    beam: int = Field(4, ge=1)
    """Hypotheses kept per chunk by ``modified_beam_search``."""
    feature_dim: int = Field(80, ge=1)
    features: Literal["auto", "kaldi-native-fbank", "lhotse"] = "auto"
    """Fbank extractor; ``auto``: lhotse on CUDA (on the GPU), kaldi-native-fbank on CPU."""
    frame_s: float = Field(0.04, gt=0)
    """Encoder frame length, s (10 ms features subsampled 4x)."""
    max_repeats: int = Field(4, ge=1)


def fbank(audio: np.ndarray, dim: int = 80) -> np.ndarray:
    """Kaldi-compatible log-mel fbank as icefall trains on it: (frames, ``dim``) float32."""
    import kaldi_native_fbank as knf
    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0.0
    opts.frame_opts.snip_edges = False
    opts.frame_opts.samp_freq = SAMPLE_RATE
    opts.mel_opts.num_bins = dim
    opts.mel_opts.high_freq = -400
    computer = knf.OnlineFbank(opts)
    computer.accept_waveform(SAMPLE_RATE, np.ascontiguousarray(audio, dtype=np.float32).tolist())
    computer.input_finished()
    n = computer.num_frames_ready
    if not n:
        return np.zeros((0, dim), dtype=np.float32)
    return np.stack([computer.get_frame(i) for i in range(n)]).astype(np.float32)


class TorchTransducerEngine:
    """A TorchScript transducer loaded once; the ASR threads may call it at once (inference
    holds no state between calls). ``num_threads`` sets torch's process-wide thread count."""

    def __init__(self, model_dir: str | Path, opts: TorchTransducerOptions | None = None) -> None:
        import torch
        self.opts = opts = opts or TorchTransducerOptions()
        path, tokens = resolve_torchscript(model_dir)
        want = opts.device
        self.device = "cuda" if want in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
        if self.device == "cpu":
            torch.set_num_threads(opts.num_threads)
        self.name = f"zipformer-torchscript:{Path(model_dir).name}"
        with map_engine_errors("torch"):
            self._model = torch.jit.load(str(path), map_location=self.device).eval()
        self._symbols = _read_tokens(tokens)
        use_lhotse = opts.features == "lhotse" or (opts.features == "auto" and
                                                   self.device == "cuda")
        self._lhotse = _lhotse_fbank(opts.feature_dim, self.device) if use_lhotse else None
        self._blank = int(self._model.decoder.blank_id)
        self._context = int(self._model.decoder.context_size)

    def transcribe(self, audio: np.ndarray, offset: float) -> list[TimedWord]:
        """Recognise one chunk; see :class:`~pipeline.asr.base.AsrEngine`."""
        return self.transcribe_batch([(audio, offset)])[0]

    def transcribe_batch(self, items: Sequence[tuple[np.ndarray, float]]) -> list[list[TimedWord]]:
        """Recognise several chunks with one encoder pass and one search."""
        import torch
        out: list[list[TimedWord]] = [[] for _ in items]
        live = [(i, a, off) for i, (a, off) in enumerate(items) if np.size(a) >= 1600]
        if not live:  # under 0.1 s: shorter than the encoder's receptive field
            return out
        with map_engine_errors("torch"), torch.inference_mode():
            x, lens = self._features([a for _, a, _ in live])
            enc, enc_lens = self._model.encoder(x, lens)
            if self.opts.decoding_method == "greedy_search":
                hyps = self._greedy(enc, enc_lens)
            else:
                hyps = self._beam(enc, enc_lens)
        for (i, audio, offset), (ids, frames, lps) in zip(live, hyps, strict=True):
            length = audio.size / SAMPLE_RATE
            tokens = [self._symbols.get(t, "") for t in ids]
            times = [f * self.opts.frame_s for f in frames]
            words = _words(tokens, times, lps, length, self.opts.frame_s)
            shifted = [TimedWord(w.text, round(offset + w.start, 3), round(offset + w.end, 3),
                                 w.probability) for w in words]
            out[i] = collapse_repeats(normalise_words(shifted), self.opts.max_repeats)
        return out

    def _features(self, audios: list[np.ndarray]):
        """Padded fbank of a batch on the model's device, and its frame counts."""
        import torch
        lens = torch.tensor([(a.size + 80) // 160 for a in audios], dtype=torch.int64)
        if self._lhotse is not None:
            waves = torch.nn.utils.rnn.pad_sequence(
                [torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)) for a in audios],
                batch_first=True).to(self.device)
            x = self._lhotse(waves)[:, : int(lens.max())]
            frame = torch.arange(x.size(1), device=self.device)
            x = x.masked_fill((frame[None, :] >= lens.to(self.device)[:, None])[..., None],
                              _LOG_EPS)
        else:
            feats = [torch.from_numpy(fbank(a, self.opts.feature_dim)) for a in audios]
            lens = torch.tensor([f.shape[0] for f in feats], dtype=torch.int64)
            x = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True,
                                                padding_value=_LOG_EPS).to(self.device)
        return x, lens.to(self.device)

    # --- search -------------------------------------------------------------------------------

    def _decoder(self, contexts: list[list[int]]):
        import torch
        y = torch.tensor(contexts, dtype=torch.int64, device=self.device)
        return self._model.decoder(y, need_pad=torch.tensor([False])).squeeze(1)

    def _greedy(self, enc, enc_lens) -> list[tuple[list[int], list[int], list[float]]]:
        """Batched greedy search, one symbol per frame (as icefall's ``jit_pretrained.py``)."""
        import torch
        packed = torch.nn.utils.rnn.pack_padded_sequence(enc, enc_lens.cpu(), batch_first=True,
                                                         enforce_sorted=False)
        n = enc.size(0)
        ctx = self._context
        hyps = [[self._blank] * ctx for _ in range(n)]
        frames: list[list[int]] = [[] for _ in range(n)]
        lps: list[list[float]] = [[] for _ in range(n)]
        dec = self._decoder(hyps)
        offset = 0
        for t, size in enumerate(packed.batch_sizes.tolist()):
            cur = packed.data[offset:offset + size]
            offset += size
            dec = dec[:size]
            logp = self._model.joiner(cur, dec).log_softmax(dim=-1)
            best, ids = logp.max(dim=-1)
            emitted = False
            for k, (v, lp) in enumerate(zip(ids.tolist(), best.tolist())):
                if v != self._blank:
                    hyps[k].append(v)
                    frames[k].append(t)
                    lps[k].append(lp)
                    emitted = True
            if emitted:
                dec = self._decoder([h[-ctx:] for h in hyps[:size]])
        order = packed.unsorted_indices.tolist()
        return [(hyps[k][ctx:], frames[k], lps[k]) for k in order]

    def _beam(self, enc, enc_lens) -> list[tuple[list[int], list[int], list[float]]]:
        """Modified beam search (at most one symbol per frame), every chunk's hypotheses in
        one decoder and one joiner call per frame; equal token sequences are merged."""
        import torch
        n, ctx, beam, blank = enc.size(0), self._context, self.opts.beam, self._blank
        lens = enc_lens.tolist()
        # a hypothesis: (tokens, frames, token log-probs, total log-prob)
        beams = [[((blank,) * ctx, (), (), 0.0)] for _ in range(n)]
        for t in range(max(lens)):
            active = [k for k in range(n) if lens[k] > t]
            flat = [(k, h) for k in active for h in beams[k]]
            dec = self._decoder([list(h[0][-ctx:]) for _, h in flat])
            frame = enc[[k for k, _ in flat], t]
            logp = self._model.joiner(frame, dec).log_softmax(dim=-1)
            row = 0
            for k in active:
                hs = beams[k]
                block = logp[row:row + len(hs)]
                row += len(hs)
                base = torch.tensor([h[3] for h in hs], device=block.device).unsqueeze(1)
                scores, idx = (block + base).reshape(-1).topk(min(beam, block.numel()))
                merged: dict[tuple[int, ...], tuple] = {}
                vocab = block.size(1)
                for score, flat_i in zip(scores.tolist(), idx.tolist()):
                    h = hs[flat_i // vocab]
                    v = flat_i % vocab
                    if v == blank:
                        new = (h[0], h[1], h[2], score)
                    else:
                        lp = float(block[flat_i // vocab, v])
                        new = (h[0] + (v,), h[1] + (t,), h[2] + (lp,), score)
                    old = merged.get(new[0])
                    if old is None:
                        merged[new[0]] = new
                    else:
                        keep = old if old[3] >= new[3] else new
                        merged[new[0]] = (*keep[:3], float(np.logaddexp(old[3], new[3])))
                beams[k] = list(merged.values())
        out = []
        for hs in beams:
            best = max(hs, key=lambda h: h[3] / max(1, len(h[0]) - ctx))
            out.append((list(best[0][ctx:]), list(best[1]), list(best[2])))
        return out


def _lhotse_fbank(dim: int, device: str):
    """lhotse's torch fbank with icefall's options, on ``device``."""
    from lhotse.features.kaldi.layers import Wav2LogFilterBank
    return Wav2LogFilterBank(sampling_rate=SAMPLE_RATE, num_filters=dim, dither=0.0,
                             snip_edges=False, high_freq=-400.0).to(device).eval()


def _read_tokens(path: Path) -> dict[int, str]:
    """``tokens.txt`` (``symbol id`` per line) as id -> symbol, with ``\u2581`` kept."""
    out: dict[int, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.rsplit(maxsplit=1)
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[int(parts[1])] = parts[0]
    return out
