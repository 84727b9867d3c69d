"""Streaming benchmark through the service: ``WSS /v1/realtime`` end to end.

``python -m bench.realtime [--sessions N ...] [--accounts K] [--url ws://host:port --key a5s_sk_...]``
``python -m bench.realtime --coverage [--prompts 20] [--parallel 5] [--show]``
``python -m bench.realtime --sessions N --v3``: each of the N programmes streamed twice at
once, over ``/v1/realtime`` and over ``/v3/ws`` (AssemblyAI's v3, :mod:`bench.v3_realtime`),
so both protocols see the same items under the same load; v3's **end-of-turn latency** (an
ended turn's arrival minus the phrase end it settles, as final latency) is printed beside
the a5s protocol's final latency.

5 sessions, then 5+5 on two accounts: ``python -m bench.realtime --sessions 5 --sessions 10
--accounts 2``.

Without ``--url`` it starts its own embedded stack (``a5s up`` in a temporary data
directory, on free loopback ports; extra ``A5S_*`` settings pass through the
environment, e.g. ``A5S_MODELS__STREAMING_FINAL=tiny.en``) and makes an account for the
run. Each session streams the ~95 s programme of :mod:`bench.streaming` (real
speech from ``../shared/eval`` with 1 s pauses, each session in a different order) in
20 ms frames at real-time pace over its own WebSocket; N sessions run at once, starting
0.23 s apart. The figures therefore include everything a client sees: the gateway,
Kafka both ways, the realtime agent and the engine.

Definitions (times are on the session's audio clock: 0 = first frame sent):

* **WER**: the last transcript before ``finished`` against the clip references,
  lowercased, punctuation removed, pooled over sessions.
* **Phrase start / end**: offline Silero VAD over the clean session audio, as in
  :mod:`bench.streaming`.
* **Final latency**: for each ``is_final`` message sent before ``finish``, its arrival
  minus the latest phrase end before it not claimed by an earlier final (finals that
  settle a long segment mid-speech claim none and are not counted); p50, p95, p99 and max.
* **Never shown**: a clip of the programme (an utterance) none of whose words the closing
  transcript matches (:func:`evaluation.coverage.score_utterances`), listed by clip and
  session, beside the same count for the batch transcripts.
* **Batch WER**: each clip of the programme transcribed once through the batch API of the
  same service after the runs, the clips' texts joined in each session's order and scored
  like the stream: the streaming WER beside the batch WER of the same items.
* **First partial**: for each phrase start after at least 0.8 s without speech, the
  arrival of the first message whose text has more words than the settled text (the
  last final) minus that start.
* **Keep-up**: how late the sender fell behind its schedule (max), and the time from
  ``finish`` to ``finished`` (the decode backlog left at the end). A run *keeps real time*
  when no session failed, no sender fell 0.5 s behind and no backlog at the end exceeded
  3 s; the largest number of sessions taken in such a run is printed last. Sessions the
  worker refused (``a5sv2_unavailable``: full, or behind) are counted apart, not as failed;
  ``--stagger`` starts sessions seconds apart, so that later ones meet a worker under load.
* **Capacity**: sessions are spread over ``--accounts`` accounts (default: five sessions
  each, the per-account limit), and with a stack of its own the CPU seconds its processes
  used are printed per second of audio, i.e. the share of a core one live session costs.
  A worker holds ``realtime.worker_max_sessions`` sessions (``A5S_REALTIME__WORKER_MAX_SESSIONS``),
  past five only while its finals keep up; the stack's ``a5s_live_final_lag_seconds``, which
  that rule goes by, is sampled every 2 s and printed.

``--coverage`` streams instead every dev-set item with a reference (every conversation,
every real recording with a quoted reference, an even sample of ``--prompts`` Asterisk
prompts; see :mod:`evaluation.coverage`), each file as it is, at real-time pace,
``--parallel`` at a time, then transcribes the same files through the batch API of the
same service. Printed per item and pooled: utterances never shown and mostly lost, the
streaming WER beside the batch WER (Whisper's English normaliser on both sides, numbers
written apart joined: :func:`evaluation.text.numbers_joined`), any invented tail, final
latency and first partial p50/p95. Coverage and WER do not depend on
the machine's load; latencies do, so the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jiwer
import numpy as np

from bench.scrape import samples
from bench.streaming import CLIPS, build_stream, load_pcm, normalize, phrase_marks
from evaluation.coverage import dev_items, invented_tail, score_utterances
from evaluation.text import numbers_joined
from ops.procstat import stack_cpu
from ops.stack import Stack, temporary_stack
from pipeline.realtime import StreamingVad, default_vad_path

__all__ = ["main", "run_session", "score"]

SR = 16000
FRAME_BYTES = 640
"""20 ms of 16 kHz s16le."""
NEW_PHRASE_GAP_S = 0.8
REFUSED = "a5sv2_unavailable: No recognizer can take the session now"
"""A session the worker refused (full, or behind): not a failure of the run's code."""


@dataclass
class Session:
    pcm: np.ndarray
    reference: str
    starts: list[float]
    ends: list[float]
    clips: tuple[str, ...] = ()
    """The programme's clips in order (eval paths), each an utterance of ``reference``."""
    messages: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    ready_s: float = 0.0
    max_send_lag: float = 0.0
    finish_s: float = 0.0
    text: str = ""
    finished: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    unsure_turns: int = 0
    """``/v3/ws`` only: ended turns whose ``end_of_turn_confidence`` was under the
    threshold, which wait ``max_turn_silence`` (1,280 ms) instead of ``min_turn_silence``."""


async def run_session(url: str, key: str, res: Session, delay: float) -> None:
    import websockets
    await asyncio.sleep(delay)
    t_connect = time.perf_counter()
    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {key}"},
                                  max_size=None) as ws:
        await ws.send(json.dumps({"type": "start"}))
        while True:
            msg = json.loads(await ws.recv())
            if msg["type"] == "ready":
                break
            if msg["type"] == "error":
                res.error = f"{msg['code']}: {msg['message']}"
                return
        res.ready_s = time.perf_counter() - t_connect
        t0 = time.perf_counter()
        done = asyncio.Event()
        t_finish = 0.0

        async def reader() -> None:
            try:
                async for raw in ws:
                    msg = json.loads(raw)
                    now = time.perf_counter() - t0
                    res.messages.append((now, msg))
                    if msg["type"] == "finished":
                        res.finished = msg
                        res.finish_s = now - t_finish
                    elif msg["type"] == "error":
                        res.error = f"{msg['code']}: {msg['message']}"
            except websockets.ConnectionClosed as exc:
                res.error = res.error or f"closed {exc.rcvd.code if exc.rcvd else '?'}"
            finally:
                done.set()

        task = asyncio.create_task(reader())
        t_finish = await send_paced(ws, res, t0, {"type": "finish"})
        await done.wait()
        await task
    texts = [m["text"] for _, m in res.messages if m["type"] == "transcript"]
    res.text = texts[-1] if texts else ""


async def send_paced(ws: Any, res: Session, t0: float, finish: dict[str, Any]) -> float:
    """``res``'s audio in 20 ms frames at real-time pace from ``t0``, then ``finish``; when
    ``finish`` went, s after ``t0`` (the session's end if the socket closed first)."""
    import websockets
    pcm = res.pcm.tobytes()
    # every sample, the last frame shorter: the offline runs see the whole file too
    n = -(-len(pcm) // FRAME_BYTES)
    t_finish = 0.0
    with contextlib.suppress(websockets.ConnectionClosed):
        for i in range(n):
            due = t0 + i * FRAME_BYTES / 2 / SR
            now = time.perf_counter()
            if now < due:
                await asyncio.sleep(due - now)
            res.max_send_lag = max(res.max_send_lag, time.perf_counter() - due)
            await ws.send(pcm[i * FRAME_BYTES:(i + 1) * FRAME_BYTES])
        await asyncio.sleep(max(0.0, t0 + len(pcm) / 2 / SR - time.perf_counter()))
        t_finish = time.perf_counter() - t0
        await ws.send(json.dumps(finish))
    return t_finish


def _words(text: str) -> int:
    return len(normalize(text).split())


def score(results: list[Session]) -> dict[str, float]:
    ok = [r for r in results if not r.error]
    refs = [normalize(r.reference) for r in ok]
    wer = jiwer.process_words(refs, [normalize(r.text) for r in ok]) if ok else None
    latencies, firsts = [], []
    for r in ok:
        end_of_audio = len(r.pcm) / SR
        transcripts = [(t, m) for t, m in r.messages if m["type"] == "transcript"]
        claimed: set[float] = set()
        for t, m in transcripts:
            if not m["is_final"] or t > end_of_audio:
                continue
            candidates = [e for e in r.ends if e < t]
            if candidates and candidates[-1] not in claimed:
                claimed.add(candidates[-1])
                latencies.append(t - candidates[-1])
        previous_end = -10.0
        for s in r.starts:
            gap = s - previous_end
            previous_end = next((e for e in r.ends if e > s), end_of_audio)
            if gap < NEW_PHRASE_GAP_S or s > end_of_audio:
                continue
            settled = ""
            for t, m in transcripts:
                if t >= s and _words(m["text"]) > _words(settled):
                    firsts.append(t - s)
                    break
                if m["is_final"]:
                    settled = m["text"]
    pct = lambda xs, q: float(np.percentile(xs, q)) if xs else float("nan")  # noqa: E731
    return {
        "_finals": latencies, "_firsts": firsts,
        "errors": len(results) - len(ok),
        "wer": wer.wer if wer else float("nan"), "sub": wer.substitutions if wer else 0,
        "del": wer.deletions if wer else 0, "ins": wer.insertions if wer else 0,
        "words": sum(len(x.split()) for x in refs),
        "final_median": pct(latencies, 50), "final_p95": pct(latencies, 95),
        "final_p99": pct(latencies, 99),
        "final_max": max(latencies, default=float("nan")), "finals": len(latencies),
        "first_median": pct(firsts, 50), "first_p95": pct(firsts, 95),
        "first_max": max(firsts, default=float("nan")), "firsts": len(firsts),
        "send_lag_max": max((r.max_send_lag for r in ok), default=float("nan")),
        "finish_max": max((r.finish_s for r in ok), default=float("nan")),
        "ready_max": max((r.ready_s for r in ok), default=float("nan")),
        "partials": sum(1 for r in ok for _, m in r.messages
                        if m["type"] == "transcript" and not m["is_final"]),
    }


def sessions_for(n: int, eval_dir: Path, vad: StreamingVad, clips: int) -> list[Session]:
    out = []
    for k in range(n):
        order = list(range(len(CLIPS)))
        order = (order[k * 4 % len(order):] + order[:k * 4 % len(order)])[:clips]
        pcm, ref = build_stream(eval_dir, order)
        starts, ends = phrase_marks(vad, pcm)
        out.append(Session(pcm, ref, starts, ends, tuple(CLIPS[i] for i in order)))
    return out


def clip_references(eval_dir: Path) -> dict[str, str]:
    """Each programme clip's reference (``manifest.json``)."""
    items = json.loads((eval_dir / "manifest.json").read_text())["items"]
    return {i["path"]: i["reference_text"] for i in items if i["path"] in CLIPS}


def batch_clips(http_url: str, key: str, eval_dir: Path) -> dict[str, str]:
    """Every programme clip transcribed once through the batch API: path -> text."""
    from bench.pipeline import run_service
    from ops.stack import EvalServer

    refs = clip_references(eval_dir)
    server = EvalServer(eval_dir)
    try:
        jobs, _ = run_service(http_url, [key], server.url,
                              [{"path": p, "duration": 0.0, "reference_text": refs[p]}
                               for p in CLIPS], 1800.0)
    finally:
        server.close()
    return {j.path: j.text for j in jobs}


def never_shown(results: list[Session], refs: dict[str, str],
                text: Callable[[Session], str] = lambda r: r.text) -> list[str]:
    """The programme clips none of whose words a session's ``text(session)`` matches, as
    ``clip (session k)``; sessions that failed are left out."""
    out = []
    for k, r in enumerate(results):
        if r.error:
            continue
        scores = score_utterances([refs[c] for c in r.clips], text(r))
        out += [f"{c} (session {k})" for c, sc in zip(r.clips, scores) if sc.never_shown]
    return out


async def _sample_lag(stack: Stack, into: list[float]) -> None:
    """The stack's ``a5s_live_final_lag_seconds`` every 2 s (its non-zero values): what its
    worker admits new sessions by."""
    import httpx
    async with httpx.AsyncClient() as client:
        while True:
            await asyncio.sleep(2.0)
            with contextlib.suppress(httpx.HTTPError):
                text = (await client.get(stack.url("/metrics"))).text
                into += [v for _, v in samples(text, "a5s_live_final_lag_seconds") if v > 0]


async def _warm(url: str, key: str) -> None:
    """One short session so model loading is not measured."""
    import websockets
    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        await ws.send(json.dumps({"type": "start"}))
        while json.loads(await ws.recv())["type"] != "ready":
            pass
        await ws.send(bytes(FRAME_BYTES))
        await ws.send(json.dumps({"type": "finish"}))
        async for _ in ws:
            pass


def _print_batch(runs: list[list[Session]], refs: dict[str, str], batch: dict[str, str]) -> None:
    """Each run's streaming WER beside the batch WER of the same clips in the same order, and
    the utterances the batch transcripts never show."""
    print(f"\n== batch API on the programme's {len(batch)} clips (after the runs)")
    for results in runs:
        ok = [r for r in results if not r.error]
        if not ok:
            continue
        joined = lambda r: " ".join(batch.get(c, "") for c in r.clips)  # noqa: E731
        refs_n = [normalize(r.reference) for r in ok]
        stream = jiwer.wer(refs_n, [normalize(r.text) or "<empty>" for r in ok])
        batched = jiwer.wer(refs_n, [normalize(joined(r)) or "<empty>" for r in ok])
        lost = never_shown(results, refs, joined)
        print(f"{len(results)} session(s): WER streaming {stream * 100:.2f}%, batch "
              f"{batched * 100:.2f}% (difference {(stream - batched) * 100:+.2f} points); "
              f"never shown by the batch transcripts: {len(lost)}"
              + "".join(f"\n  batch never shows: {name}" for name in lost))


# --- coverage: every dev item with a reference ------------------------------------------------

def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def _latencies(results: list[Session]) -> tuple[list[float], list[float]]:
    """Final latencies and first-partial times of ``results`` (``score``'s definitions)."""
    finals: list[float] = []
    firsts: list[float] = []
    for r in results:
        one = score([r])
        finals += one.get("_finals", [])
        firsts += one.get("_firsts", [])
    return finals, firsts


def run_coverage(url: str, http_url: str, keys: list[str], eval_dir: Path, prompts: int,
                 parallel: int, show: bool) -> int:
    """Stream then batch-transcribe every dev item; print the report. Returns the errors."""
    from bench.pipeline import run_service
    from ops.stack import EvalServer

    items = dev_items(eval_dir, prompts)
    vad = StreamingVad(default_vad_path())
    sessions: list[Session] = []
    for item in items:
        pcm = np.clip(load_pcm(eval_dir / item.path) * 32768, -32768, 32767).astype("<i2")
        starts, ends = phrase_marks(vad, pcm)
        sessions.append(Session(pcm, item.reference, starts, ends))
    audio_s = sum(len(r.pcm) for r in sessions) / SR
    load0 = os.getloadavg()
    t = time.perf_counter()

    async def stream_all() -> None:
        slots = [asyncio.Semaphore(5) for _ in keys]
        gate = asyncio.Semaphore(parallel)

        async def one(k: int, r: Session) -> None:
            async with gate, slots[k % len(keys)]:
                await run_session(url, keys[k % len(keys)], r, 0.0)

        await asyncio.gather(*(one(k, r) for k, r in enumerate(sessions)))

    asyncio.run(stream_all())
    wall, load1 = time.perf_counter() - t, os.getloadavg()
    server = EvalServer(eval_dir)
    try:
        jobs, _ = run_service(http_url, keys, server.url,
                              [{"path": i.path, "duration": i.duration,
                                "reference_text": i.reference} for i in items], 3600.0)
    finally:
        server.close()
    batch = {j.path: j.text for j in jobs}
    print(f"\n== coverage: {len(items)} items, {audio_s:.1f} s of audio streamed at real time, "
          f"{parallel} at a time over {len(keys)} account(s); wall {wall:.1f} s; load average "
          f"{' '.join(f'{x:.2f}' for x in load0)} -> {' '.join(f'{x:.2f}' for x in load1)} "
          f"on {os.cpu_count()} cores")
    print(f"{'item':48s} {'dur':>6s} {'utt':>4s} {'never':>5s} {'most':>4s} {'stream':>7s} "
          f"{'batch':>7s} {'fin50':>5s} {'fin95':>5s} {'1st50':>5s} {'1st95':>5s}  tail")
    refs, hyps, batch_hyps = [], [], []
    never = mostly = tails = errors = utterances = batch_never = 0
    for item, r in zip(items, sessions):
        scores = score_utterances(item.utterances, r.text)
        batch_scores = score_utterances(item.utterances, batch.get(item.path, ""))
        batch_never += sum(s.never_shown for s in batch_scores)
        n_never = sum(s.never_shown for s in scores)
        n_most = sum(s.mostly_lost for s in scores)
        tail = invented_tail(item.reference, r.text) if not r.error else ""
        ref = numbers_joined(item.reference)
        hyp, bhyp = numbers_joined(r.text), numbers_joined(batch.get(item.path, ""))
        refs.append(ref)
        hyps.append(hyp)
        batch_hyps.append(bhyp)
        finals, firsts = _latencies([r])
        utterances += len(scores)
        never, mostly, tails = never + n_never, mostly + n_most, tails + bool(tail)
        errors += bool(r.error)
        print(f"{item.path[-48:]:48s} {item.duration:6.1f} {len(scores):4d} {n_never:5d} "
              f"{n_most:4d} {jiwer.wer(ref, hyp or '<empty>') * 100:6.1f}% "
              f"{jiwer.wer(ref, bhyp or '<empty>') * 100:6.1f}% {_pct(finals, 50):5.2f} "
              f"{_pct(finals, 95):5.2f} {_pct(firsts, 50):5.2f} {_pct(firsts, 95):5.2f}  "
              f"{tail!r}" + (f"  ERROR {r.error}" if r.error else ""))
        for u, sc, bsc in zip(item.utterances, scores, batch_scores):
            if sc.mostly_lost:
                print(f"    {'never shown' if sc.never_shown else 'mostly lost'} "
                      f"({sc.matched}/{sc.words} words; batch {bsc.matched}/{bsc.words}): {u!r}")
        if show:
            print("    REF:", ref)
            print("    HYP:", hyp)
            print("    BAT:", bhyp)
    finals, firsts = _latencies(sessions)
    s_wer = jiwer.wer(refs, [h or "<empty>" for h in hyps])
    b_wer = jiwer.wer(refs, [h or "<empty>" for h in batch_hyps])
    conv = [k for k, i in enumerate(items) if i.group == "conversation"]
    print(f"pooled: {utterances} utterances, never shown {never} (batch: {batch_never}), "
          f"mostly lost {mostly}; items with an invented tail {tails}; session errors {errors}")
    print(f"pooled WER: streaming {s_wer * 100:.2f}%, batch {b_wer * 100:.2f}% "
          f"(difference {(s_wer - b_wer) * 100:+.2f} points); conversations only: streaming "
          f"{jiwer.wer([refs[k] for k in conv], [hyps[k] or '<empty>' for k in conv]) * 100:.2f}%,"
          f" batch {jiwer.wer([refs[k] for k in conv], [batch_hyps[k] or '<empty>' for k in conv]) * 100:.2f}%")
    print(f"final latency p50 {_pct(finals, 50):.3f} s, p95 {_pct(finals, 95):.3f} s, p99 "
          f"{_pct(finals, 99):.3f} s, max {max(finals, default=float('nan')):.2f} s over "
          f"{len(finals)} finals; first partial p50 {_pct(firsts, 50):.3f} s, p95 "
          f"{_pct(firsts, 95):.3f} s over {len(firsts)} phrases (load average above)")
    return errors


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, action="append",
                        help="concurrent sessions (repeatable; default 1 and 5)")
    parser.add_argument("--url", help="the service's ws(s)://host:port/v1/realtime "
                        "(default: start an embedded stack)")
    parser.add_argument("--key", help="API key for --url")
    parser.add_argument("--eval", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "eval")
    parser.add_argument("--clips", type=int, default=len(CLIPS),
                        help="clips per session (default all: about 99 s)")
    parser.add_argument("--show", action="store_true", help="print each session's transcript")
    parser.add_argument("--coverage", action="store_true",
                        help="stream every dev item with a reference instead (see above)")
    parser.add_argument("--prompts", type=int, default=20,
                        help="--coverage: Asterisk prompts in the even sample")
    parser.add_argument("--accounts", type=int, default=0,
                        help="accounts the sessions are spread over (default: five each)")
    parser.add_argument("--stagger", type=float, default=0.23,
                        help="seconds between session starts (default 0.23; a larger one "
                        "brings sessions in while others run, as a worker's admission sees them)")
    parser.add_argument("--v3", action="store_true",
                        help="stream each programme over /v3/ws too, at the same time")
    parser.add_argument("--v3-query", default="",
                        help="more /v3/ws parameters, e.g. end_of_turn_confidence_threshold=0 "
                             "(every turn ends after min_turn_silence)")
    parser.add_argument("--parallel", type=int, default=5,
                        help="--coverage: items streamed at once (five per account)")
    args = parser.parse_args(argv)
    print("command: python -m bench.realtime " + " ".join(argv if argv is not None
                                                                else sys.argv[1:]))
    with contextlib.ExitStack() as running:
        stack: Stack | None = None
        if args.url:
            url, key = args.url, args.key
        else:
            t = time.perf_counter()
            stack = running.enter_context(temporary_stack())
            url, key = stack.ws_url, stack.new_account()[1]
            print(f"embedded stack up in {time.perf_counter() - t:.1f} s ({stack.data_dir})")
        errors = _run(args, stack, url, key)
        if errors:  # raised inside the block: a temporary stack keeps its log
            raise SystemExit(f"{errors} session(s) ended with an error")


def _run(args: argparse.Namespace, stack: Stack | None, url: str, key: str) -> int:
    """Every run the arguments ask for; the number of sessions that failed."""
    errors = 0
    t = time.perf_counter()
    asyncio.run(_warm(url, key))
    print(f"warm-up session (models load on the first) {time.perf_counter() - t:.1f} s; "
          f"cores {os.cpu_count()}")
    if args.coverage:
        keys = [key] + ([stack.new_account()[1] for _ in range(1, -(-args.parallel // 5))]
                        if stack else [])
        http_url = stack.url("") if stack else \
            args.url.replace("ws", "http", 1).split("/v1/")[0]
        errors += run_coverage(url, http_url, keys, args.eval, args.prompts,
                               args.parallel if stack else min(args.parallel, 5), args.show)
        return errors
    from bench.v3_realtime import run_v3_session  # it imports this module
    vad = StreamingVad(default_vad_path())
    refs = clip_references(args.eval)
    done: list[list[Session]] = []
    runs = args.sessions or [1, 5]
    accounts = args.accounts or -(-max(runs) * (2 if args.v3 else 1) // 5)
    keys = [key] + ([stack.new_account()[1] for _ in range(1, accounts)] if stack else [])
    run_dir = stack.data_dir / "run" if stack else None
    kept: list[int] = []
    for n in runs:
        results = sessions_for(n, args.eval, vad, args.clips)
        v3 = [Session(r.pcm, r.reference, r.starts, r.ends) for r in results] if args.v3 else []
        load0 = os.getloadavg()[0]
        cpu0 = stack_cpu(run_dir) if run_dir else {}
        t = time.perf_counter()

        lags: list[float] = []

        async def all_sessions() -> None:
            sampler = asyncio.create_task(_sample_lag(stack, lags)) if stack else None
            await asyncio.gather(*(run_session(url, keys[k % len(keys)], r, args.stagger * k)
                                   for k, r in enumerate(results)),
                                 *(run_v3_session(url, keys[(n + k) % len(keys)], r,
                                                  args.stagger * k + args.stagger / 2,
                                                  args.v3_query)
                                   for k, r in enumerate(v3)))
            if sampler is not None:
                sampler.cancel()

        asyncio.run(all_sessions())
        wall, load1 = time.perf_counter() - t, os.getloadavg()[0]
        cpu1 = stack_cpu(run_dir) if run_dir else {}
        s = score(results)
        refused = sum(r.error.startswith(REFUSED) for r in results)
        errors += s["errors"] - refused
        audio_s = sum(len(r.pcm) for r in results) / SR
        print(f"\n== {n} session(s) through the service over {min(n, len(keys))} "
              f"account(s), {audio_s / n:.1f} s audio each, wall "
              f"{wall:.1f} s, load average {load0:.2f} -> {load1:.2f}, errors {s['errors']} "
              f"(of them refused by the worker: {refused})")
        if cpu1:
            used = sum(cpu1[k] - cpu0.get(k, cpu1[k]) for k in cpu1)
            print(f"CPU of the stack: {used:.1f} s for {audio_s:.0f} s of audio: "
                  f"{used / audio_s * 100:.1f}% of a core per live session "
                  f"({', '.join(f'{k} {cpu1[k] - cpu0.get(k, cpu1[k]):.1f} s' for k in cpu1)})")
            saved = run_dir.parent / "broker" / "kafka.json"
            if saved.is_file():  # the embedded broker writes its whole log there
                print(f"broker log on disk: {saved.stat().st_size / 1e6:.0f} MB")
        # Real time kept by the sessions taken: no error, the sender never held back, no
        # backlog at the end. A session the worker refused is the admission at work.
        keeps = (s["errors"] == refused and s["send_lag_max"] < 0.5 and s["finish_max"] < 3.0)
        if keeps:
            kept.append(n - refused)
        print(f"keeps real time: {'yes' if keeps else 'NO'} ({n - refused} session(s) taken; "
              f"errors {s['errors'] - refused}, max send "
              f"lag {s['send_lag_max']:.2f} s < 0.5, finished after finish "
              f"{s['finish_max']:.2f} s < 3.0)")
        for r in results:
            if r.error:
                print("  session error:", r.error)
        print(f"WER {s['wer'] * 100:.2f}% (S{s['sub']} D{s['del']} I{s['ins']} of "
              f"{s['words']} words)")
        print(f"final latency: p50 {s['final_median']:.3f} s, p95 {s['final_p95']:.3f} s, "
              f"p99 {s['final_p99']:.3f} s, max {s['final_max']:.2f} s over {s['finals']} "
              f"finals")
        lost = never_shown(results, refs)
        print(f"never shown: {len(lost)} of "
              f"{sum(len(r.clips) for r in results if not r.error)} utterances"
              + "".join(f"\n  never shown: {name}" for name in lost))
        done.append(results)
        print(f"first partial: median {s['first_median']:.3f} s, p95 {s['first_p95']:.3f} s, "
              f"max {s['first_max']:.2f} s over {s['firsts']} phrases")
        if lags:
            print(f"the worker's finals' lag (a5s_live_final_lag_seconds, every 2 s, {len(lags)} "
                  f"samples): median {_pct(lags, 50):.2f} s, p90 {_pct(lags, 90):.2f} s, "
                  f"max {max(lags):.2f} s")
        print(f"keep-up: max send lag {s['send_lag_max'] * 1000:.0f} ms, finished after "
              f"finish {s['finish_max']:.2f} s (max), ready after connect "
              f"{s['ready_max']:.2f} s (max), {s['partials']} partial messages")
        if v3:
            t3 = score(v3)
            errors += t3["errors"]
            print(f"/v3/ws, the same {n} programme(s) at the same time: errors {t3['errors']}, "
                  f"WER {t3['wer'] * 100:.2f}%, end-of-turn latency: median "
                  f"{t3['final_median']:.3f} s, p95 {t3['final_p95']:.3f} s, max "
                  f"{t3['final_max']:.2f} s over {t3['finals']} ended turns (a5s final latency "
                  f"median {s['final_median']:.3f} s, p95 {s['final_p95']:.3f} s); "
                  f"{sum(r.unsure_turns for r in v3)} ended turns waited max_turn_silence "
                  "(confidence under the threshold)")
            for r in v3:
                if r.error:
                    print("  v3 session error:", r.error)
        if args.show:
            for r in results:
                print("  REF:", normalize(r.reference))
                print("  HYP:", r.text)
    http_url = stack.url("") if stack else args.url.replace("ws", "http", 1).split("/v1/")[0]
    _print_batch(done, refs, batch_clips(http_url, key, args.eval))
    print(f"\nlargest number of sessions that kept real time: "
          f"{max(kept) if kept else 'none'} (of {runs}; load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})")
    return errors


if __name__ == "__main__":
    main()
