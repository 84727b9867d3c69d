"""Key terms in batch jobs (``/v2`` ``keyterms_prompt``, ``word_boost``): their effect measured.

``python -m bench.keyterms [--model base] [--others 12] [--threads 2]``

The batch path (decode, VAD, chunks, Whisper) runs each item twice, without and with the
key-term prompt a job gets (``pipeline.stages.transcribe.hotwords``, every term at the
default strength):

* items whose reference holds rare terms (product names, jargon: the Asterisk PBX prompts of
  the eval set, and words Whisper base missed on a scan of the eval set's words found in
  one reference only), each with its own terms: the recall of those terms, a term counted
  where its words appear in a row in the verbatim hypothesis;
* other items (round-robin over the scored groups, as ``bench.asr --limit``, none whose
  reference says a term), each with every term above, as a user would send the same
  vocabulary with every job: pooled WER
  (lowercase, no punctuation, as ``bench.asr``), which the prompt should leave unchanged.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench import load_average
from bench.asr import DEFAULT_EVAL, Result, run_item, wer
from evaluation.items import select_items
from evaluation.text import plain_words
from pipeline.asr import WhisperEngine, WhisperOptions
from pipeline.models import resolve_whisper
from pipeline.stages.transcribe import hotwords
from pipeline.vad import SileroVad, VadOptions

__all__ = ["main", "TERM_ITEMS", "recalled"]

TERM_ITEMS: dict[str, tuple[str, ...]] = {
    "real/asterisk_16k/demo-moreinfo.wav": ("Asterisk", "PBX", "IVR", "Linux"),
    "real/asterisk_16k/demo-nogo.wav": ("Digium", "Asterisk"),
    "real/asterisk_16k/demo-congrats.wav": ("Asterisk", "PBX"),
    "real/asterisk_16k/basic-pbx-ivr-main.wav": ("Super Awesome Company", "Waldo's"),
    "real/asterisk_16k/conf-errormenu.wav": ("Invalid Choice",),
    "real/asterisk_16k/dictate/truncating_audio.wav": ("truncating",),
    "real/asterisk_16k/dictate/both_help.wav": ("dictation filename",),
    "real/speechbrain/LJ050-0131.wav": ("thereunder",),
}
"""Eval items with rare terms in their reference, and those terms."""
STRENGTH = 6
"""The strength of a ``keyterms_prompt`` term (``schemas.assemblyai.KEYTERMS_STRENGTH``)."""


def recalled(term: str, hypothesis: str) -> bool:
    """Whether the term's words appear in a row in the hypothesis (plain words)."""
    return f" {plain_words(term)} " in f" {plain_words(hypothesis)} "


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.keyterms", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base", help="alias (base, tiny.en) or CTranslate2 dir")
    parser.add_argument("--eval", type=Path, default=DEFAULT_EVAL)
    parser.add_argument("--cache-dir", type=Path,
                        default=Path(tempfile.gettempdir()) / "a5s-models")
    parser.add_argument("--others", type=int, default=12, help="items scored for WER")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--beam", type=int, default=5)
    args = parser.parse_args(argv)

    manifest = json.loads((args.eval / "manifest.json").read_text())
    by_path = {i["path"]: i for i in manifest["items"]}
    every = tuple(dict.fromkeys(t for terms in TERM_ITEMS.values() for t in terms))
    others = [i for i in select_items(manifest, [], None)  # none that says a term
              if i["path"] not in TERM_ITEMS
              and not any(recalled(t, i["reference_text"]) for t in every)][:args.others]
    engine = WhisperEngine(resolve_whisper(args.model, args.cache_dir), WhisperOptions(
        beam_size=args.beam, cpu_threads=args.threads))
    vad, opts = SileroVad(), VadOptions()
    print(f"model {engine.name}, beam {args.beam}, {args.threads} threads; load average "
          f"{load_average()}")
    print(f"prompt for the other items: {hotwords([(t, STRENGTH) for t in every])!r}")
    t0 = time.perf_counter()
    found = {False: 0, True: 0}
    total = 0
    with tempfile.TemporaryDirectory() as scratch:
        print("\nrare terms: recall without / with the terms")
        for path, terms in TERM_ITEMS.items():
            prompt = hotwords([(t, STRENGTH) for t in terms])
            for prompted in (False, True):
                hyp = run_item(args.eval / path, engine, vad, opts, Path(scratch),
                               prompt if prompted else None)
                hits = [t for t in terms if recalled(t, hyp)]
                found[prompted] += len(hits)
                print(f"  {'with   ' if prompted else 'without'} {len(hits)}/{len(terms)}  "
                      f"{path}\n      hyp: {hyp}")
            total += len(terms)
        results: dict[bool, list[Result]] = {False: [], True: []}
        print("\nother items, given every term: those whose text the terms changed")
        for item in others:
            for prompted in (False, True):
                hyp = run_item(args.eval / item["path"], engine, vad, opts, Path(scratch),
                               hotwords([(t, STRENGTH) for t in every]) if prompted else None)
                results[prompted].append(Result(item["path"], item["path"].split("/")[1],
                                                item["duration"], 0.0,
                                                by_path[item["path"]]["reference_text"], hyp))
            before, after = results[False][-1].hypothesis, results[True][-1].hypothesis
            if before != after:
                print(f"  changed by the terms: {item['path']}\n      ref:     "
                      f"{plain_words(item['reference_text'])}\n      without: {before}\n"
                      f"      with:    {after}")
    before, words = wer(results[False], plain_words)
    after, _ = wer(results[True], plain_words)
    print(f"\nKEY TERMS: recall {found[False]}/{total} ({found[False] / total:.0%}) without, "
          f"{found[True]}/{total} ({found[True] / total:.0%}) with, on {len(TERM_ITEMS)} items")
    print(f"OTHER ITEMS: {len(others)} items, {words} reference words: WER {before:.2%} "
          f"without, {after:.2%} with the {len(every)} terms ({(after - before) * 100:+.2f} "
          "points)")
    print(f"wall {time.perf_counter() - t0:.0f} s; load average {load_average()}")


if __name__ == "__main__":
    main()
