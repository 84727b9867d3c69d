"""How one segment's final decode depends on where it is cut.

``python -m bench.cuts [--audio F] [--start S ...] [--end E] [--span 0.2] [--step 0.01]``

Decodes ``[start, cut)`` of a recording with the live service's final model and options,
for every cut from ``end - span`` to ``end`` in ``step`` s: once with silence up to ``end``
(what the early speculative decode sees, the rest of its padding as silence), once with
nothing after the cut. Then tallies the distinct texts (scoring form). A phrase that reads
differently as its cut moves by 10 ms is one the model is unsure of: a test that wants its
exact words tests where the cut happens to fall. The defaults are jfk.flac's "ask not"
(3.08 s to the padded decode's cut at 4.59 s), which tiny.en reads as "AS NOT" or "Ask not".
"""

from __future__ import annotations

import argparse
import collections
import io
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from evaluation.text import plain_words
from ops.stack import EVAL

SR = 16000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cuts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--audio", type=Path, default=EVAL / "real" / "whisper" / "jfk.flac")
    parser.add_argument("--start", type=float, action="append",
                        help="segment start, s (repeat for several; default 3.08)")
    parser.add_argument("--end", type=float, default=4.59, help="the last cut, s")
    parser.add_argument("--span", type=float, default=0.2, help="cuts over this much, s")
    parser.add_argument("--step", type=float, default=0.01)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "a5s-models",
                        help="where split packaged models are joined once")
    args = parser.parse_args(argv)
    from pipeline.audio import decode_to_pcm
    from pipeline.realtime import DecodeInput, SessionRecognizer, StreamingModels
    from pipeline.realtime.agent import engine_options
    from pipeline.realtime.recognizer import DecodeKind, pcm_to_float
    from schemas.settings import Settings

    print("command: python -m bench.cuts " + " ".join(argv if argv is not None else sys.argv[1:]))
    print("load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    settings = Settings()
    m = settings.models
    models = StreamingModels.from_specs(
        args.cache, m.streaming_partial,
        m.streaming_final if m.streaming_final != m.streaming_partial else None)
    rec = SessionRecognizer(models, options=engine_options(settings).recognizer)
    options = rec.decode_options(DecodeKind.PREFINAL)
    prompt = models.final.prompt("")
    out = io.BytesIO()
    decode_to_pcm(args.audio, out)
    pcm = pcm_to_float(out.getvalue())

    def decode(start: float, cut: float, until: float) -> str:
        audio = pcm[int(start * SR):int(cut * SR)]
        audio = np.concatenate([audio, np.zeros(max(0, int((until - cut) * SR)), np.float32)])
        return plain_words(models.final.decode([DecodeInput(audio, prompt)], options)[0].text)

    steps = int(round(args.span / args.step))
    cuts = [round(args.end - k * args.step, 3) for k in range(steps - 1, -1, -1)]
    print(f"{args.audio.name}: final model {m.streaming_final}, {options.beam_size=}")
    for start in args.start or [3.08]:
        padded: collections.Counter[str] = collections.Counter()
        bare: collections.Counter[str] = collections.Counter()
        print(f"\nstart {start:.2f} s; cut: silence to {args.end:.2f} s | nothing after")
        for cut in cuts:
            a, b = decode(start, cut, args.end), decode(start, cut, cut)
            padded[a] += 1
            bare[b] += 1
            print(f"  {cut:.2f}  {a!r:28} {b!r}")
        print(f"  silence after: {dict(padded)}; nothing after: {dict(bare)}")


if __name__ == "__main__":
    main()
