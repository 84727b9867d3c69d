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
