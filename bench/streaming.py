"""Streaming benchmark: WER, final latency, first-partial time and keep-up of the realtime engine.

``python -m bench.streaming [--sessions N ...] [--final-model tiny|base] [--set path=value ...]``
``python -m bench.streaming --offline [--sessions N] [--coverage] [--set path=value ...]``

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
* **Decodes**: the engine's decode batches by purpose (partial; final with speculative
  final), their inputs and wall time each: how much decoding partials took, and how long
  a final's decode ran beside the rest of the work.

``--offline`` measures what does not depend on the machine's load: each programme goes through
a :class:`~pipeline.realtime.SessionRecognizer` as fast as it decodes, every final and
speculative decode is timed in CPU seconds, and the final latency is what those costs imply
on an idle core (the segment's close, or its speculative decode's start plus its cost, minus
the phrase end; no transport, no partials). ``--offline --coverage`` gives the WER and lost
utterances of the dev items of ``bench.realtime --coverage`` the same way, in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import re
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import jiwer
import numpy as np

from pipeline.audio import decode_to_pcm
from pipeline.realtime import (EngineOptions, ModelOptions, RealtimeEngine, SessionRecognizer,
                               StreamingModels, StreamingVad, Update, default_vad_path)
from pipeline.realtime.recognizer import DecodeKind
from pipeline.realtime.vad import VAD_WINDOW
from stores.process import single_threaded_blas

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


@dataclass
class DecodeLog:
    """Decodes of a real-time run by purpose: batches, inputs, wall seconds (each)."""

    batches: dict[str, int] = field(default_factory=dict)
    inputs: dict[str, int] = field(default_factory=dict)
    walls: dict[str, list[float]] = field(default_factory=dict)
    spans: list[tuple[str, float, float]] = field(default_factory=list)   # (kind, start, end)

    def beside_partials(self) -> float:
        """Share of the finals' decode time during which a partial decode ran too."""
        partials = [(a, b) for k, a, b in self.spans if k == "partial"]
        both = total = 0.0
        for kind, a, b in self.spans:
            if kind.startswith("final"):
                total += b - a
                both += sum(max(0.0, min(b, d) - max(a, c)) for c, d in partials)
        return both / total if total else 0.0

    def line(self) -> str:
        parts = []
        for kind in sorted(self.batches):
            w = self.walls[kind]
            parts.append(f"{kind} {self.batches[kind]} batches / {self.inputs[kind]} inputs, wall "
                         f"p50 {np.percentile(w, 50) * 1000:.0f} / p95 {np.percentile(w, 95) * 1000:.0f}"
                         f" ms, {sum(w):.1f} s in all")
        return (f"decodes: {'; '.join(parts)}; a partial decode ran during "
                f"{self.beside_partials() * 100:.0f}% of the finals' decode time")


class _LoggedEngine(RealtimeEngine):
    """The engine, logging every decode batch (the purpose told by its options)."""

    def __init__(self, models: StreamingModels, options: EngineOptions, log: DecodeLog) -> None:
        super().__init__(models, options)
        partial = options.recognizer.partial_decode
        beam = options.recognizer.decode.beam_size

        def decode(decoder, inputs, opts):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            out, elapsed = RealtimeEngine._decode(decoder, inputs, opts)
            kind = ("partial" if opts == partial
                    else "final" if opts.beam_size == beam else "final-narrowed")
            log.batches[kind] = log.batches.get(kind, 0) + 1
            log.inputs[kind] = log.inputs.get(kind, 0) + len(inputs)
            log.walls.setdefault(kind, []).append(elapsed)
            log.spans.append((kind, t0, time.perf_counter()))
            return out, elapsed

        self._decode = decode  # type: ignore[method-assign]


async def run(models: StreamingModels, options: EngineOptions, sessions: int, eval_dir: Path,
              vad: StreamingVad, log: DecodeLog | None = None
              ) -> tuple[dict[str, float], list[SessionResult], float, float]:
    results = []
    for k in range(sessions):
        order = list(range(len(CLIPS)))
        order = order[k * 4 % len(order):] + order[:k * 4 % len(order)]
        pcm, ref = build_stream(eval_dir, order)
        starts, ends = phrase_marks(vad, pcm)
        results.append(SessionResult(pcm, ref, starts, ends))
    options = options.model_copy(update={"max_sessions": max(sessions, 1)})
    engine = _LoggedEngine(models, options, log) if log is not None else RealtimeEngine(models, options)
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(run_session(engine, f"s{k}", r, 0.23 * k) for k, r in enumerate(results)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    await engine.aclose()
    audio_s = sum(len(r.pcm) for r in results) / SR
    return score(results), results, cpu / audio_s, wall


# --- offline: decode cost and the latency it implies, independent of the machine's load --------

@dataclass
class OfflineFinal:
    """One settled segment of an offline run (times on the audio clock, s)."""

    phrase_end: float
    closed: float
    settled: float
    decode_s: float
    speculative: bool


def run_offline(models: StreamingModels, options: EngineOptions, eval_dir: Path,
                vad: StreamingVad, sessions: int
                ) -> tuple[list[OfflineFinal], float, float, str, str]:
    """Each session's programme through a :class:`SessionRecognizer`, decodes inline and timed.

    A decode is taken when the recognizer asks for it (frame by frame, as the engine would)
    and, on an idle core, would be ready ``decode_s`` of audio later; a final is therefore
    settled at ``max(segment closed, speculative decode asked + its decode time)``, or at
    ``closed + decode_s`` when the final had to be decoded after the close. Partials are not
    decoded (they only compete for CPU, which this mode leaves out on purpose).

    Returns:
        the finals, the final-model CPU seconds spent (speculative decodes included), the
        CPU seconds of speculative decodes whose result was discarded, and the joined
        references and transcripts.
    """
    out: list[OfflineFinal] = []
    decode_cpu = wasted = 0.0
    refs, hyps = [], []
    for k in range(sessions):
        order = list(range(len(CLIPS)))
        order = order[k * 4 % len(order):] + order[:k * 4 % len(order)]
        pcm, ref = build_stream(eval_dir, order)
        _, ends = phrase_marks(vad, pcm)
        rec = SessionRecognizer(models, (), options.recognizer)
        asked: dict[tuple[int, int], tuple[float, float]] = {}   # range -> (asked at, decode s)
        used: set[tuple[int, int]] = set()
        raw = pcm.tobytes()
        text = ""
        for i in range(0, len(raw), FRAME * 2):
            now = min(len(raw), i + FRAME * 2) / 2 / SR
            samples, probs = rec.detect(raw[i:i + FRAME * 2])
            updates = rec.advance(samples, probs)
            while True:
                req = rec.take_final() or rec.take_prefinal()
                if req is None:
                    break
                t = time.process_time()
                decoded = req.decoder.decode([req.input], rec.decode_options(req.kind))[0]
                cost = time.process_time() - t
                decode_cpu += cost
                asked[(req.start, req.end)] = (now, cost)
                if req.kind is DecodeKind.FINAL:
                    used.add((req.start, req.end))
                updates += rec.complete(req, decoded)
            for u in updates:
                text = u.text
                if not u.is_final:
                    continue
                key = (round(u.start * SR), round(u.end * SR))
                if key not in asked:    # settled on an early speculative decode of the segment
                    key = max((k for k in asked if k[0] == key[0] and k[1] <= key[1]), default=key)
                at, cost = asked.get(key, (now, 0.0))
                used.add(key)
                inside = [e for e in ends if u.start < e <= u.end + 0.01]
                if inside:
                    out.append(OfflineFinal(inside[-1], now, max(now, at + cost), cost, at < now))
        for u in rec.finish():
            text = u.text
        wasted += sum(c for key, (_, c) in asked.items() if key not in used)
        refs.append(normalize(ref))
        hyps.append(normalize(text))
    return out, decode_cpu, wasted, " ".join(refs), " ".join(hyps)


def offline_report(models: StreamingModels, options: EngineOptions, eval_dir: Path,
                   vad: StreamingVad, sessions: int) -> None:
    load0 = os.getloadavg()
    t = time.perf_counter()
    finals, cpu, wasted, ref, hyp = run_offline(models, options, eval_dir, vad, sessions)
    wall = time.perf_counter() - t
    pct = lambda xs, q: float(np.percentile(xs, q)) if xs else float("nan")  # noqa: E731
    closed = [f.closed - f.phrase_end for f in finals]
    settled = [f.settled - f.phrase_end for f in finals]
    costs = [f.decode_s for f in finals]
    audio_s = sessions * len(build_stream(eval_dir, list(range(len(CLIPS))))[0]) / SR
    wer = jiwer.process_words(ref, hyp)
    print(f"\n== offline, {sessions} programme(s), {audio_s:.0f} s audio, wall {wall:.1f} s, "
          f"load average {' '.join(f'{x:.2f}' for x in load0)} -> "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"WER {wer.wer * 100:.2f}% (S{wer.substitutions} D{wer.deletions} I{wer.insertions})")
    print(f"{len(finals)} finals, {sum(f.speculative for f in finals)} settled on the speculative "
          f"decode; segment closed after phrase end p50 {pct(closed, 50):.3f} s, p95 "
          f"{pct(closed, 95):.3f} s")
    print(f"decode CPU per final p50 {pct(costs, 50) * 1000:.0f} ms, "
          f"p95 {pct(costs, 95) * 1000:.0f} ms; "
          f"final-model CPU {cpu / audio_s * 100:.1f}% of a core per live session, of which "
          f"discarded speculative decodes {wasted / audio_s * 100:.1f}%")
    print(f"engine final latency on an idle core (no transport, no partials): p50 "
          f"{pct(settled, 50):.3f} s, p95 {pct(settled, 95):.3f} s")


def offline_coverage(models: StreamingModels, options: EngineOptions, eval_dir: Path,
                     prompts: int, show: bool) -> None:
    """The dev items of ``bench.realtime --coverage`` through a :class:`SessionRecognizer`
    inline (finals only, no pace): the streaming transcript's WER and lost utterances without
    a service, in a fraction of real time. The batch WER of the same files is the service
    benchmark's (``python -m bench.realtime --coverage``)."""
    from evaluation.text import numbers_joined
    from evaluation.coverage import dev_items, score_utterances

    load0 = os.getloadavg()
    t, cpu0 = time.perf_counter(), time.process_time()
    refs, hyps, groups = [], [], []
    never = utterances = 0
    lost: list[str] = []
    audio_s = 0.0
    for item in dev_items(eval_dir, prompts):
        pcm = np.clip(load_pcm(eval_dir / item.path) * 32768, -32768, 32767).astype("<i2").tobytes()
        audio_s += len(pcm) / 2 / SR
        rec = SessionRecognizer(models, (), options.recognizer)
        for i in range(0, len(pcm), FRAME * 2):
            samples, probs = rec.detect(pcm[i:i + FRAME * 2])
            rec.advance(samples, probs)
            _finals_inline(rec)
        text = rec.finish()[-1].text
        scores = score_utterances(item.utterances, text)
        never += sum(s.never_shown for s in scores)
        lost += [f"{item.path}: {u!r} -> {text!r}" if len(item.utterances) == 1 else
                 f"{item.path}: {u!r}" for u, s in zip(item.utterances, scores) if s.never_shown]
        utterances += len(scores)
        refs.append(numbers_joined(item.reference))
        hyps.append(numbers_joined(text) or "<empty>")
        groups.append(item.group)
        if show:
            print(f"{item.path}: {jiwer.wer(refs[-1], hyps[-1]) * 100:.1f}%\n  REF: {refs[-1]}\n"
                  f"  HYP: {hyps[-1]}")
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t
    conv = [k for k, g in enumerate(groups) if g == "conversation"]
    print(f"\n== offline coverage: {len(refs)} items, {audio_s:.0f} s audio, wall {wall:.1f} s, "
          f"CPU {cpu / audio_s * 100:.1f}% of a core per second of audio, load average "
          f"{' '.join(f'{x:.2f}' for x in load0)} -> "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"WER pooled {jiwer.wer(refs, hyps) * 100:.2f}%, conversations "
          f"{jiwer.wer([refs[k] for k in conv], [hyps[k] for k in conv]) * 100:.2f}%; "
          f"utterances never shown {never} of {utterances}")
    for line in lost:
        print(f"  never shown: {line}")


def _finals_inline(rec: SessionRecognizer) -> None:
    while (req := rec.take_final() or rec.take_prefinal()) is not None:
        rec.complete(req, req.decoder.decode([req.input], rec.decode_options(req.kind))[0])


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
    single_threaded_blas()  # as in the service's processes
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
    parser.add_argument("--offline", action="store_true", help=(
        "no real-time pace: decode each programme inline, timing every final decode, and print "
        "the decode cost and the final latency it implies on an idle core (load-independent)"))
    parser.add_argument("--coverage", action="store_true", help=(
        "with --offline: the dev items of `bench.realtime --coverage` instead, for WER"))
    parser.add_argument("--prompts", type=int, default=20, help="--coverage: Asterisk prompts")
    args = parser.parse_args(argv)
    options = EngineOptions(**_parse_sets(args.set))
    t = time.perf_counter()
    models = StreamingModels.from_specs(
        args.cache, "tiny.en", "base" if args.final_model == "base" else None,
        ModelOptions(cpu_threads=args.threads, num_workers=options.decode_workers))
    print(f"models loaded in {time.perf_counter() - t:.1f} s; final model {args.final_model}; "
          f"cores {os.cpu_count()}; options {options.model_dump()}")
    vad = StreamingVad(default_vad_path())
    print("command: python -m bench.streaming " + " ".join(argv if argv is not None
                                                                 else sys.argv[1:]))
    if args.offline and args.coverage:
        offline_coverage(models, options, args.eval, args.prompts, args.show)
        return
    if args.offline:
        for n in args.sessions or [1]:
            offline_report(models, options, args.eval, vad, n)
        return
    for n in args.sessions or [1, 5]:
        load0 = os.getloadavg()[0]
        log = DecodeLog()
        s, results, cpu_rtf, wall = asyncio.run(run(models, options, n, args.eval, vad, log))
        load1 = os.getloadavg()[0]
        print(f"\n== {n} session(s), {sum(len(r.pcm) for r in results) / SR / n:.1f} s audio each, "
              f"wall {wall:.1f} s, load average {load0:.2f} -> {load1:.2f}")
        print(f"WER {s['wer'] * 100:.2f}% (S{s['sub']} D{s['del']} I{s['ins']} of {s['words']} words)")
        print(f"final latency: median {s['final_median']:.2f} s, p95 {s['final_p95']:.2f} s, "
              f"max {s['final_max']:.2f} s over {s['finals']} finals")
        print(f"first partial: median {s['first_median']:.2f} s, p95 {s['first_p95']:.2f} s, "
              f"max {s['first_max']:.2f} s")
        print(f"keep-up: max send lag {s['send_lag_max'] * 1000:.0f} ms, finish after last frame "
              f"{s['finish_max']:.2f} s (max), CPU {cpu_rtf:.3f} s per audio s per session, "
              f"{s['partials']} partial updates")
        print(log.line())
        if args.show:
            for r in results:
                print("  REF:", normalize(r.reference))
                print("  HYP:", r.text)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
