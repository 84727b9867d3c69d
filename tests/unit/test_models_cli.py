"""``a5s models check DIR`` and the start-up check of the engine settings, as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "unit" / "pipeline"))
from tiny_transducer import (build_tiny_streaming_transducer,  # noqa: E402
                             build_tiny_torchscript, build_tiny_transducer)


def a5s(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ops.cli", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.mark.parametrize("build, form, serves", [
    (build_tiny_transducer, "onnx", "a5s-async-v1"),
    (build_tiny_torchscript, "torchscript", "a5s-async-v1"),
    (build_tiny_streaming_transducer, "onnx", "a5s-v2-streaming"),
])
def test_models_check_describes_and_decodes_the_clip(tmp_path: Path, build, form: str,
                                                     serves: str) -> None:
    out = a5s("models", "check", str(build(tmp_path / "model")))
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(":", 1) for line in out.stdout.splitlines() if ":" in line)
    assert lines["form"].strip() == form and lines["serves"].strip().startswith(serves)
    assert "jfk.ogg, 11.0 s" in lines["test clip"]
    result = lines["result"].strip()
    assert result and result != "(no words)"
    if serves == "a5s-async-v1":  # words with their times
        assert "[" in result and "-" in result
    if form == "onnx":
        assert "zipformer2, vocabulary 22, context 2" in lines["model"]


def test_models_check_of_an_incomplete_directory_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "jit_script.pt").write_bytes(b"")
    out = a5s("models", "check", str(tmp_path))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"Error: tokens.txt not found in {tmp_path}"


def test_a_bad_engine_setting_stops_start_up_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    out = a5s("up", "--data-dir", str(tmp_path / "data"),
              env={"A5S_MODELS__STREAMING_ENGINE": "zipformer",
                   "A5S_MODELS__STREAMING_MODEL_DIR": str(missing)})
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "Error: models.streaming_model_dir (A5S_MODELS__STREAMING_MODEL_DIR): "
        f"model directory not found: {missing}"]
    assert not (tmp_path / "data").exists(), "nothing started"
