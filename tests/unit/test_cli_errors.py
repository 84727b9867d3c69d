"""Mistakes made before any service is involved are one-line CLI errors (a subprocess each)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ops.cli", *args], cwd=REPO, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True)


def test_a_bad_setting_is_named_in_one_line(tmp_path: Path) -> None:
    for args in (["up", "--data-dir", str(tmp_path)], ["admin", "list-accounts"]):
        out = _cli(*args, A5S_EMBEDDED__KAFKA="-x")
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.strip().splitlines() == [
            "Error: setting A5S_EMBEDDED__KAFKA (or its entry in $A5S_CONFIG): Input should be "
            "a valid integer, unable to parse string as an integer (got '-x')"]
    assert not (tmp_path / "run").exists()  # nothing was started


def test_role_entry_points_name_a_bad_setting_in_one_line(tmp_path: Path) -> None:
    """``python -m gateway`` and ``python -m pipeline`` refuse as ``a5s gateway/worker`` do."""
    for module in ("gateway", "pipeline"):
        out = subprocess.run([sys.executable, "-m", module, "--data-dir", str(tmp_path)],
                             cwd=REPO, timeout=60, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO),
                                  "A5S_EMBEDDED__KAFKA": "-x"})
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.strip().splitlines() == [
            f"python -m {module}: setting A5S_EMBEDDED__KAFKA (or its entry in $A5S_CONFIG): "
            "Input should be a valid integer, unable to parse string as an integer (got '-x')"]
    missing = tmp_path / "no-such-model"
    out = subprocess.run([sys.executable, "-m", "pipeline", "--data-dir", str(tmp_path)],
                         cwd=REPO, timeout=60, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO),
                              "A5S_MODELS__BATCH_ENGINE": "zipformer",
                              "A5S_MODELS__BATCH_MODEL_DIR": str(missing)})
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert str(missing) in out.stderr and "A5S_MODELS__BATCH_MODEL_DIR" in out.stderr
    assert not (tmp_path / "run").exists()  # nothing was started
