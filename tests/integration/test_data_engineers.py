"""The documented consumer example reads a finished job from ``a5s.transcripts.completed``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from ops.stack import EVAL, REPO, Stack

pytestmark = pytest.mark.stack

SHORT = EVAL / "real" / "pocketsphinx" / "goforward.wav"


def test_example_consumer_sees_a_finished_job(stack: Stack) -> None:
    _, key = stack.new_account()
    with stack.client(key) as c:
        file_id = c.post("/v1/files", content=SHORT.read_bytes()).json()["id"]
        tid = c.post("/v1/transcripts", json={"file_id": file_id,
                                              "metadata": {"batch": "de"}}).json()["id"]
        stack.wait_transcript(c, tid)
    env = {**os.environ, "A5S_EMBEDDED__KAFKA": stack.env["A5S_EMBEDDED__KAFKA"],
           "A5S_KAFKA_BOOTSTRAP": f"127.0.0.1:{stack.env['A5S_EMBEDDED__KAFKA']}",
           "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "examples/consume_completed.py", "--from-beginning", "--group",
         f"test-{uuid.uuid4().hex[:8]}", "--until", tid, "--timeout", "90"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["id"]: r for r in map(json.loads, proc.stdout.splitlines())}
    row = rows[tid]
    assert row["status"] == "completed" and row["text"].startswith("go forward")
    assert row["words"] == 4 and row["speakers"] == 1 and row["metadata"] == {"batch": "de"}
