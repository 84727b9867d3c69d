"""Throughput benchmark: batched ASR, one vs two worker processes, and the GPU path.

``python -m bench.throughput [--jobs 200] [--model base] [--engine-chunks 24]
[--workers 1,2] [--timeout 240] [--skip-e2e]``

1. Engine level (this process, on the CPU): the same real-speech chunks (eval
   clips cut by Silero VAD) through several layouts: one decoder of 2 threads taking
   one chunk at a time (``WhisperEngine.transcribe``) or batches
   (``transcribe_batch``), and two 1-thread decoders (CTranslate2 workers) side by
   side, one chunk or one batch each; wall and process CPU seconds, audio-hours per
   hour, and how many chunks gave the same words as the first layout.
2. End to end: for each worker count, a fresh embedded stack (``a5s up
   --workers N``: the service plus N-1 extra workers that reach its ClickHouse
   through the loopback proxy) gets a backlog of ``--jobs`` jobs at once. The
   jobs are cut from ``../shared/eval``: every real clip with a reference, the
   asterisk prompts cycled to fill the count; each job is a different URL on a
   loopback HTTP server (a ``?n=`` query makes repeats distinct downloads).
   Printed: audio-hours per hour (total audio over the wall time from the first
   submission to the last completion), per-job latency percentiles (created to
   completed, queueing included), and the batch sizes the service's batcher
   achieved (``a5s_asr_batch_size`` from ``/metrics``).
3. GPU: RTF, audio-hours per hour, a batch-size sweep with the seconds of each
   CTranslate2 call (``encode``, ``generate``, ``align``) and GPU memory, then the
   cost of one beam-search step as the batch grows, with and without timestamp
   tokens, where a CUDA device is present; otherwise "not measured: no CUDA device"
   (``--gpu-device cpu`` runs the same section on the CPU, as a check of the code).

Every run is bounded by ``--timeout``; the load average is printed with each
figure, since on a shared machine timings move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

__all__ = ["main"]

EVAL = Path(__file__).resolve().parents[1].parent / "shared" / "eval"


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] if ordered \
        else float("nan")


# --- 1. engine level ----------------------------------------------------------------------------

def speech_chunks(n: int) -> list[tuple[Any, float]]:
    """Up to ``n`` VAD chunks of real speech from the eval set (longest clips first)."""
    from pipeline.audio import decode_to_pcm, read_pcm
    from pipeline.vad import SileroVad, VadOptions, plan_chunks, speech_regions
    items = [i for i in json.loads((EVAL / "manifest.json").read_text())["items"]
             if i["kind"] == "real" and i["path"].startswith("real/") and
             "asterisk_16k" not in i["path"]]
    items.sort(key=lambda i: -i["duration"])
    vad, opts, out = SileroVad(), VadOptions(), []
    with tempfile.TemporaryDirectory() as tmp:
        for item in items:
            pcm = Path(tmp) / "a.pcm"
            with pcm.open("wb") as fh:
                decode_to_pcm(EVAL / item["path"], fh)
            for chunk in plan_chunks(speech_regions(pcm, opts, vad), opts):
                out.append((read_pcm(pcm, chunk), chunk.start))
            if len(out) >= n:
                break
    return out[:n]


LAYOUTS = ((1, 2, 1), (1, 2, 4), (1, 2, 8), (2, 1, 1), (2, 1, 4))
"""(workers, threads per decode, batch size) compared at engine level; the first is
one chunk at a time on one 2-thread decoder, the layout before parallel workers."""


def engine_section(model: str, n: int, layouts: list[tuple[int, int, int]], device: str) -> None:
    """The same chunks through each layout: ``workers`` threads each take the next batch."""
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.asr import WhisperEngine, WhisperOptions
    from pipeline.models import resolve_whisper
    chunks = speech_chunks(n)
    audio_s = sum(a.size for a, _ in chunks) / 16000
    path = resolve_whisper(model, Path(tempfile.gettempdir()) / "a5s-models")
    print(f"\n== engine level: whisper {model} on {device}, {len(chunks)} chunks, "
          f"{audio_s:.1f} s of real speech ==")
    reference: list[Any] | None = None
    for workers, threads, size in layouts:
        engine = WhisperEngine(path, WhisperOptions(device=device, cpu_threads=threads,
                                                    workers=workers))
        engine.transcribe_batch(chunks[:2])  # warm-up

        def decode(k: int, engine: Any = engine, size: int = size) -> list[Any]:
            part = chunks[k:k + size]
            return engine.transcribe_batch(part) if size > 1 else \
                [engine.transcribe(*part[0])]

        started, cpu = time.perf_counter(), _cpu()
        with ThreadPoolExecutor(workers) as pool:
            results = [w for part in pool.map(decode, range(0, len(chunks), size)) for w in part]
        wall, cpu_s = time.perf_counter() - started, _cpu() - cpu
        reference = reference or results
        same = sum([w.text for w in r] == [w.text for w in s]
                   for r, s in zip(results, reference))
        print(f"{workers} worker(s) x {threads} thread(s), batch {size:<2}: wall {wall:6.1f} s  "
              f"cpu {cpu_s:6.1f} s  {audio_s / wall:5.2f} audio-h/h  same words as the first "
              f"{same}/{len(chunks)}  fallbacks {engine.batch_fallbacks}  load {_load()}")


# --- 2. end to end ------------------------------------------------------------------------------

def backlog(n: int) -> list[dict[str, Any]]:
    items = [i for i in json.loads((EVAL / "manifest.json").read_text())["items"]
             if i["kind"] == "real"]
    prompts = sorted((i for i in items if "asterisk_16k" in i["path"]), key=lambda i: i["path"])
    others = sorted((i for i in items if "asterisk_16k" not in i["path"] and
                     i["duration"] <= 60), key=lambda i: i["path"])
    chosen = others[:n]
    k = 0
    while len(chosen) < n and prompts:
        chosen.append(prompts[k % len(prompts)])
        k += 1
    return chosen


def batch_sizes_from_metrics(text: str) -> str:
    count = total = 0.0
    for line in text.splitlines():
        if line.startswith("a5s_asr_batch_size_count"):
            count = float(line.split()[-1])
        elif line.startswith("a5s_asr_batch_size_sum"):
            total = float(line.split()[-1])
    return (f"{int(count)} batches, mean {total / count:.2f} chunks" if count else
            "no batches recorded")


def e2e_run(workers: int, jobs: list[dict[str, Any]], model: str, timeout_s: float,
            batch_size: int) -> None:
    from ops.stack import EvalServer, temporary_stack
    server = EvalServer(EVAL)
    env = {"A5S_MODELS__WHISPER": model, "A5S_WORKERS": str(workers),
           "A5S_MODELS__BATCH_SIZE": str(batch_size)}
    with temporary_stack(env) as stack:
        try:
            data = stack.data_dir
            if workers > 1:  # every extra worker joined (and loaded its models) before the load
                deadline = time.monotonic() + 180
                while len(list((data / "run").glob("worker-*.pid"))) < workers - 1 and \
                        time.monotonic() < deadline:
                    time.sleep(1)
                time.sleep(20)
            keys = [stack.new_account(max_concurrent_jobs=20)[1] for _ in range(4)]
            clients = [stack.client(k) for k in keys]
            ids: dict[str, tuple[httpx.Client, float]] = {}
            started = time.time()
            for n, item in enumerate(jobs):
                client = clients[n % len(clients)]
                resp = client.post("/v1/transcripts",
                                   json={"audio_url": server.url(item["path"]) + f"?n={n}"})
                resp.raise_for_status()
                ids[resp.json()["id"]] = (client, item["duration"])
            latencies: list[float] = []
            audio = 0.0
            last = started
            failed = 0
            deadline = time.monotonic() + timeout_s
            pending = dict(ids)
            while pending and time.monotonic() < deadline:
                time.sleep(2)
                for tid, (client, _) in list(pending.items()):
                    body = client.get(f"/v1/transcripts/{tid}").json()
                    if body["status"] not in ("completed", "error"):
                        continue
                    del pending[tid]
                    if body["status"] == "error":
                        failed += 1
                        continue
                    from datetime import datetime
                    created = datetime.fromisoformat(body["created_at"].replace("Z", "+00:00"))
                    done = datetime.fromisoformat(body["completed_at"].replace("Z", "+00:00"))
                    latencies.append((done - created).total_seconds())
                    audio += float(body.get("audio_duration") or 0.0)
                    last = max(last, done.timestamp())
            wall = last - started
            metrics = httpx.get(stack.url("/metrics"), timeout=10).text
            print(f"{workers} worker process(es): {len(latencies)}/{len(jobs)} completed, "
                  f"{failed} failed, {len(pending)} unfinished; {audio:.0f} s of audio in "
                  f"{wall:.0f} s = {audio / wall if wall else 0:.2f} audio-h/h; latency p50 "
                  f"{_pct(latencies, .5):.0f} s  p90 {_pct(latencies, .9):.0f} s  p99 "
                  f"{_pct(latencies, .99):.0f} s; service batcher: "
                  f"{batch_sizes_from_metrics(metrics)}; load {_load()}")
            for log in sorted((data / "logs").glob("worker-*.log")):
                lines = [ln for ln in log.read_text(errors="replace").splitlines()
                         if "asr batching:" in ln]
                if lines:
                    print(f"   {log.name}: {lines[-1].split('asr batching: ', 1)[1]}")
        finally:
            server.close()


# --- 3. GPU -------------------------------------------------------------------------------------

class _Phases:
    """Wraps a CTranslate2 Whisper model: seconds and calls of ``encode``/``generate``/``align``."""

    TIMED = ("encode", "generate", "align")

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self.TIMED:
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
                self.calls[name] = self.calls.get(name, 0) + 1
        return timed

    def report(self, wall: float) -> str:
        parts = [f"{k} {self.seconds[k]:.2f} s/{self.calls[k]} calls" for k in sorted(self.seconds)]
        return ", ".join(parts) + f", the rest {wall - sum(self.seconds.values()):.2f} s"


def gpu_section(model: str, n: int, device: str = "cuda", timestamp_tokens: bool = True) -> None:
    """Whisper on CUDA (float16) beside the CPU (int8): words, WER, a batch-size sweep with the
    time of each CTranslate2 call, and how a beam search step grows with the batch."""
    from pipeline.asr.base import cuda_device_count
    print("\n== GPU ==")
    if device == "cuda" and cuda_device_count() == 0:
        print("not measured: no CUDA device")
        return
    import ctranslate2
    import jiwer

    from pipeline.asr import WhisperEngine, WhisperOptions
    from pipeline.models import resolve_whisper
    distinct = speech_chunks(n)
    chunks = (distinct * -(-n // len(distinct)))[:n]  # a GPU batch wants more: cycle them
    audio_s = sum(a.size for a, _ in chunks) / 16000
    path = resolve_whisper(model, Path(tempfile.gettempdir()) / "a5s-models")
    engine = WhisperEngine(path, WhisperOptions(device=device, timestamp_tokens=timestamp_tokens))
    print(f"whisper {model}, CTranslate2 {ctranslate2.__version__} ({engine._model.model.device}, "
          f"{engine._model.model.compute_type}); {len(distinct)} distinct chunks cycled to "
          f"{len(chunks)}, {audio_s:.1f} s of speech; GPU memory {_gpu_memory()}; load {_load()}")
    cpu = WhisperEngine(path, WhisperOptions(device="cpu", cpu_threads=os.cpu_count() or 1,
                                             timestamp_tokens=timestamp_tokens))
    started = time.perf_counter()
    on_cpu = cpu.transcribe_batch(chunks)
    print(f"CPU int8, one batch, {os.cpu_count()} threads: RTF "
          f"{(time.perf_counter() - started) / audio_s:.4f}")
    engine.transcribe_batch(chunks[:4])  # CUDA kernels and allocator warmed
    first: list[Any] | None = None
    for size in (1, 4, 8, 16, 32, 64):
        phases = engine._model.model = _Phases(engine._model.model)
        engine.batch_fallbacks = 0
        started = time.perf_counter()
        words: list[Any] = []
        for k in range(0, len(chunks), size):
            words += ([engine.transcribe(*chunks[k])] if size == 1 else
                      engine.transcribe_batch(chunks[k:k + size]))
        wall = time.perf_counter() - started
        engine._model.model = phases._inner
        first = first or words
        same = sum([w.text for w in a] == [w.text for w in b] for a, b in zip(words, first))
        print(f"batch {size:<3}: RTF {wall / audio_s:.4f}  {audio_s / wall:7.1f} audio-h/h per "
              f"GPU  same words as batch 1: {same}/{len(chunks)}  decoded alone after the "
              f"batch: {engine.batch_fallbacks}  GPU memory {_gpu_memory()}\n"
              f"           {phases.report(wall)}")
    assert first is not None
    texts, cpu_texts = ([" ".join(w.text for w in ws) or "<empty>" for ws in run]
                        for run in (first, on_cpu))
    print(f"float16 on CUDA against int8 on the CPU: same words on "
          f"{sum(a == b for a, b in zip(texts, cpu_texts))}/{len(chunks)} chunks, WER of one "
          f"taking the other as reference {jiwer.wer(cpu_texts, texts):.2%}")
    beam_growth(engine, [a for a, _ in distinct], (1, 4, 16, 32) if device == "cuda" else (1, 2))


def beam_growth(engine: Any, audios: list[Any], batches: tuple[int, ...] = (1, 4, 16, 32)) -> None:
    """``generate`` alone on B copies of one chunk, with and without timestamp tokens: the cost
    of a decoding step as the rows (batch x beam) grow."""
    import numpy as np
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens
    m = engine._model
    tokenizer = Tokenizer(m.hf_tokenizer, m.model.is_multilingual, task="transcribe",
                          language="en" if m.model.is_multilingual else None)
    ordered = sorted(audios, key=len)
    print("beam search step cost (beam 5, 30 s window, B copies of one chunk):")
    for audio in (ordered[len(ordered) // 4], ordered[-2]):
        window = pad_or_trim(m.feature_extractor(audio)[:, :-1], m.feature_extractor.nb_max_frames)
        for without_timestamps in (False, True):
            prompt = m.get_prompt(tokenizer, [], without_timestamps=without_timestamps)
            for b in batches:
                encoded = m.encode(np.stack([window] * b))
                started = time.perf_counter()
                results = m.model.generate(
                    encoded, [list(prompt)] * b, beam_size=engine.opts.beam_size,
                    max_length=m.max_length, suppress_blank=True,
                    suppress_tokens=get_suppressed_tokens(tokenizer, [-1]))
                wall = time.perf_counter() - started
                steps = max(len(r.sequences_ids[0]) for r in results)
                print(f"  chunk {audio.size / 16000:4.1f} s, timestamps "
                      f"{'off' if without_timestamps else 'on '}, B {b:<2}: "
                      f"{1000 * wall / steps:7.2f} ms a step, {1000 * wall / b:7.1f} ms a chunk")


def _gpu_memory() -> str:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "n/a (no nvidia-smi)"
    out = subprocess.run([smi, "--query-gpu=memory.used,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True, check=False).stdout.strip()
    return out.splitlines()[0] if out else "n/a"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--model", default="base")
    parser.add_argument("--engine-chunks", type=int, default=24)
    parser.add_argument("--layouts", default=",".join("x".join(map(str, lay)) for lay in LAYOUTS),
                        help="engine-level layouts: WORKERSxTHREADSxBATCH, comma-separated")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--batch-size", type=int, default=0,
                        help="A5S_MODELS__BATCH_SIZE of the end-to-end stacks (0: by device)")
    parser.add_argument("--timeout", type=float, default=240.0)
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--skip-engine", action="store_true")
    parser.add_argument("--gpu-device", default="cuda",
                        help="device of the GPU section (cpu: a quick check of it without a GPU)")
    parser.add_argument("--no-timestamp-tokens", action="store_true",
                        help="GPU section: Whisper decodes with <|notimestamps|> (docs/scaling.md)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"a5s throughput bench: {os.cpu_count()} cores, load {_load()}")
    if not args.skip_engine:
        engine_section(args.model, args.engine_chunks,
                       [tuple(int(x) for x in lay.split("x")) for lay in  # type: ignore[misc]
                        args.layouts.split(",")], "cpu")
    if not args.skip_e2e:
        jobs = backlog(args.jobs)
        print(f"\n== end to end: {len(jobs)} jobs, {sum(j['duration'] for j in jobs):.0f} s of "
              f"audio, whisper {args.model}, batch size {args.batch_size} ==")
        for workers in (int(w) for w in args.workers.split(",")):
            e2e_run(workers, jobs, args.model, args.timeout, args.batch_size)
    gpu_section(args.model, args.engine_chunks, args.gpu_device,
                not args.no_timestamp_tokens)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
