"""The models holder's start-up, in a fresh interpreter (imports are process-wide state)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import asyncio, json, sys
from pathlib import Path
from pipeline.engines import Engines, import_model_code
from schemas.settings import Settings
wanted = sys.argv[2:]
engines = Engines(Settings(data_dir=Path(sys.argv[1])))
at_start = [m for m in wanted if m in sys.modules]

def seen():
    return [m for m in wanted if m in sys.modules]

async def replayed():
    # warm()'s imports and the stages' first calls at once, as after a restart
    return await asyncio.gather(asyncio.to_thread(import_model_code),
                                *(engines.run(seen) for _ in range(4)), engines._run_asr(seen))

print(json.dumps({"at_start": at_start, "calls": asyncio.run(replayed())[1:]}))
engines.close()
"""

HEAVY = ["pipeline.audio", "pipeline.vad", "pipeline.diarization", "scipy.cluster.hierarchy",
         "torch"]
NEVER = ["scipy.signal"]
"""Not imported by the model code at all (about 0.9 s of a start; the decoder's DC blocker
is numpy)."""


def test_model_code_is_imported_off_the_loop_and_before_any_pool_call(tmp_path: Path) -> None:
    """The constructor leaves torch and scipy (seconds of imports) to ``warm()``'s thread,
    so the API and the consumer start at once. After a restart, replayed records reach the
    decode, transcribe and diarize threads while ``warm()`` is still importing: scipy,
    imported by two threads at once, was left half set up ("Module 'scipy' has no attribute
    '_lib'") and every job after that failed. So every pool call waits for the imports,
    which one thread at a time runs."""
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path), *HEAVY, *NEVER], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["at_start"] == [], "the constructor imported what warm() should"
    assert seen["calls"] == [HEAVY] * 5, "a pool call ran before the imports were done, " \
        "or the model code imported scipy.signal"


def test_timestamp_tokens_setting_reaches_the_whisper_engine(tmp_path: Path) -> None:
    """``A5S_MODELS__TIMESTAMP_TOKENS=false`` turns Whisper's timestamp tokens off; on by
    default."""
    probe = ("import sys; from pathlib import Path; from pipeline.engines import Engines; "
             "from schemas.settings import Settings; "
             "e = Engines(Settings(data_dir=Path(sys.argv[1]))); "
             "print(e.asr.opts.timestamp_tokens); e.close()")
    for env, expected in (({}, "True"), ({"A5S_MODELS__TIMESTAMP_TOKENS": "false"}, "False")):
        out = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT),
                                  "A5S_MODELS__WHISPER": "tiny.en", **env},
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == expected
