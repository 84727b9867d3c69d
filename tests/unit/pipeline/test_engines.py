"""The models holder's start-up, in a fresh interpreter (imports are process-wide state)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import json, sys, threading
from pathlib import Path
from pipeline.engines import Engines
from schemas.settings import Settings
engines = Engines(Settings(data_dir=Path(sys.argv[1])))
print(json.dumps({"threads": threading.active_count(),
                  "imported": [m for m in sys.argv[2:] if m in sys.modules]}))
engines.close()
"""


def test_engines_import_what_their_threads_need_before_any_thread_starts(tmp_path: Path) -> None:
    """After a restart, replayed records reach the decode, transcribe and diarize threads
    while ``warm()`` is still loading in another: scipy, imported by two of them at once,
    was left half set up ("Module 'scipy' has no attribute '_lib'") and every job after
    that failed. Whatever those threads import is imported by the constructor, on its own
    thread, before any pool thread exists."""
    wanted = ["pipeline.audio", "pipeline.vad", "pipeline.diarization", "scipy.signal",
              "scipy.cluster.hierarchy", "torch", "av", "onnxruntime"]
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path), *wanted], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["threads"] == 1, "a pool thread started before the imports were done"
    assert seen["imported"] == wanted


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
