"""End-to-end batch benchmark: real speech through the service API, against the bare model.

``python -m bench.pipeline [--asterisk16 60] [--accounts 4] [--min-seconds S]
[--aged N] [--url URL --key KEY]``; ``python -m bench.pipeline --labels SECONDS [--repeat N]``

Starts an embedded stack (``a5s up`` in a temporary directory, as the integration
tests do) or uses a running one (``--url`` and ``--key``), serves the eval set on
loopback, submits its real-speech items with a quoted reference (every item of
pocketsphinx, whisper, speechbrain, deepspeech and asterisk_8k, plus an even
sample of ``--asterisk16`` asterisk_16k prompts; with ``--min-seconds``, only
those at least that long) all at once, spread over
``--accounts`` accounts (each runs five jobs at a time), and waits for them.
Then, with the stack stopped, it times the bare models (what the stages run:
decode, Silero VAD, chunk plan, Whisper, speaker embeddings; see ``run_bare``)
on the same files in this process, laid out as the service lays them out.

Printed: per-file WER, pooled WER (lowercase, punctuation removed on both sides;
also after Whisper's English text normalizer), the end-to-end real-time factor
(wall time from the first submission to the last completion over total audio),
per-job latency p50/p95 (created to completed, which includes waiting in the
queue, and started to completed), processing time against audio length, and the
service's overhead over the bare model (end-to-end wall time over the bare
model's total time on the same audio), the CPU time each process of a started
stack (service, broker, Valkey) and this client used during the service run, and
what all of that used beyond the bare run's CPU time, per job: the service's cost
is mostly a fixed amount per job, so its share falls as jobs get longer. With a stack of
its own, the ClickHouse statements and the Redis commands (Valkey's ``INFO
commandstats``) per job are printed too. The load
average is printed before and after: on a shared machine timings move with it. So is what
each run left of the machine's cores unwanted (its threads' run plus run-queue time,
sampled from ``/proc``): idle cores on a quiet machine (stages waiting on each other, a
lone tail), which, unlike wall time, another process's load hardly moves. With py-spy at
hand (``PY_SPY`` or on the path) the service's CPU is split by thread, and the threads
beside the models are set against the models' own threads of the same pass: both see the
same machine, so that share moves less from run to run than the wall-time overhead.

``--labels SECONDS`` measures what ``/v2``'s ``speaker_labels`` costs: a recording of that
length cycling the eval's conversations (``evaluation.diarization.build_long``) goes
through ``POST /v2/transcript`` with ``speaker_labels`` true and false, one job at a time,
alternately ``--repeat`` times; printed is each job's processing time (started to
completed) and its real-time factor, with the load average around each job.

The benchmark's accounts are new, where a service's are not: ``--aged N`` first ages each
of them as if ``N`` of its jobs had already ended (``N`` cancellations of unknown ids sent
straight to ``account-events``; the accounts agent remembers each id that leaves an
account, ``pipeline.accounts.RECENT_MAX`` at most), outside the timing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jiwer
import redis

from bench import load_average
from bench.asr import DEFAULT_EVAL
from bench.scrape import samples
from evaluation.items import choose_items
from evaluation.text import normalized, plain_words
from ops.procstat import Demand, cpu_seconds, pid_of, stack_cpu, unwanted_core_seconds
from stores.process import single_threaded_blas

__all__ = ["main", "choose_items"]

POLL_S = 1.0
PROBES = ("real/speechbrain/spk1_snt1.wav", "real/whisper/jfk.flac",
          "real/asterisk_8k/basic-pbx-ivr-main.wav")
"""Run alone, one after another, for the latency of a single job on an idle service."""


@dataclass
class Job:
    path: str
    group: str
    duration: float
    reference: str
    client: httpx.Client
    id: str = ""
    status: str = ""
    text: str = ""
    error: str = ""
    queued_s: float = 0.0
    """Created to started (waiting for a slot), seconds."""
    processing_s: float = 0.0
    """Started to completed, seconds."""
    completed_at: datetime | None = None
    created_at: datetime | None = None


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_service(base_url: str, keys: list[str], audio_url: Any, items: list[dict[str, Any]],
                timeout_s: float) -> tuple[list[Job], float]:
    """Submit every item (round-robin over the keys' accounts) and wait for all of them."""
    clients = [httpx.Client(base_url=base_url, timeout=60,
                            headers={"Authorization": f"Bearer {k}"}) for k in keys]
    jobs = [Job(i["path"], i["path"].split("/")[1], i["duration"], i["reference_text"],
                clients[n % len(clients)]) for n, i in enumerate(items)]
    started = time.time()
    for job in jobs:
        resp = job.client.post("/v1/transcripts", json={"audio_url": audio_url(job.path)})
        resp.raise_for_status()
        job.id = resp.json()["id"]
    pending = {job.id: job for job in jobs}
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        time.sleep(POLL_S)
        for client in clients:  # one list call per account, not one GET per job
            before = None
            while True:
                params: dict[str, Any] = {"limit": 100}
                if before:
                    params["before"] = before
                page = client.get("/v1/transcripts", params=params).json()
                for row in page["data"]:
                    job = pending.get(row["id"])
                    if job is None or row["status"] not in ("completed", "error"):
                        continue
                    body = client.get(f"/v1/transcripts/{job.id}").json()
                    job.status = body["status"]
                    job.text = body.get("text") or ""
                    job.error = (body.get("error") or {}).get("code", "")
                    job.created_at = _at(body["created_at"])
                    job.completed_at = _at(body["completed_at"])
                    job.queued_s = (_at(body["started_at"]) - job.created_at).total_seconds()
                    job.processing_s = (job.completed_at - _at(body["started_at"])
                                        ).total_seconds()
                    del pending[job.id]
                if not page["has_more"]:
                    break
                before = page["next_before"]
    for client in clients:
        client.close()
    if pending:
        print(f"!! {len(pending)} jobs unfinished after {timeout_s:g} s", file=sys.stderr)
    done = [j for j in jobs if j.completed_at is not None]
    wall = (max(j.completed_at for j in done).timestamp() - started) if done else 0.0
    return jobs, wall


def run_labels(base_url: str, key: str, eval_dir: Path, seconds: float, repeat: int) -> None:
    """One recording of ``seconds`` through ``/v2`` with and without ``speaker_labels``,
    alternately, one job at a time: the processing time of each (see the module's doc)."""
    import wave

    from evaluation.diarization import build_long
    from ops.stack import EvalServer

    with tempfile.TemporaryDirectory() as tmp:
        pcm = Path(tmp) / "long.pcm"
        build_long(eval_dir, seconds, pcm)
        with wave.open(str(Path(tmp) / "long.wav"), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(16000)
            out.writeframes(pcm.read_bytes())
        pcm.unlink()
        server = EvalServer(Path(tmp))
        times: dict[bool, list[float]] = {True: [], False: []}
        try:
            with httpx.Client(base_url=base_url, timeout=60,
                              headers={"Authorization": f"Bearer {key}"}) as client:
                for n in range(repeat):
                    for labels in (True, False):
                        load = load_average()
                        tid = client.post("/v2/transcript", json={
                            "audio_url": server.url("long.wav"),
                            "speaker_labels": labels}).raise_for_status().json()["id"]
                        while (body := client.get(f"/v1/transcripts/{tid}").json())[
                                "status"] not in ("completed", "error"):
                            time.sleep(POLL_S)
                        took = (_at(body["completed_at"]) - _at(body["started_at"])
                                ).total_seconds()
                        times[labels].append(took)
                        print(f"pair {n + 1}/{repeat}, speaker_labels {str(labels).lower():5s}: "
                              f"{body['status']}, {len(body.get('speakers') or [])} speaker(s), "
                              f"processing {took:.1f} s for {body['audio_duration']:.0f} s "
                              f"of audio (RTF {took / body['audio_duration']:.3f}); load "
                              f"average {load} before, {load_average()} after", flush=True)
        finally:
            server.close()
    with_, without = statistics.median(times[True]), statistics.median(times[False])
    print(f"median processing of {seconds:.0f} s over {repeat} pair(s): with speaker_labels "
          f"{with_:.1f} s, without {without:.1f} s ({(without - with_) / with_:+.1%})")


def run_probes(base_url: str, key: str, audio_url: Any) -> dict[str, float]:
    """Seconds from submission to completion of each probe, run alone on the idle service."""
    out: dict[str, float] = {}
    with httpx.Client(base_url=base_url, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as client:
        for path in PROBES:
            tid = client.post("/v1/transcripts", json={"audio_url": audio_url(path)}).json()["id"]
            while True:
                body = client.get(f"/v1/transcripts/{tid}").json()
                if body["status"] in ("completed", "error"):
                    break
                time.sleep(0.1)
            out[path] = (_at(body["completed_at"]) - _at(body["created_at"])).total_seconds()
    return out


def run_bare(eval_dir: Path, paths: list[str], alone: list[str], model: str
             ) -> tuple[float, float, dict[str, str], dict[str, float], str, float]:
    """The service's models on the same files, in this process, with nothing around them.

    Each file goes through what the stages run (``pipeline.engines.Engines``:
    decode, Silero VAD and the chunk plan, Whisper on each chunk, speaker
    embeddings and the assembled result), with the model laid out as the service
    lays it out on this machine (on 2 CPU cores, two 1-thread Whisper replicas)
    and as many files at once as there are replicas. What the service takes
    beyond this is its own overhead: HTTP, Kafka, ClickHouse, Redis, the object
    store and the waits between stages. Then each of ``alone`` is timed on its
    own, as the service's probes were. Model loading is not timed.

    Returns:
        Wall and CPU seconds over ``paths``, the text of each file, the seconds of
        each file (those of ``alone`` timed alone), the layout used, and the core-seconds
        of the run over ``paths`` that this process left unwanted.
    """
    engines = bare_engines(model)
    try:
        _, texts, seconds = bare_pass(engines, eval_dir, paths[:1])  # warm-up
        with Demand(os.getpid()) as demand:
            at = time.time()
            wall, cpu, texts, seconds = bare_timed(engines, eval_dir, paths, texts, seconds)
        unwanted, _ = unwanted_core_seconds(demand.samples, os.cpu_count() or 1, at, at + wall)
        for path in alone:
            _, one_text, one_seconds = bare_pass(engines, eval_dir, [path], workers=1)
            texts.update(one_text)
            seconds.update(one_seconds)
    finally:
        engines.close()
    layout = engines.layout
    return (wall, cpu, texts, seconds, f"{layout.workers} replica(s) x {layout.threads} thread(s)",
            unwanted)


def bare_engines(model: str) -> Any:
    """The service's models (``pipeline.engines.Engines``), loaded and warm, in this process."""
    from pipeline.engines import Engines
    from schemas.settings import ModelSettings, Settings

    settings = Settings(data_dir=Path(tempfile.gettempdir()) / "a5s-bench-models",  # type: ignore[call-arg]
                        models=ModelSettings(whisper=model, device="cpu"))
    engines = Engines(settings)
    engines.warm()
    return engines


def bare_pass(engines: Any, eval_dir: Path, paths: list[str], workers: int | None = None,
              ) -> tuple[float, dict[str, str], dict[str, float]]:
    """``paths`` through the models as the service lays them out (as many files at once as
    there are replicas): wall seconds, the text and the seconds of each file."""
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.audio import read_pcm

    texts: dict[str, str] = {}
    seconds: dict[str, float] = {}

    def one(path: str) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            started = time.perf_counter()
            pcm = Path(scratch) / "audio.pcm"
            with pcm.open("wb") as out:
                engines.decode(eval_dir / path, out, 36000.0)
            speech, chunks = engines.speech(pcm)
            words = [w for c in chunks for w in engines.asr.transcribe(read_pcm(pcm, c), c.start)]
            texts[path] = engines.diarize(pcm, speech, words).text
            seconds[path] = time.perf_counter() - started

    with ThreadPoolExecutor(workers or engines.layout.workers) as pool:
        started = time.perf_counter()
        list(pool.map(one, paths))
        wall = time.perf_counter() - started
    return wall, texts, seconds


def bare_timed(engines: Any, eval_dir: Path, paths: list[str], texts: dict[str, str],
               seconds: dict[str, float],
               ) -> tuple[float, float, dict[str, str], dict[str, float]]:
    """A timed ``bare_pass``: wall and CPU seconds of this process, texts and seconds."""
    cpu = time.process_time()
    wall, more_texts, more_seconds = bare_pass(engines, eval_dir, paths)
    return wall, time.process_time() - cpu, {**texts, **more_texts}, {**seconds, **more_seconds}


def run_pairs(base_url: str, keys: list[str], audio_url: Any, items: list[dict[str, Any]],
              eval_dir: Path, model: str, timeout_s: float, repeat: int,
              service_pid: int | None) -> None:
    """``repeat`` service passes and bare passes, alternately, on the same running stack and
    the same loaded models: each pair's overhead, then their median and spread. Single
    runs of a few long files move by more than the overhead looked for; pairs taken close
    together, on the same stack and models, see the same machine."""
    engines = bare_engines(model)
    paths = [i["path"] for i in items]
    rows = []
    try:
        bare_pass(engines, eval_dir, paths[:1])  # warm-up
        for n in range(repeat):
            cpu0 = (cpu_seconds(service_pid) or 0.0) if service_pid else 0.0
            threads0 = thread_cpu(service_pid) if service_pid else {}
            jobs, wall = run_service(base_url, keys, audio_url, items, timeout_s)
            service_cpu = ((cpu_seconds(service_pid) or 0.0) - cpu0) if service_pid else 0.0
            if service_pid:
                print("  service CPU per thread group, ms per job: " + _per_job(
                    by_thread_name({k: v - threads0.get(k, 0.0)
                                    for k, v in thread_cpu(service_pid).items()},
                                   python_thread_names(service_pid)), len(items)))
            load = load_average()
            bare_s, bare_cpu, bare_texts, _ = bare_timed(engines, eval_dir, paths, {}, {})
            done = [j for j in jobs if j.status == "completed"]
            rows.append((wall, bare_s, service_cpu, bare_cpu))
            print(f"pair {n + 1}/{repeat}: service {wall:.1f} s ({len(done)}/{len(jobs)} "
                  f"completed, process CPU {service_cpu:.1f} s), bare {bare_s:.1f} s (CPU "
                  f"{bare_cpu:.1f} s): overhead {(wall - bare_s) / bare_s:+.1%}; load average "
                  f"{load} after the service pass, {load_average()} after the bare pass; "
                  f"service WER {pooled_wer(done):.2%}, text as the bare models' on "
                  f"{same_as_bare(done, bare_texts)}/{len(done)} files")
    finally:
        engines.close()
    overheads = sorted((w - b) / b for w, b, _, _ in rows)
    beyond = sorted((s - c) / max(1, len(items)) for _, _, s, c in rows)
    print(f"median overhead over {repeat} pairs {statistics.median(overheads):+.1%} "
          f"(spread {overheads[0]:+.1%} to {overheads[-1]:+.1%})" + (
              f"; service process CPU beyond the bare run's, per job: median "
              f"{statistics.median(beyond) * 1000:.0f} ms ({beyond[0] * 1000:.0f} to "
              f"{beyond[-1] * 1000:.0f} ms)" if service_pid else ""))


MODEL_THREADS = ("python", "models")
"""CTranslate2's and the other native libraries' threads (which Python cannot name, so the
kernel's ``python``) and the stages' model pool (decode, VAD, speaker embeddings)."""


def _per_job(threads: dict[str, float], jobs: int) -> str:
    top = sorted(threads.items(), key=lambda kv: -kv[1])
    named = ", ".join(f"{name} {seconds / jobs * 1000:.0f}" for name, seconds in top
                      if seconds / jobs >= 0.0005)
    models = sum(threads.get(name, 0.0) for name in MODEL_THREADS)
    if "MainThread" not in threads or not models:
        return named  # threads unnamed (no py-spy): no split
    beside = sum(threads.values()) - models
    return (f"{named}; beside the models {beside / jobs * 1000:.0f} ms, "
            f"{beside / models:.1%} of the models' threads' {models / jobs * 1000:.0f} ms")


def pooled_wer(done: list[Job]) -> float:
    """Lowercase, punctuation removed, pooled over the completed jobs."""
    if not done:
        return 0.0
    return jiwer.wer([plain_words(j.reference) for j in done], [plain_words(j.text) for j in done])


def same_as_bare(done: list[Job], bare_texts: dict[str, str]) -> int:
    """How many completed jobs have the bare models' text, word for word."""
    return sum(plain_words(bare_texts.get(j.path, "")) == plain_words(j.text) for j in done)


def report(jobs: list[Job], wall: float, bare_s: float | None, bare_texts: dict[str, str],
           bare_layout: str, quiet: bool) -> None:
    done = [j for j in jobs if j.status == "completed"]
    failed = [j for j in jobs if j.status == "error"]
    if not quiet:
        for j in jobs:
            wer = jiwer.wer(plain_words(j.reference), plain_words(j.text) or "<empty>")
            score = (f"wer {wer:6.1%}" if j.status == "completed"
                     else f"{j.status or 'unfinished'} {j.error}")
            same = "" if j.path not in bare_texts else (
                "  (= bare model)" if plain_words(bare_texts[j.path]) == plain_words(j.text)
                else f"  (bare model: {plain_words(bare_texts[j.path])})")
            print(f"{score}  {j.duration:5.1f} s  proc {j.processing_s:5.1f} s  {j.path}\n"
                  f"      ref: {plain_words(j.reference)}\n      hyp: {j.text}{same}")
    refs = [plain_words(j.reference) for j in done]
    hyps = [plain_words(j.text) for j in done]
    words = sum(len(r.split()) for r in refs)
    audio = sum(j.duration for j in done)
    print(f"\n{len(jobs)} jobs: {len(done)} completed, {len(failed)} failed, "
          f"{len(jobs) - len(done) - len(failed)} unfinished; {audio:.1f} s of audio, "
          f"{words} reference words")
    if done:
        plain = jiwer.wer(refs, hyps)
        spelled = jiwer.wer([normalized(r) for r in refs], [normalized(h) for h in hyps])
        print(f"WER {plain:.2%} (lowercase, no punctuation); {spelled:.2%} (Whisper's English "
              f"text normalizer)")
        if bare_texts:
            bare = jiwer.wer(refs, [plain_words(bare_texts.get(j.path, "")) for j in done])
            print(f"bare model WER on the same files {bare:.2%}; identical text on "
                  f"{same_as_bare(done, bare_texts)}/{len(done)} files")
        print(f"end to end: {wall:.1f} s wall for {audio:.1f} s of audio: RTF {wall / audio:.3f} "
              f"({audio / wall:.1f}x real time)")
        latency = [(j.completed_at - j.created_at).total_seconds()  # type: ignore[operator]
                   for j in done]
        proc = [j.processing_s for j in done]
        print(f"latency created->completed p50 {_pct(latency, 0.5):.1f} s, p95 "
              f"{_pct(latency, 0.95):.1f} s (all submitted at once, so mostly queueing)")
        print(f"processing started->completed p50 {_pct(proc, 0.5):.1f} s, p95 "
              f"{_pct(proc, 0.95):.1f} s")
        for lo, hi in ((0, 3), (3, 10), (10, 1e9)):
            rows = [j for j in done if lo <= j.duration < hi]
            if rows:
                print(f"  audio {lo:g}-{hi if hi < 1e9 else 'inf'} s: {len(rows):3d} jobs, "
                      f"mean audio {statistics.mean(j.duration for j in rows):5.1f} s, "
                      f"mean processing {statistics.mean(j.processing_s for j in rows):5.1f} s")
    if bare_s:
        print(f"bare models (decode, VAD, Whisper, speaker embeddings; {bare_layout}, one "
              f"file per replica at a time): {bare_s:.1f} s wall, RTF "
              f"{bare_s / max(audio, 1e-9):.3f}")
        print(f"service overhead over the bare model: {(wall - bare_s) / bare_s:+.1%} "
              f"(end-to-end wall {wall:.1f} s vs {bare_s:.1f} s)")


def main(argv: list[str] | None = None) -> None:
    single_threaded_blas()  # as in the service's processes
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eval", type=Path, default=DEFAULT_EVAL, help="eval set directory")
    parser.add_argument("--asterisk16", type=int, default=60,
                        help="how many asterisk_16k prompts to add (even sample)")
    parser.add_argument("--min-seconds", type=float, default=0.0,
                        help="only items at least this long (the overhead of longer jobs)")
    parser.add_argument("--accounts", type=int, default=4,
                        help="accounts to spread the jobs over (five running each)")
    parser.add_argument("--url", help="a running service's base URL (default: start a stack)")
    parser.add_argument("--key", help="API key for --url")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare-model run")
    parser.add_argument("--model", default="base", help="Whisper model of the bare run")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for jobs")
    parser.add_argument("--quiet", action="store_true", help="no per-file lines")
    parser.add_argument("--aged", type=int, default=0, metavar="N",
                        help="age each account first by N ended jobs (a stack of our own)")
    parser.add_argument("--labels", type=float, metavar="SECONDS",
                        help="time a recording of SECONDS through /v2 with and without "
                             "speaker_labels, alternately --repeat times")
    parser.add_argument("--repeat", type=int, default=1,
                        help="N > 1: N service and bare passes, alternately, on the same stack "
                             "and models; prints each pair (with its WER) and the median overhead")
    args = parser.parse_args(argv)

    from ops.stack import EvalServer, temporary_stack

    if args.labels:
        print(f"python -m bench.pipeline {' '.join(argv if argv is not None else sys.argv[1:])}"
              f"; load average {load_average()} on {os.cpu_count()} cores")
        with temporary_stack() as stack:
            _, key = stack.new_account()
            warm = EvalServer(args.eval)
            try:
                warm_up(stack.url(""), key, warm.url("real/whisper/jfk.flac"))
            finally:
                warm.close()
            run_labels(stack.url(""), key, args.eval, args.labels, args.repeat)
        return

    manifest = json.loads((args.eval / "manifest.json").read_text())
    durations = {i["path"]: i["duration"] or 0.0 for i in manifest["items"]}
    items = choose_items(manifest, args.asterisk16, args.min_seconds)
    if not items:
        parser.error(f"no scored item is {args.min_seconds:g} s or longer")
    groups: dict[str, list[float]] = {}
    for item in items:
        groups.setdefault(item["path"].split("/")[1], []).append(item["duration"])
    print(f"load average {load_average()} on {os.cpu_count()} cores; {len(items)} items, "
          f"{sum(sum(v) for v in groups.values()):.1f} s of audio:")
    for group, lengths in sorted(groups.items()):
        print(f"  {group:14s} {len(lengths):3d} items {sum(lengths):7.1f} s")

    server = EvalServer(args.eval)
    stack = None
    redis_used: dict[str, int] = {}
    with contextlib.ExitStack() as running:
        try:
            if args.url:
                if not args.key:
                    parser.error("--url needs --key")
                base_url, keys = args.url.rstrip("/"), [args.key]
            else:
                t0 = time.monotonic()
                stack = running.enter_context(temporary_stack())
                print(f"stack up in {time.monotonic() - t0:.1f} s ({stack.data_dir})")
                accounts = [stack.new_account() for _ in range(max(1, args.accounts))]
                keys = [key for _, key in accounts]
                base_url = stack.url("")
                if args.aged:
                    t0 = time.monotonic()
                    age_accounts(f"127.0.0.1:{stack.env['A5S_EMBEDDED__KAFKA']}",
                                 [account_id for account_id, _ in accounts], args.aged)
                for key in keys if args.aged else keys[:1]:  # each behind its account's events
                    warm_up(base_url, key, server.url("real/whisper/jfk.flac"))
                if args.aged:
                    print(f"{len(keys)} accounts aged by {args.aged} ended jobs each in "
                          f"{time.monotonic() - t0:.1f} s")
            run_dir = stack.data_dir / "run" if stack is not None else None
            if args.repeat > 1:
                run_pairs(base_url, keys, server.url, items, args.eval, args.model, args.timeout,
                          args.repeat, pid_of(run_dir, "service") if run_dir else None)
                return
            probes = run_probes(base_url, keys[0], server.url)
            cpu_before = stack_cpu(run_dir) if run_dir else {}
            own_before = time.process_time()
            service_pid = pid_of(run_dir, "service") if run_dir else None
            counters_before = service_counters(base_url)
            redis_before = redis_calls(stack)
            threads_before = thread_cpu(service_pid) if service_pid else {}
            with Demand(service_pid or os.getpid()) as demand:
                at = time.time()
                jobs, wall = run_service(base_url, keys, server.url, items, args.timeout)
            counters = {k: v - counters_before.get(k, 0.0)
                        for k, v in service_counters(base_url).items()}
            redis_used = {k: v - redis_before.get(k, 0) for k, v in redis_calls(stack).items()
                          if v > redis_before.get(k, 0)}
            threads = (by_thread_name({k: v - threads_before.get(k, 0.0)
                                       for k, v in thread_cpu(service_pid).items()},
                                      python_thread_names(service_pid)) if service_pid else {})
            unwanted = (unwanted_core_seconds(demand.samples, os.cpu_count() or 1, at, at + wall)[0]
                        if service_pid else None)
            cpu_after = stack_cpu(run_dir) if run_dir else {}
            cpu_used = {name: cpu_after[name] - cpu_before[name]
                        for name in cpu_after if name in cpu_before}
            if cpu_used:  # a stack of our own: what this client costs beside it
                cpu_used["benchmark client"] = time.process_time() - own_before
        finally:
            server.close()
    print(f"load average after the service run {load_average()}")
    bare_s, bare_cpu, bare_texts, bare_each, bare_layout, bare_unwanted = (
        (None, 0.0, {}, {}, "", 0.0) if args.no_bare else run_bare(
            args.eval, [j.path for j in jobs if j.status == "completed"], list(PROBES),
            args.model))
    if bare_s is not None:
        print(f"load average after the bare run {load_average()}")
    report(jobs, wall, bare_s, bare_texts, bare_layout, args.quiet)
    if cpu_used:
        print("CPU time during the service run (the stack's processes, and this one: "
              "submitting, polling, serving the audio): " + ", ".join(
                  f"{name} {seconds:.1f} s" for name, seconds in cpu_used.items()))
    if counters and jobs:
        n = len(jobs)
        print(f"ClickHouse per job: {counters.get('insert', 0) / n:.2f} inserts, "
              f"{counters.get('query', 0) / n:.2f} queries, "
              f"{counters.get('cpu', 0) / n * 1000:.1f} ms of its thread's CPU")
    if redis_used and jobs:
        n = len(jobs)
        print("Redis commands per job, as Valkey counts them (a script's own commands "
              f"included; each evalsha is one call of the service's): "
              f"{sum(redis_used.values()) / n:.1f} (" + ", ".join(
            f"{name} {count / n:.1f}" for name, count in
            sorted(redis_used.items(), key=lambda kv: -kv[1])) + ")")
    if threads and jobs:
        print("service CPU per thread group, ms per job: " + _per_job(threads, len(jobs)))
    if cpu_used and bare_s is not None:
        beyond = sum(cpu_used.values()) - bare_cpu
        print(f"CPU beyond the models: {beyond:.1f} s (all of the above less the bare run's "
              f"{bare_cpu:.1f} s), {beyond / len(jobs) * 1000:.0f} ms per job")
    cores = os.cpu_count() or 1
    if unwanted is not None:
        print(f"cores left unwanted (idle on a quiet machine): service {unwanted:.1f} "
              f"core-s, {unwanted / (cores * wall):.1%} of {cores} x {wall:.1f} s" + (
                  f"; bare models {bare_unwanted:.1f} core-s, "
                  f"{bare_unwanted / (cores * bare_s):.1%} of {cores} x {bare_s:.1f} s"
                  if bare_s else ""))
    print("\none job at a time on the idle service (submission to completion) vs the bare model:")
    for path, seconds in probes.items():
        bare = f"{bare_each[path]:5.1f} s" if path in bare_each else "    -"
        print(f"  {durations.get(path, 0.0):5.1f} s of audio: service {seconds:5.1f} s, "
              f"bare model {bare}  {path}")


def service_counters(base_url: str) -> dict[str, float]:
    """The service's ClickHouse counters from ``GET /metrics``: inserts, queries, and the
    CPU seconds of its ClickHouse thread (empty where the service does not export them)."""
    try:
        text = httpx.get(base_url.rstrip("/") + "/metrics", timeout=30).text
    except httpx.HTTPError:
        return {}
    out = {labels["kind"]: value
           for labels, value in samples(text, "a5s_clickhouse_statements_total")}
    out.update(("cpu", value) for _, value in samples(text, "a5s_clickhouse_cpu_seconds_total"))
    return out


def redis_calls(stack: Any) -> dict[str, int]:
    """Commands served so far by a stack's own Valkey, by name (``INFO commandstats``);
    empty for a running service (``--url``), whose Redis may serve others too."""
    if stack is None:
        return {}
    client = redis.Redis(port=int(stack.env["A5S_EMBEDDED__REDIS"]))
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}


def thread_cpu(pid: int) -> dict[tuple[int, str], float]:
    """CPU seconds (user + system) of each thread of ``pid`` so far, by thread id and the
    kernel's name for it."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[tuple[int, str], float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            raw = (task / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        out[(int(task.name), name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def python_thread_names(pid: int) -> dict[int, str]:
    """Python's names of the threads of ``pid`` (``MainThread``, ``clickhouse_0``, ...), from
    one ``py-spy dump`` where py-spy is installed (the kernel names them all ``python``);
    empty otherwise."""
    spy = os.environ.get("PY_SPY") or shutil.which("py-spy")
    if not spy:
        return {}
    try:
        dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True,
                              text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found = re.findall(r'^Thread (\d+) \([^)]*\): "([^"]*)"', dump, re.MULTILINE)
    return {int(tid): name for tid, name in found}


def by_thread_name(cpu: dict[tuple[int, str], float], names: dict[int, str]) -> dict[str, float]:
    """CPU seconds summed by thread name (Python's where known, else the kernel's), its
    trailing digits and separators dropped (``asr_0`` and ``asr_1``: ``asr``)."""
    out: dict[str, float] = {}
    for (tid, kernel_name), seconds in cpu.items():
        name = names.get(tid, kernel_name).rstrip("0123456789_-:.") or "?"
        out[name] = out.get(name, 0.0) + seconds
    return out


def age_accounts(bootstrap: str, account_ids: list[str], ended: int) -> None:
    """As if ``ended`` jobs of each account had ended: a cancellation of an id the account
    never had makes the accounts agent remember it, as an ended job's id."""
    import asyncio

    from aiokafka import AIOKafkaProducer

    from schemas.ids import transcript_id
    from schemas.records import Canceled
    from schemas.settings import Settings
    from topologies.topics import ACCOUNT_EVENTS

    topic = Settings().topic_prefix + ACCOUNT_EVENTS.name  # type: ignore[call-arg]

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        await producer.start()
        try:
            for account_id in account_ids:
                sent = [await producer.send(topic, ACCOUNT_EVENTS.encode(Canceled(
                    account_id=account_id, transcript_id=transcript_id(),
                    at=datetime.now(UTC))), key=account_id.encode()) for _ in range(ended)]
                await asyncio.gather(*sent)
        finally:
            await producer.stop()

    asyncio.run(send())


def warm_up(base_url: str, key: str, url: str) -> None:
    """One job first, so model loading is not timed (the bare run is timed warm too)."""
    with httpx.Client(base_url=base_url, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as client:
        tid = client.post("/v1/transcripts", json={"audio_url": url}).json()["id"]
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if client.get(f"/v1/transcripts/{tid}").json()["status"] in ("completed", "error"):
                return
            time.sleep(0.5)


if __name__ == "__main__":
    main()
