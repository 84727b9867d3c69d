"""Streaming benchmark: WER, final latency, first-partial time and keep-up of the realtime engine.

``python -m bench.streaming [--sessions N ...] [--final-model tiny|base] [--set path=value ...]``

Each session streams ~95 s of real speech (LibriVox, JFK, TIMIT, LJ Speech, speechbrain,
Asterisk prompts; 1 s pauses between clips, each session in a different order) in 20 ms
frames at real-time pace through one :class:`~pipeline.realtime.RealtimeEngine`; N
sessions run concurrently on one event loop, starting up to 1 s apart.

Definitions:

* **WER**: over the closing transcript of each session against the clip references,
  lowercased, punctuation removed, pooled over sessions.
* **Phrase end / start**: Silero VAD run offline over the clean session audio, in the same
  32 ms windows: a phrase ends at the start of the first window whose speech probability
  falls below 0.35 after a window at or above 0.5, and starts at the start of a window
  at or above 0.5 after silence. This is when speech stops or starts as any VAD-based
  endpointer sees it, so it does not credit the end-silence wait.
* **Final latency**: for each ``is_final`` update, the time it was returned to the client
  minus the last phrase end inside its segment (segments settled by ``finish`` excluded).
* **First partial**: for each segment, time of the first update carrying its text minus
  the first phrase start inside it.
* **Keep-up**: how late the sender fell behind its real-time schedule (max), and how long
  ``finish`` took after the last frame (the decode backlog left at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import re
import resource
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import jiwer
import numpy as np

from pipeline.audio import decode_to_pcm
from pipeline.realtime import (EngineOptions, ModelOptions, RealtimeEngine, StreamingModels,
                               StreamingVad, Update, default_vad_path)
from pipeline.realtime.vad import VAD_WINDOW

__all__ = ["main", "CLIPS", "normalize", "build_stream"]

SR = 16000
FRAME = 320
"""Samples per 20 ms frame."""

CLIPS = [
    "real/pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0870.wav",
    "real/pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0880.wav",
    "real/pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0890.wav",
    "real/pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0920.wav",
    "real/pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0930.wav",
    "real/whisper/jfk.flac",
    "real/deepspeech/LDC93S1.wav",
    "real/speechbrain/LJ050-0131.wav",
    "real/speechbrain/spk1_snt1.wav",
    "real/speechbrain/spk1_snt3.wav",
    "real/speechbrain/spk1_snt4.wav",
    "real/speechbrain/spk1_snt5.wav",
    "real/speechbrain/spk2_snt2.wav",
    "real/speechbrain/spk2_snt4.wav",
    "real/pocketsphinx/forever_input_2_16k.wav",
    "real/asterisk_16k/agent-incorrect.wav",
    "real/asterisk_16k/agent-pass.wav",
    "real/asterisk_16k/agent-newlocation.wav",
    "real/asterisk_16k/at-tone-time-exactly.wav",
]
"""Clips under the eval root (references from ``manifest.json``; none has digits)."""

GAP_S = 1.0


def normalize(text: str) -> str:
    """Lowercase, no punctuation, ``mr`` spelled out (the LibriVox reference does)."""
    text = text.lower().replace("-", " ")
    text = re.sub(r"[^a-z0-9' ]", " ", text)
    text = re.sub(r"\bmr\b", "mister", text)
    return " ".join(text.split())


def load_pcm(path: Path) -> np.ndarray:
    """A file decoded the way the service decodes uploads, as float32."""
    out = io.BytesIO()
    decode_to_pcm(path, out)
    return np.frombuffer(out.getvalue(), dtype="<i2").astype(np.float32) / 32768


def build_stream(eval_dir: Path, order: list[int]) -> tuple[np.ndarray, str]:
    """The session audio (int16) and its reference, clips in ``order`` with pauses."""
    import json

    manifest = {i["path"]: i for i in json.loads((eval_dir / "manifest.json").read_text())["items"]}
    rng = np.random.default_rng(0)
    parts, refs = [], []
    for idx in order:
        path = CLIPS[idx]
        parts.append(load_pcm(eval_dir / path))
        # A faint noise floor in the pauses: real microphones never send digital zeros.
        parts.append(rng.normal(0, 3e-4, int(GAP_S * SR)).astype(np.float32))
        refs.append(manifest[path]["reference_text"])
    audio = np.concatenate([rng.normal(0, 3e-4, int(0.5 * SR)).astype(np.float32)] + parts)
    pcm = np.clip(audio * 32768, -32768, 32767).astype("<i2")
    return pcm, " ".join(refs)


def phrase_marks(vad: StreamingVad, pcm: np.ndarray) -> tuple[list[float], list[float]]:
    """Phrase starts and ends, s (see the module docstring)."""
    probs = vad.stream().accept(pcm.astype(np.float32) / 32768)
    starts, ends, speaking = [], [], False
    for i, p in enumerate(probs):
        t = i * VAD_WINDOW / SR
        if p >= 0.5 and not speaking:
            speaking = True
            starts.append(t)
        elif p < 0.35 and speaking:
            speaking = False
            ends.append(t)
    return starts, ends


@dataclass
class SessionResult:
    pcm: np.ndarray
    reference: str
    starts: list[float]
    ends: list[float]
    updates: list[tuple[float, Update]] = field(default_factory=list)   # (stream time, update)
    finish_updates: list[Update] = field(default_factory=list)
    max_send_lag: float = 0.0
    finish_s: float = 0.0
    text: str = ""


async def run_session(engine: RealtimeEngine, sid: str, res: SessionResult, delay: float) -> None:
    await asyncio.sleep(delay)
    engine.open(sid)
    pcm = res.pcm.tobytes()
    t0 = time.perf_counter()
    n = len(res.pcm) // FRAME
    for i in range(n):
        due = t0 + i * FRAME / SR
        now = time.perf_counter()
        if now < due:
            await asyncio.sleep(due - now)
        res.max_send_lag = max(res.max_send_lag, time.perf_counter() - due)
        chunk = pcm[i * FRAME * 2:(i + 1) * FRAME * 2]
        for u in await engine.accept(sid, chunk):
            res.updates.append((time.perf_counter() - t0, u))
    # The last frame's audio is complete one frame after it was due.
    end_due = t0 + n * FRAME / SR
    await asyncio.sleep(max(0.0, end_due - time.perf_counter()))
    t_end = time.perf_counter()
    res.finish_updates = await engine.finish(sid)
    res.finish_s = time.perf_counter() - t_end
    res.text = res.finish_updates[-1].text
    engine.close(sid)


def score(results: list[SessionResult]) -> dict[str, float]:
    refs = [normalize(r.reference) for r in results]
    hyps = [normalize(r.text) for r in results]
    wer = jiwer.process_words(refs, hyps)
    latencies, firsts = [], []
    for r in results:
        seen: set[int] = set()
        for t, u in r.updates:
            if u.segment not in seen and u.text:
                seen.add(u.segment)
                onset = [s for s in r.starts if u.start - 0.01 <= s <= u.end]
                if onset:
                    firsts.append(t - onset[0])
            if u.is_final:
                inside = [e for e in r.ends if u.start < e <= u.end + 0.01]
                if inside:
                    latencies.append(t - inside[-1])
    pct = lambda xs, q: float(np.percentile(xs, q)) if xs else float("nan")  # noqa: E731
    return {
        "wer": wer.wer, "sub": wer.substitutions, "del": wer.deletions, "ins": wer.insertions,
        "words": sum(len(x.split()) for x in refs),
        "final_median": pct(latencies, 50), "final_p95": pct(latencies, 95),
        "final_max": max(latencies, default=float("nan")),
        "finals": len(latencies),
        "first_median": pct(firsts, 50), "first_p95": pct(firsts, 95),
        "first_max": max(firsts, default=float("nan")),
        "send_lag_max": max(r.max_send_lag for r in results),
        "finish_max": max(r.finish_s for r in results),
        "partials": sum(1 for r in results for _, u in r.updates if not u.is_final),
    }


async def run(models: StreamingModels, options: EngineOptions, sessions: int, eval_dir: Path,
              vad: StreamingVad) -> tuple[dict[str, float], list[SessionResult], float, float]:
    results = []
    for k in range(sessions):
        order = list(range(len(CLIPS)))
        order = order[k * 4 % len(order):] + order[:k * 4 % len(order)]
        pcm, ref = build_stream(eval_dir, order)
        starts, ends = phrase_marks(vad, pcm)
        results.append(SessionResult(pcm, ref, starts, ends))
    engine = RealtimeEngine(models, options.model_copy(update={"max_sessions": max(sessions, 1)}))
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(run_session(engine, f"s{k}", r, 0.23 * k) for k, r in enumerate(results)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    await engine.aclose()
    audio_s = sum(len(r.pcm) for r in results) / SR
    return score(results), results, cpu / audio_s, wall


def _parse_sets(items: list[str]) -> dict:
    """``a.b=c`` pairs into nested dicts for pydantic."""
    out: dict = {}
    for item in items:
        key, _, value = item.partition("=")
        node = out
        *path, leaf = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, action="append",
                        help="concurrent sessions (repeatable; default 1 and 5)")
    parser.add_argument("--eval", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "eval")
    parser.add_argument("--final-model", choices=["tiny", "base"], default="tiny")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "a5s-models")
    parser.add_argument("--threads", type=int, default=1, help="CTranslate2 threads per decode")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                        help="EngineOptions override, e.g. recognizer.vad.min_silence_ms=250")
    parser.add_argument("--show", action="store_true", help="print each session's transcript")
    args = parser.parse_args(argv)
    options = EngineOptions(**_parse_sets(args.set))
    t = time.perf_counter()
    models = StreamingModels.from_specs(
        args.cache, "tiny.en", "base" if args.final_model == "base" else None,
        ModelOptions(cpu_threads=args.threads, num_workers=options.decode_workers))
    print(f"models loaded in {time.perf_counter() - t:.1f} s; final model {args.final_model}; "
          f"cores {os.cpu_count()}; options {options.model_dump()}")
    vad = StreamingVad(default_vad_path())
    for n in args.sessions or [1, 5]:
        load0 = os.getloadavg()[0]
        s, results, cpu_rtf, wall = asyncio.run(run(models, options, n, args.eval, vad))
        load1 = os.getloadavg()[0]
        print(f"\n== {n} session(s), {sum(len(r.pcm) for r in results) / SR / n:.1f} s audio each, "
              f"wall {wall:.1f} s, load average {load0:.2f} -> {load1:.2f}")
        print(f"WER {s['wer'] * 100:.2f}% (S{s['sub']} D{s['del']} I{s['ins']} of {s['words']} words)")
        print(f"final latency: median {s['final_median']:.2f} s, p95 {s['final_p95']:.2f} s, "
              f"max {s['final_max']:.2f} s over {s['finals']} finals")
        print(f"first partial: median {s['first_median']:.2f} s, p95 {s['first_p95']:.2f} s, "
              f"max {s['first_max']:.2f} s")
        print(f"keep-up: max send lag {s['send_lag_max'] * 1000:.0f} ms, finish after last frame "
              f"{s['finish_max']:.2f} s (max), CPU {cpu_rtf:.2f} s per audio s per session, "
              f"{s['partials']} partial updates")
        if args.show:
            for r in results:
                print("  REF:", normalize(r.reference))
                print("  HYP:", r.text)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
