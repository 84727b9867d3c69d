"""Calibration of ``/v3/ws``'s ``end_of_turn_confidence``: how often a settled segment ends a turn.

``python -m bench.turn_confidence [--eval ../shared/eval]``

Each synthetic conversation of the eval set (exact turn boundaries) goes through a
:class:`~pipeline.realtime.SessionRecognizer` with the engine's default options, finals
decoded inline. Every final that adds words is a point where a v3 turn could end; it *is* a
turn end when the reference has a turn ending within ``--within`` s of the segment's speech
end (the final's end less the VAD's end padding). The finals are split by what the gateway
can see: whether the segment's text ends a sentence (``.``, ``?``, ``!``). The share of turn
ends in each group, with one turn end and one not added to each (few segments lack a
sentence end: Whisper punctuates nearly every one), is the confidence the gateway gives
(:data:`gateway.assemblyai_turns.CONFIDENCE`); the counts are printed beside them. The
figures depend on the models and the audio only, not on the machine's load.
"""

from __future__ import annotations

import argparse
import io
import json
import time
from pathlib import Path

from pipeline.audio import decode_to_pcm
from pipeline.realtime import EngineOptions, ModelOptions, SessionRecognizer, StreamingModels
from stores.process import single_threaded_blas

__all__ = ["main", "segment_ends"]

SR = 16000
FRAME_BYTES = 640
CONVERSATIONS = ("conv01_support_call", "conv02_team_meeting", "conv03_overlap")


def segment_ends(models: StreamingModels, options: EngineOptions,
                 pcm: bytes) -> list[tuple[float, str]]:
    """(speech end s, the segment's text) of every final that adds words."""
    rec = SessionRecognizer(models, (), options.recognizer)
    pad = options.recognizer.vad.speech_pad_ms / 1000
    out: list[tuple[float, str]] = []
    said = 0

    def take(updates: list) -> None:
        nonlocal said
        for u in updates:
            if u.is_final and len(u.text.split()) > said:
                out.append((u.end - pad, " ".join(u.text.split()[said:])))
                said = len(u.text.split())

    for i in range(0, len(pcm), FRAME_BYTES):
        samples, probs = rec.detect(pcm[i:i + FRAME_BYTES])
        updates = rec.advance(samples, probs)
        while (req := rec.take_final() or rec.take_prefinal()) is not None:
            updates += rec.complete(req, req.decoder.decode([req.input],
                                                            rec.decode_options(req.kind))[0])
        take(updates)
    take(rec.finish())
    return out


def pcm_of(path: Path) -> bytes:
    out = io.BytesIO()
    decode_to_pcm(path, out)
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    single_threaded_blas()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "eval")
    parser.add_argument("--within", type=float, default=0.5,
                        help="a reference turn end this close to a segment's end, s")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/a5s-models"))
    args = parser.parse_args(argv)
    options = EngineOptions()
    models = StreamingModels.from_specs(args.cache, "tiny.en", None, ModelOptions())
    counts = {True: [0, 0], False: [0, 0]}   # sentence end -> [turn ends, finals]
    t0 = time.perf_counter()
    for name in CONVERSATIONS:
        wav = args.eval / "synthetic" / f"{name}.wav"
        turns = json.loads(wav.with_suffix(".json").read_text())["turns"]
        ends = [t["end"] for t in turns]
        for end, text in segment_ends(models, options, pcm_of(wav)):
            sentence = text.rstrip()[-1:] in ".?!"
            turn_end = any(abs(e - end) <= args.within for e in ends)
            counts[sentence][0] += turn_end
            counts[sentence][1] += 1
            print(f"{name} {end:7.2f} {'turn' if turn_end else '    '} {text}")
    print(f"\nwall {time.perf_counter() - t0:.1f} s; a turn end within {args.within} s")
    for sentence in (True, False):
        hit, n = counts[sentence]
        print(f"segment {'ends' if sentence else 'does not end'} a sentence: {hit}/{n} end a "
              f"turn; confidence (hit + 1) / (n + 2) = {(hit + 1) / (n + 2):.2f}")


if __name__ == "__main__":
    main()
