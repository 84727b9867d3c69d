"""Zipformer throughput: one chunk at a time vs batches across concurrent jobs.

``python -m bench.asr --engine zipformer (--model-dir DIR | --stand-in) [--batch-sizes 1,8,16]``

``--model-dir`` takes either export form (ONNX runs on sherpa-onnx, TorchScript on torch).

The eval items are decoded, VAD-split and chunk-planned once (as the batch pipeline
does); then all their chunks are recognised as if from concurrent jobs, through the
service's own :class:`~pipeline.asr.batching.BatchingTranscriber` with ``max_batch``
set to each batch size (1 = one at a time). Throughput is audio-hours recognised per
wall-clock hour of decoding. With ``--model-dir`` (an operator's icefall export) the
words are scored as ``bench.asr`` scores Whisper's.

No Zipformer weights ship, so ``--stand-in`` scripts a random-weight transducer of a
Zipformer-medium's order of compute (a 4x-subsampling conv front end, 12 transformer
layers of width 384, a stateless decoder and a joiner over 500 BPE pieces) in icefall's
TorchScript interface: its speed figures are representative, its words are not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pipeline.audio import decode_to_pcm, read_pcm
from pipeline.types import SAMPLE_RATE
from pipeline.vad import SileroVad, VadOptions, plan_chunks, speech_regions

__all__ = ["run", "build_stand_in"]


def build_stand_in(out_dir: Path, seed: int = 0) -> Path:
    """Script a random-weight transducer in icefall's ``export.py --jit 1`` interface."""
    import torch
    from torch import nn

    vocab, dim, joiner_dim, context = 500, 384, 512, 2

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Sequential(nn.Conv2d(1, 8, 3, stride=2), nn.ReLU(),
                                      nn.Conv2d(8, 32, 3, stride=2), nn.ReLU())
            self.proj = nn.Linear(32 * 19, dim)
            layer = nn.TransformerEncoderLayer(dim, 8, 4 * dim, batch_first=True)
            self.layers = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)

        def forward(self, features: torch.Tensor, feature_lengths: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
            x = self.conv(features.unsqueeze(1))                  # (N, C, T', F')
            n, c, t, f = x.shape
            x = self.proj(x.permute(0, 2, 1, 3).reshape(n, t, c * f))
            lens = ((feature_lengths - 1) // 2 - 1) // 2
            mask = torch.arange(t, device=x.device).unsqueeze(0) >= lens.unsqueeze(1)
            return self.layers(x, src_key_padding_mask=mask), lens

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(vocab, joiner_dim)
            self.conv = nn.Conv1d(joiner_dim, joiner_dim, context, groups=joiner_dim // 4)
            self.blank_id = 0
            self.context_size = context
            self.vocab_size = vocab

        def forward(self, y: torch.Tensor, need_pad: torch.Tensor) -> torch.Tensor:
            e = self.embedding(y).permute(0, 2, 1)
            return torch.relu(self.conv(e)).permute(0, 2, 1)

    class Joiner(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder_proj = nn.Linear(dim, joiner_dim)
            self.decoder_proj = nn.Linear(joiner_dim, joiner_dim)
            self.output_linear = nn.Linear(joiner_dim, vocab)

        def forward(self, encoder_out: torch.Tensor, decoder_out: torch.Tensor) -> torch.Tensor:
            return self.output_linear(torch.tanh(self.encoder_proj(encoder_out) +
                                                 self.decoder_proj(decoder_out)))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.decoder, self.joiner = Encoder(), Decoder(), Joiner()

        def forward(self, features: torch.Tensor, feature_lengths: torch.Tensor):
            return self.encoder(features, feature_lengths)

    torch.manual_seed(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = Model().eval()
    with torch.no_grad():  # blank most of the time, as a trained model (a token per 3-4 frames)
        model.joiner.output_linear.bias[0] += 4.0
    torch.jit.script(model).save(str(out_dir / "jit_script.pt"))
    pieces = ["<blk>", "<sos/eos>", "<unk>"] + [f"\u2581W{i}" for i in range(vocab - 3)]
    (out_dir / "tokens.txt").write_text("".join(f"{p} {i}\n" for i, p in enumerate(pieces)),
                                        encoding="utf-8")
    return out_dir


def _chunks(items: list[dict], eval_dir: Path) -> list[tuple[np.ndarray, float]]:
    vad, opts = SileroVad(), VadOptions()
    out = []
    with tempfile.TemporaryDirectory() as scratch:
        pcm = Path(scratch) / "audio.pcm"
        for item in items:
            with pcm.open("wb") as f:
                decode_to_pcm(eval_dir / item["path"], f)
            for chunk in plan_chunks(speech_regions(pcm, opts, vad), opts):
                out.append((read_pcm(pcm, chunk), chunk.start))
    return out


async def _decode_all(engine, chunks, batch: int) -> float:
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.asr.batching import BatchingTranscriber, BatchOptions
    pool = ThreadPoolExecutor(1, thread_name_prefix="asr")
    loop = asyncio.get_running_loop()

    async def run_on_pool(fn, *args):
        return await loop.run_in_executor(pool, fn, *args)

    batcher = BatchingTranscriber(lambda: engine, run_on_pool,
                                  BatchOptions(max_batch=batch, parallel=1, max_wait_ms=20))
    started = time.perf_counter()
    await asyncio.gather(*(batcher.transcribe(a, o) for a, o in chunks))
    took = time.perf_counter() - started
    pool.shutdown()
    return took


def run(args: argparse.Namespace, items: list[dict]) -> None:
    """Print the throughput table (``args`` from ``bench.asr``)."""
    from pipeline.engines import AsrLayout, load_zipformer
    from schemas.settings import ModelSettings
    print("command: python -m bench.asr " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    print("load average before: %.2f %.2f %.2f" % os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir or build_stand_in(Path(tmp) / "stand-in")
        m = ModelSettings(batch_engine="zipformer", batch_model_dir=str(model_dir),
                          zipformer_decoding=args.decoding)
        engine = load_zipformer(m, AsrLayout(args.device, 1, args.threads, 1))
        chunks = _chunks(items, args.eval)
        audio_s = sum(a.size for a, _ in chunks) / SAMPLE_RATE
        print(f"engine {engine.name} on {args.device} ({args.threads} threads, "
              f"{args.decoding}); {len(items)} items, {len(chunks)} chunks, "
              f"{audio_s:.1f} s of speech"
              + (" [stand-in: random weights, speed only]" if not args.model_dir else ""))
        asyncio.run(_decode_all(engine, chunks[:2], 1))  # warm-up
        print("\n batch   wall s   audio-h/h   speed-up")
        base = None
        for batch in args.batch_sizes:
            took = asyncio.run(_decode_all(engine, chunks, batch))
            rate = audio_s / took
            base = base or rate
            print(f" {batch:5d} {took:8.2f} {rate:11.1f} {rate / base:9.2f}x"
                  f"   (load average {os.getloadavg()[0]:.2f})")
        if args.model_dir:
            from bench.asr import Result, report
            results = []
            for item in items:
                start = time.perf_counter()
                words = []
                for audio, offset in _chunks([item], args.eval):
                    words += engine.transcribe(audio, offset)
                results.append(Result(item["path"], item["path"].split("/")[1], item["duration"],
                                      time.perf_counter() - start, item["reference_text"],
                                      " ".join(w.text for w in words)))
            report(results)
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())
