"""Diarization benchmark: DER, speaker counts and real-time factor on the shared eval set.

``python -m bench.diarization [--eval DIR] [--set field=value ...] [--long SECONDS ...]``

DER is frame-based at 10 ms with no collar and overlapped speech scored:
(missed + false alarm + confusion) / reference speech, where the hypothesis speakers
are mapped one-to-one onto reference speakers to maximise agreement (Hungarian
assignment). Overall DER pools the frames of all files. RTF is wall time over audio
duration on this machine; VAD (Silero, ONNX) is reported separately from diarization.

Each item goes through what the service runs: decoded to the service's 16 kHz PCM file
(``decode_to_pcm``), speech found by the service's VAD (``speech_regions`` with the
default ``VadOptions``, 300 ms padding) and diarized through the same memory map.

``--long SECONDS`` builds recordings of that length by cycling the scored items with
their reference turns (a voice that returns keeps its label: the synthetic items' voice
names, AMI's speaker ids), writes them as the service's 16 kHz PCM, finds speech with the
service's VAD and diarizes through the same memory map the service uses; it prints DER,
the speaker count against the truth, RTF and the peak resident memory while diarizing.
"""

from __future__ import annotations

import argparse
import copy
import os
import pickle
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from evaluation.diarization import (SCORED, build_conversation, build_long, der_counts, read_rttm,
                                   source_of, unmatched_voices, voice_frames)
from pipeline.audio import decode_to_pcm
from pipeline.diarization import DiarizationOptions, Diarizer, SpeakerEmbedder
from pipeline.engines import PcmSamples
from pipeline.types import SAMPLE_RATE, Region, SpeakerTurn
from pipeline.vad import SileroVad, VadOptions, speech_regions

__all__ = ["main"]

SINGLE = [
    "real/whisper/jfk.flac",
    "real/pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0870.wav",
    "real/asterisk_16k/demo-congrats.wav", "real/asterisk_16k/priv-callee-options.wav",
    "real/asterisk_16k/basic-pbx-ivr-main.wav", "real/speechbrain/LJ050-0131.wav",
    "real/pocketsphinx/goforward.wav",
]


def _parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key] = value
    return out


class _PeakRss:
    """Samples this process' resident memory every 20 ms while running."""

    def __init__(self) -> None:
        self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> "_PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


class Prepared:
    """One file segmented and embedded once (the models' work), then clustered and turned
    into turns under as many option sets as asked: the clustering and turn options (not
    ``step``, ``pad``, ``join_gap``, the embedding or piece options) vary at little cost."""

    def __init__(self, diarizer: Diarizer, samples: PcmSamples, speech: list[Region]) -> None:
        from pipeline.diarization.diarizer import _edges, _merge
        opts = diarizer.options
        self.duration = len(samples) / SAMPLE_RATE
        self.pieces = _merge(speech, self.duration)
        self.fixed: list | None = None
        if sum(p.duration for p in self.pieces) < 2 * opts.min_speaker:
            self.fixed = diarizer.diarize(samples, speech)  # the short path: no clustering
            return
        self.stretches = _merge(self.pieces, self.duration, pad=opts.pad, gap=opts.join_gap)
        self.chunks = diarizer._segment(samples, self.stretches)  # noqa: SLF001
        self.chunks.pauses = _edges(speech, self.duration)
        self.emb, self.owners, self.weights = diarizer._embed(samples, self.chunks)  # noqa: SLF001

    def turns(self, diarizer: Diarizer, opts: DiarizationOptions | None = None,
              speakers: int | None = None) -> list:
        from pipeline.diarization.diarizer import _trim_heap, _widen
        if self.fixed is not None:
            return self.fixed
        kept = diarizer._opts  # noqa: SLF001 - the bench varies the stage's own options
        diarizer._opts = opts or kept  # noqa: SLF001
        try:
            chunks = copy.deepcopy(self.chunks)
            diarizer._assign(chunks, self.emb, self.owners, self.weights,  # noqa: SLF001
                             sum(p.duration for p in self.pieces), speakers)
            return diarizer._turns(chunks, self.stretches,  # noqa: SLF001
                                   _widen(self.pieces, self.duration,
                                          diarizer.options.speech_margin))
        finally:
            diarizer._opts = kept  # noqa: SLF001
            _trim_heap()


def _der(c: dict[str, float]) -> str:
    ref = c["ref"] or 1.0
    return (f"DER {(c['miss'] + c['fa'] + c['conf']) / ref * 100:5.1f}% (miss"
            f" {c['miss'] / ref * 100:.1f}%, fa {c['fa'] / ref * 100:.1f}%, conf"
            f" {c['conf'] / ref * 100:.1f}%)")


def run_long(diarizer: Diarizer, eval_dir: Path, seconds: float, cycled: bool = False,
             scored: list | None = None) -> None:
    """Build, diarize and score one many-voice conversation (or, ``cycled``, the scored items
    cycled) of ``seconds``; with ``scored``, keep (name, prepared file, reference) there for
    the sweeps."""
    with tempfile.TemporaryDirectory() as tmp:
        pcm = Path(tmp) / "long.pcm"
        ref = (build_long if cycled else build_conversation)(eval_dir, seconds, pcm)
        t0 = time.perf_counter()
        speech = speech_regions(pcm, VadOptions(), SileroVad())
        t1 = time.perf_counter()
        with PcmSamples(pcm) as samples, _PeakRss() as rss:
            duration = len(samples) / SAMPLE_RATE
            before = _PeakRss.now()
            cpu = time.process_time()
            prepared = Prepared(diarizer, samples, speech)
            turns = prepared.turns(diarizer)
            cpu = time.process_time() - cpu
        t2 = time.perf_counter()
    name = f"{'cycled' if cycled else 'long'} {seconds:.0f} s"
    if scored is not None:
        scored.append((name, prepared, ref))
    truth = len({s for s, _, _ in ref})
    found = len({t.speaker for t in turns})
    print(f"{name}: {_der(der_counts(ref, turns, duration))} speakers {found} (truth {truth});"
          f" RTF diarization {(t2 - t1) / duration:.4f} (CPU {cpu / duration:.4f}),"
          f" VAD {(t1 - t0) / duration:.4f}; peak RSS while diarizing {rss.peak / 2**20:.0f} MiB"
          f" ({(rss.peak - before) / 2**20:+.0f} MiB over the loaded models); {_load()}",
          flush=True)
    speech_s: dict[str, float] = {}
    for spk, s, e in ref:
        speech_s[spk] = speech_s.get(spk, 0.0) + e - s
    lost = unmatched_voices(ref, turns, duration)
    print("  voices without a speaker of their own: "
          + (", ".join(f"{v} ({speech_s[v]:.0f} s)" for v in lost) or "none"), flush=True)


def run_sweep(diarizer: Diarizer, scored: list, field: str, values: list[str]) -> None:
    """Every scored file at each value of one option (the models' work done once), then
    leave-one-source-out: for each eval source, the value with the lowest DER over the
    frames where only the other sources' voices speak, and the DER it gives over the frames
    where the held-out source's voices speak, beside the default's."""
    base = diarizer.options
    default = str(getattr(base, field))
    values = values if default in values else [*values, default]
    results = {}
    print(f"sweep {field}: " + ", ".join(values))
    for value in values:
        opts = base.model_copy(update={field: type(getattr(base, field))(value)})
        out = []
        singles = []
        for name, prepared, ref in scored:
            turns = prepared.turns(diarizer, opts)
            out.append((turns, prepared.duration))
            found = len({t.speaker for t in turns})
            if ref is None:
                singles.append(found)
                continue
            print(f"  {field}={value:6} {name:32} {_der(der_counts(ref, turns, prepared.duration))}"
                  f" speakers {found} (truth {len({s for s, _, _ in ref})})", flush=True)
        if singles:
            print(f"  {field}={value:6} single-speaker items: speakers "
                  + " ".join(map(str, singles)), flush=True)
        results[value] = out
    sources = sorted({source_of(v) for _, _, ref in scored if ref for v, _, _ in ref})

    def pooled(value: str, voices_of: callable) -> dict[str, float]:
        total = dict.fromkeys(("ref", "miss", "fa", "conf"), 0.0)
        for (turns, duration), (_, _, ref) in zip(results[value], scored):
            if ref is None:
                continue
            where = voices_of(ref, duration)
            c = der_counts(ref, turns, duration, where)
            for key in total:
                total[key] += c[key]
        return total

    def rate(c: dict[str, float]) -> float:
        return (c["miss"] + c["fa"] + c["conf"]) / (c["ref"] or 1.0) * 100

    chosen, held, at_default = [], [], []
    print(f"leave-one-source-out for {field} (default {default}):")
    for src in sources:
        def others(ref: list, duration: float, src: str = src) -> np.ndarray:
            mine = voice_frames(ref, duration, {v for v, _, _ in ref if source_of(v) == src})
            rest = voice_frames(ref, duration, {v for v, _, _ in ref if source_of(v) != src})
            return rest & ~mine

        def held_out(ref: list, duration: float, src: str = src) -> np.ndarray:
            return voice_frames(ref, duration, {v for v, _, _ in ref if source_of(v) == src})

        train = {v: rate(pooled(v, others)) for v in values}
        best = min(values, key=lambda v: (train[v], abs(float(v) - float(default))))
        test, test_default = rate(pooled(best, held_out)), rate(pooled(default, held_out))
        chosen.append(float(best))
        held.append(test)
        at_default.append(test_default)
        print(f"  held out {src:14} chosen {best:6} (DER on the others {train[best]:5.1f}%):"
              f" held-out DER {test:5.1f}% (default {test_default:5.1f}%)", flush=True)
    print(f"  spread: chosen {min(chosen):g}-{max(chosen):g}; held-out DER {min(held):.1f}-"
          f"{max(held):.1f}% (default {min(at_default):.1f}-{max(at_default):.1f}%)", flush=True)


def run_service(eval_dir: Path, lengths: list[float], keep: Path | None = None) -> None:
    """The scored items, then each ``--long`` conversation (the same audio: the builder is
    seeded) as a WAV file, sent to a started stack (``/v1/transcripts`` with ``audio_url``);
    the transcript's utterances are scored as speaker turns, beside the diarizer's own turns
    printed above. ``keep``: each transcript is also written there as JSON."""
    import json
    import wave

    import httpx

    from ops.stack import EvalServer, temporary_stack

    totals = dict.fromkeys(("ref", "miss", "fa", "conf"), 0.0)
    with tempfile.TemporaryDirectory() as tmp, temporary_stack() as stack:
        items, built = EvalServer(eval_dir), EvalServer(Path(tmp))
        try:
            client = httpx.Client(base_url=stack.url(""), timeout=60,
                                  headers={"Authorization": f"Bearer {stack.new_account()[1]}"})

            def score(name: str, url: str, ref: list, duration: float) -> dict[str, float]:
                t0 = time.perf_counter()
                resp = client.post("/v1/transcripts", json={"audio_url": url})
                resp.raise_for_status()
                body = stack.wait_transcript(client, resp.json()["id"],
                                             timeout_s=max(600.0, 3 * duration))
                wall = time.perf_counter() - t0
                if body["status"] != "completed":
                    print(f"service {name}: {body['status']}: {body.get('error')}", flush=True)
                    return dict.fromkeys(totals, 0.0)
                if keep is not None:
                    keep.mkdir(parents=True, exist_ok=True)
                    (keep / (name.replace("/", "_").replace(" ", "_") + ".json")).write_text(
                        json.dumps(body))
                names: dict[str, int] = {}
                turns = [SpeakerTurn(names.setdefault(u["speaker"], len(names)), u["start"],
                                     u["end"]) for u in body["utterances"]]
                c = der_counts(ref, turns, duration)
                print(f"service {name:28} utterances {_der(c)} speakers {len(names)}"
                      f" (truth {len({s for s, _, _ in ref})}); {len(body['words'])} words,"
                      f" {wall:.0f} s through the service; {_load()}", flush=True)
                return c

            for stem in SCORED:
                ref = read_rttm(eval_dir / f"{stem}.rttm")
                with wave.open(str(eval_dir / f"{stem}.wav")) as w:
                    duration = w.getnframes() / w.getframerate()
                c = score(stem.split("/")[-1], items.url(f"{stem}.wav"), ref, duration)
                for key in totals:
                    totals[key] += c[key]
            print(f"service items overall, utterances: {_der(totals)}", flush=True)
            for seconds in lengths:
                pcm = Path(tmp) / "long.pcm"
                ref = build_conversation(eval_dir, seconds, pcm)
                with wave.open(str(Path(tmp) / "long.wav"), "wb") as out:
                    out.setnchannels(1)
                    out.setsampwidth(2)
                    out.setframerate(SAMPLE_RATE)
                    out.writeframes(pcm.read_bytes())
                score(f"long {seconds:.0f} s", built.url("long.wav"), ref, seconds)
        finally:
            items.close()
            built.close()


def run_cluster_scale(diarizer: Diarizer, hours: float, voices: int = 12) -> None:
    """Clustering and turn building alone on synthetic model output for ``hours`` of speech
    (every window busy, two local speakers, embeddings of ``voices`` random voices): the
    part of the cost that is not linear in the models' work."""
    from pipeline.diarization.diarizer import _Chunks
    rng = np.random.default_rng(0)
    opts = diarizer.options
    seg = diarizer._seg  # noqa: SLF001 - the bench measures the stage's own internals
    n = int(hours * 3600 / opts.step)
    frames = seg.frames_per_window
    chunks = _Chunks(starts=[i * opts.step for i in range(n)],
                     offsets=[int(round(i * opts.step / seg.frame_step)) for i in range(n)],
                     stretch=[0] * n, embedded=[i % opts.embed_every == 0 for i in range(n)])
    chunks.activity = np.zeros((n, frames, 3), np.uint8)
    chunks.activity[:, : frames // 2, 0] = 1
    chunks.activity[:, frames // 2:, 1] = 1
    chunks.talk = chunks.activity * np.uint8(255)  # sure of every label: no overlap heard
    chunks.overlap = np.zeros((n, frames), np.uint8)
    chunks.labels = np.full((n, 3), -1, np.int64)
    means = rng.normal(size=(voices, SpeakerEmbedder.dim))
    owners = [(c, j) for c in range(0, n, opts.embed_every) for j in (0, 1)]
    who = rng.integers(0, voices, len(owners))
    emb = means[who] + rng.normal(size=(len(owners), SpeakerEmbedder.dim)) * 0.5
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    weights = np.full(len(owners), 3.0)
    stretch = Region(0.0, chunks.starts[-1] + seg.window)
    with _PeakRss() as rss:
        before = _PeakRss.now()
        t0 = time.perf_counter()
        diarizer._assign(chunks, emb, owners, weights, stretch.duration)  # noqa: SLF001
        t1 = time.perf_counter()
        turns = diarizer._turns(chunks, [stretch])  # noqa: SLF001
        t2 = time.perf_counter()
    print(f"clustering at {hours:g} h ({n} windows, {len(owners)} embeddings, {voices} voices):"
          f" clustering {t1 - t0:.1f} s, turns {t2 - t1:.1f} s, peak RSS {rss.peak / 2**20:.0f} MiB"
          f" ({(rss.peak - before) / 2**20:+.0f} MiB), {len({t.speaker for t in turns})} speakers;"
          f" {_load()}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", type=Path, default=Path(__file__).resolve().parents[2]
                        / "shared" / "eval", help="evaluation audio folder")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a DiarizationOptions field")
    parser.add_argument("--long", type=float, nargs="+", default=[], metavar="SECONDS",
                        help="also score many-voice conversations of these lengths")
    parser.add_argument("--cycled", type=float, nargs="+", default=[], metavar="SECONDS",
                        help="also score the scored items cycled to these lengths (9 voices)")
    parser.add_argument("--sweep", action="append", default=[], metavar="FIELD=V1,V2,...",
                        help="score every file at each value of a clustering or turn option "
                             "(the models' work done once) and choose it leave-one-source-out")
    parser.add_argument("--service", action="store_true",
                        help="also send the scored items and each --long conversation through "
                             "a started stack and score the transcript's utterances")
    parser.add_argument("--save", type=Path, default=None, metavar="FILE",
                        help="with --sweep: pickle the segmented and embedded files to FILE")
    parser.add_argument("--load", type=Path, default=None, metavar="FILE",
                        help="sweep the files a --save run kept instead of running the models")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="with --service: write each transcript there as JSON")
    parser.add_argument("--cluster-scale", type=float, nargs="+", default=[], metavar="HOURS",
                        help="time clustering and turn building alone at these lengths")
    parser.add_argument("--only-long", action="store_true",
                        help="skip the per-item table (with --long)")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch CPU threads (the service gives the models thread the "
                             "cores the ASR leaves)")
    args = parser.parse_args(argv)
    import torch

    from pipeline.vad import SileroVad

    torch.set_num_threads(args.threads)
    print("command: python -m bench.diarization " + shlex.join(sys.argv[1:] if argv is None
                                                                      else argv))
    print(f"start: {_load()}, {args.threads} torch thread(s)", flush=True)
    opts = DiarizationOptions(**_parse_sets(args.set))
    diarizer = Diarizer(SpeakerEmbedder(), opts)
    vad = SileroVad()
    # Warm up once: a worker keeps its models loaded, so first-call set-up is not counted.
    diarizer.diarize(np.zeros(12 * SAMPLE_RATE, np.float32), [Region(0.0, 12.0)])
    print(f"options: {opts.model_dump()}")
    scored: list | None = [] if args.sweep or args.save else None
    if args.load:
        with open(args.load, "rb") as f:
            scored = pickle.load(f)  # noqa: S301 - a file this bench wrote
        for name, prepared, ref in scored or []:
            turns = prepared.turns(diarizer)
            found = len({t.speaker for t in turns})
            print(f"{name:40} " + (f"{_der(der_counts(ref, turns, prepared.duration))} speakers"
                                    f" {found} (truth {len({s for s, _, _ in ref})})"
                                    if ref else f"speakers {found}"), flush=True)
    else:
        if not args.only_long:
            _items(args.eval, diarizer, vad, scored)
        for seconds in args.cycled:
            run_long(diarizer, args.eval, seconds, cycled=True, scored=scored)
        for seconds in args.long:
            run_long(diarizer, args.eval, seconds, scored=scored)
    if args.save:
        with open(args.save, "wb") as f:
            pickle.dump(scored, f)
    for item in args.sweep:
        field, _, values = item.partition("=")
        run_sweep(diarizer, scored or [], field, values.split(","))
    if args.service:
        run_service(args.eval, args.long, args.keep)
    for hours in args.cluster_scale:
        run_cluster_scale(diarizer, hours)


def _items(eval_dir: Path, diarizer: Diarizer, vad: SileroVad,
           scored: list | None = None) -> None:
    print(f"{'file':42} {'dur':>6} {'DER%':>6} {'miss%':>6} {'fa%':>6} {'conf%':>6}"
          f" {'spk':>3} {'ref':>3}")
    totals = dict.fromkeys(("ref", "miss", "fa", "conf"), 0.0)
    audio_s = vad_s = diar_s = 0.0
    right = count = multi_right = multi = 0
    rows: list[tuple[str, Path, list | None, int]] = []
    for stem in SCORED:
        ref = read_rttm(eval_dir / f"{stem}.rttm")
        rows.append((stem, eval_dir / f"{stem}.wav", ref, len({s for s, _, _ in ref})))
    rows += [(name, eval_dir / name, None, 1) for name in SINGLE]
    for name, path, ref, ref_count in rows:
        with tempfile.TemporaryDirectory() as tmp:
            pcm = Path(tmp) / "audio.pcm"
            with open(pcm, "wb") as out:
                duration = decode_to_pcm(path, out)
            t0 = time.perf_counter()
            speech = speech_regions(pcm, VadOptions(), vad)
            t1 = time.perf_counter()
            with PcmSamples(pcm) as samples:
                prepared = Prepared(diarizer, samples, speech)  # type: ignore[arg-type]
                turns = prepared.turns(diarizer)
            t2 = time.perf_counter()
        if scored is not None:
            scored.append((name, prepared, ref))
        audio_s, vad_s, diar_s = audio_s + duration, vad_s + t1 - t0, diar_s + t2 - t1
        found = len({t.speaker for t in turns})
        right += found == ref_count
        count += 1
        if ref_count > 1:
            multi_right += found == ref_count
            multi += 1
        label = Path(name).stem if ref is None else name.split("/")[-1]
        if ref is None:
            print(f"{label:42} {duration:6.1f} {'':>6} {'':>6} {'':>6} {'':>6} {found:3d}"
                  f" {ref_count:3d}")
            continue
        c = der_counts(ref, turns, duration)
        for key in totals:
            totals[key] += c[key]
        der = (c["miss"] + c["fa"] + c["conf"]) / c["ref"] * 100
        print(f"{label:42} {duration:6.1f} {der:6.1f} {c['miss'] / c['ref'] * 100:6.1f}"
              f" {c['fa'] / c['ref'] * 100:6.1f} {c['conf'] / c['ref'] * 100:6.1f}"
              f" {found:3d} {ref_count:3d}")
    ref_s = totals["ref"]
    print(f"overall DER {(totals['miss'] + totals['fa'] + totals['conf']) / ref_s * 100:.1f}%"
          f" (miss {totals['miss'] / ref_s * 100:.1f}%,"
          f" false alarm {totals['fa'] / ref_s * 100:.1f}%,"
          f" confusion {totals['conf'] / ref_s * 100:.1f}%) over {ref_s:.1f} s of reference speech")
    print(f"speaker count exact: {right}/{count} (multi-speaker {multi_right}/{multi})")
    print(f"RTF over {audio_s:.1f} s: diarization {diar_s / audio_s:.4f},"
          f" VAD {vad_s / audio_s:.4f}, together {(diar_s + vad_s) / audio_s:.4f}; {_load()}",
          flush=True)


if __name__ == "__main__":
    main()
