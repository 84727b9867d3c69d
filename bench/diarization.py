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
import os
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from evaluation.diarization import SCORED, build_long, der_counts, read_rttm, unmatched_voices
from pipeline.audio import decode_to_pcm
from pipeline.diarization import DiarizationOptions, Diarizer, SpeakerEmbedder
from pipeline.engines import PcmSamples
from pipeline.types import SAMPLE_RATE, Region
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


def run_long(diarizer: Diarizer, eval_dir: Path, seconds: float) -> None:
    """Build, diarize and score one cycled recording of ``seconds``."""
    with tempfile.TemporaryDirectory() as tmp:
        pcm = Path(tmp) / "long.pcm"
        ref = build_long(eval_dir, seconds, pcm)
        t0 = time.perf_counter()
        speech = speech_regions(pcm, VadOptions(), SileroVad())
        t1 = time.perf_counter()
        with PcmSamples(pcm) as samples, _PeakRss() as rss:
            duration = len(samples) / SAMPLE_RATE
            before = _PeakRss.now()
            cpu = time.process_time()
            turns = diarizer.diarize(samples, speech)  # type: ignore[arg-type]
            cpu = time.process_time() - cpu
        t2 = time.perf_counter()
    c = der_counts(ref, turns, duration)
    der = (c["miss"] + c["fa"] + c["conf"]) / c["ref"] * 100
    truth = len({s for s, _, _ in ref})
    found = len({t.speaker for t in turns})
    print(f"long {seconds:7.0f} s: DER {der:5.1f}% (miss {c['miss'] / c['ref'] * 100:.1f}%,"
          f" fa {c['fa'] / c['ref'] * 100:.1f}%, conf {c['conf'] / c['ref'] * 100:.1f}%)"
          f" speakers {found} (truth {truth}); RTF diarization {(t2 - t1) / duration:.4f}"
          f" (CPU {cpu / duration:.4f}), VAD {(t1 - t0) / duration:.4f};"
          f" peak RSS while diarizing {rss.peak / 2**20:.0f} MiB"
          f" ({(rss.peak - before) / 2**20:+.0f} MiB over the loaded models); {_load()}",
          flush=True)
    speech = {}
    for spk, s, e in ref:
        speech[spk] = speech.get(spk, 0.0) + e - s
    lost = unmatched_voices(ref, turns, duration)
    print("  voices without a speaker of their own: "
          + (", ".join(f"{v} ({speech[v]:.0f} s)" for v in lost) or "none"), flush=True)


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
                        help="also score cycled recordings of these lengths")
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
    if not args.only_long:
        _items(args.eval, diarizer, vad)
    for seconds in args.long:
        run_long(diarizer, args.eval, seconds)
    for hours in args.cluster_scale:
        run_cluster_scale(diarizer, hours)


def _items(eval_dir: Path, diarizer: Diarizer, vad: SileroVad) -> None:
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
                turns = diarizer.diarize(samples, speech)  # type: ignore[arg-type]
            t2 = time.perf_counter()
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
