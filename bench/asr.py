"""Batch ASR benchmark: word error rate and real-time factor on the shared eval set.

``python -m bench.asr [--model base] [--limit N] [--group NAME ...]``
``python -m bench.asr --engine zipformer (--model-dir DIR | --stand-in) [--batch-sizes 1,8,16]``
(throughput of one-at-a-time vs batched TorchScript decoding: see :mod:`bench.zipformer`)

Runs the bare batch path on each real-speech item that has an exact reference:
decode to PCM, Silero VAD, chunk plan, Whisper. Items whose reference describes
the audio instead of quoting it ("(2 seconds of silence)", "<beep ascending>")
are not scored for WER; the words produced on them are counted as a
hallucination check. ``--limit`` takes items round-robin across groups so a
small run still covers every source.

WER is pooled over all scored words (errors / reference words) after
lowercasing and removing punctuation on both sides; a second figure uses
Whisper's English text normalizer on both sides instead (numbers as digits,
contractions spelled out), since a reference may say "one" or "I am" where
Whisper writes "1" or "I'm". RTF is
wall time (decode, VAD and recognition) over audio duration on this machine;
Whisper encodes a full 30 s window however short the audio, so clips of a few
seconds cost nearly as much as 30 s ones and the RTF of long items is given
apart.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import jiwer

from evaluation.items import select_items
from evaluation.text import normalized, plain_words
from pipeline.asr import WhisperEngine, WhisperOptions
from pipeline.audio import decode_to_pcm, read_pcm
from pipeline.models import resolve_whisper
from pipeline.vad import SileroVad, VadOptions, plan_chunks, speech_regions

__all__ = ["main", "DEFAULT_EVAL"]

DEFAULT_EVAL = Path(__file__).resolve().parents[1].parent / "shared" / "eval"
LONG_S = 10.0
"""Items at least this long (seconds) get their own RTF line."""
_DESCRIPTION = re.compile(r"^\s*[(<\[].*[)>\]]\s*$")


@dataclass
class Result:
    path: str
    group: str
    duration: float
    seconds: float
    reference: str | None
    hypothesis: str


def run_item(path: Path, engine: WhisperEngine, vad: SileroVad, opts: VadOptions,
             scratch: Path, hotwords: str | None = None) -> str:
    """The batch path's verbatim text of one file; ``hotwords``: a job's key-term prompt."""
    pcm = scratch / "audio.pcm"
    with pcm.open("wb") as out:
        decode_to_pcm(path, out)
    words = []
    for chunk in plan_chunks(speech_regions(pcm, opts, vad), opts):
        words += engine.transcribe(read_pcm(pcm, chunk), chunk.start, hotwords)
    return " ".join(w.text for w in words)


def wer(results: list[Result], norm) -> tuple[float, int]:
    refs = [norm(r.reference) for r in results]
    hyps = [norm(r.hypothesis) for r in results]
    out = jiwer.process_words(refs, hyps)
    errors = out.substitutions + out.deletions + out.insertions
    words = sum(len(r.split()) for r in refs)
    return errors / max(words, 1), words


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.asr", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base", help="alias (base, tiny.en) or CTranslate2 dir")
    parser.add_argument("--eval", type=Path, default=DEFAULT_EVAL, help="eval set directory")
    parser.add_argument("--cache-dir", type=Path,
                        default=Path(tempfile.gettempdir()) / "a5s-models")
    parser.add_argument("--limit", type=int, help="at most N items, round-robin across groups")
    parser.add_argument("--group", action="append", default=[],
                        help="only paths containing this (repeatable), e.g. asterisk_16k")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compute-type", default=None)
    parser.add_argument("--full-window", action="store_true",
                        help="pad every chunk to Whisper's 30 s window (faster-whisper's way) "
                             "instead of fitting the encoder window to the chunk")
    parser.add_argument("--no-timestamp-tokens", action="store_true",
                        help="decode with <|notimestamps|>, words timed by the alignment only")
    parser.add_argument("--quiet", action="store_true", help="no per-file lines")
    parser.add_argument("--engine", choices=("whisper", "zipformer"), default="whisper")
    parser.add_argument("--model-dir", type=Path, default=None,
                        help="zipformer: an icefall export, TorchScript or ONNX (docs/models.md)")
    parser.add_argument("--stand-in", action="store_true",
                        help="zipformer: time a random-weight model of Zipformer-like size")
    parser.add_argument("--batch-sizes", default="1,8,16",
                        type=lambda s: [int(x) for x in s.split(",")],
                        help="zipformer: comma-separated batch sizes (1 = one at a time)")
    parser.add_argument("--decoding", default="greedy_search",
                        choices=("greedy_search", "modified_beam_search"))
    args = parser.parse_args(argv)

    manifest = json.loads((args.eval / "manifest.json").read_text())
    items = select_items(manifest, args.group, args.limit)
    if args.engine == "zipformer":
        if not args.model_dir and not args.stand_in:
            parser.error("--engine zipformer needs --model-dir DIR or --stand-in")
        from bench.zipformer import run
        run(args, items)
        return
    t0 = time.perf_counter()
    engine = WhisperEngine(resolve_whisper(args.model, args.cache_dir), WhisperOptions(
        beam_size=args.beam, cpu_threads=args.threads, device=args.device,
        compute_type=args.compute_type, timestamp_tokens=not args.no_timestamp_tokens,
        **({"window_pad_frames": None} if args.full_window else {})))
    vad, opts = SileroVad(), VadOptions()
    print(f"model {engine.name} ({args.model}) loaded in {time.perf_counter() - t0:.1f} s; "
          f"beam {args.beam}, {args.threads} threads, {args.device}, "
          f"{'30 s' if args.full_window else 'fitted'} encoder windows, "
          f"timestamp tokens {'off' if args.no_timestamp_tokens else 'on'}; {len(items)} items")

    results: list[Result] = []
    with tempfile.TemporaryDirectory() as scratch:
        for item in items:
            start = time.perf_counter()
            hyp = run_item(args.eval / item["path"], engine, vad, opts, Path(scratch))
            ref = item["reference_text"]
            result = Result(item["path"], item["path"].split("/")[1], item["duration"],
                            time.perf_counter() - start,
                            None if _DESCRIPTION.match(ref) else ref, hyp)
            results.append(result)
            if not args.quiet:
                score = (f"wer {jiwer.wer(plain_words(ref), plain_words(hyp) or '<empty>'):6.1%}"
                         if result.reference else "not scored")
                print(f"{score}  rtf {result.seconds / result.duration:5.2f}  {item['path']}\n"
                      f"      ref: {plain_words(ref)}\n      hyp: {hyp}")
    report(results)
    print(f"chunks decoded alone after the one-pass decode (fallbacks): {engine.batch_fallbacks}")


def report(results: list[Result]) -> None:
    scored = [r for r in results if r.reference]
    described = [r for r in results if not r.reference]
    audio = sum(r.duration for r in results)
    wall = sum(r.seconds for r in results)
    print("\n group            items  audio s   rtf    wer   wer(normalized)")
    for group in sorted({r.group for r in results}):
        rows = [r for r in results if r.group == group]
        rs = [r for r in rows if r.reference]
        w = (f"{wer(rs, plain_words)[0]:6.1%}  {wer(rs, normalized)[0]:6.1%}" if rs
             else "     -       -")
        print(f" {group:16s} {len(rows):5d} {sum(r.duration for r in rows):8.1f} "
              f"{sum(r.seconds for r in rows) / sum(r.duration for r in rows):5.3f} {w}")
    if scored:
        plain, words = wer(scored, plain_words)
        spoken, _ = wer(scored, normalized)
        print(f"\nOVERALL: {len(scored)} scored items, {words} reference words: "
              f"WER {plain:.2%} (lowercase, no punctuation); "
              f"{spoken:.2%} (Whisper normalizer)")
    if described:
        stray = sum(len(r.hypothesis.split()) for r in described)
        print(f"non-verbal references (silence, beeps): {len(described)} items, "
              f"{stray} words output")
    print(f"audio {audio:.1f} s, wall {wall:.1f} s, RTF {wall / max(audio, 1e-9):.3f}")
    long = [r for r in results if r.duration >= LONG_S]
    if long:
        long_audio = sum(r.duration for r in long)
        print(f"items of {LONG_S:g} s or more: {len(long)}, audio {long_audio:.1f} s, "
              f"RTF {sum(r.seconds for r in long) / long_audio:.3f}")


if __name__ == "__main__":
    main()
