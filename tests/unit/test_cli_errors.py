"""Mistakes made before any service is involved are one-line CLI errors (a subprocess each)."""

from __future__ import annotations

import json
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


def _clean_env(**env: str) -> dict[str, str]:
    """This process's environment without any ``A5S_*`` setting, plus ``env``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("A5S_")},
            "PYTHONPATH": str(REPO), **env}


def _refused(args: list[str], env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-m", "ops.cli", *args], cwd=REPO, timeout=120,
                         env=env, capture_output=True, text=True)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.strip().splitlines() if not ln.startswith("a5s: ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), out.stderr
    return lines[0]


def test_clients_find_the_ports_a5s_up_recorded_and_variables_override(tmp_path: Path) -> None:
    """With nothing listening, the one-line error names the URL each command tried: the ports
    in ``run/up.json`` where no variable names them, ``A5S_PORT`` / ``A5S_CONSOLE_PORT``
    over those, ``--url`` over everything."""
    from ops.stack import free_port
    api, console, other = free_port(), free_port(), free_port()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "up.json").write_text(
        json.dumps({"pid": 1, "ports": {"API": api, "console": console}}))
    (tmp_path / "console.token").write_text("tok\n")
    clip = str(REPO.parent / "shared" / "eval" / "real" / "pocketsphinx" / "goforward.wav")
    recorded = _clean_env(A5S_DATA_DIR=str(tmp_path), A5S_API_KEY="a5s_sk_x")
    for args, port in ((["transcribe", clip], api), (["stream", clip], api),
                       (["admin", "list-accounts"], console), (["sql", "SELECT 1"], console)):
        line = _refused(args, recorded)
        assert f"127.0.0.1:{port}" in line, line
    named = {**recorded, "A5S_PORT": str(other), "A5S_CONSOLE_PORT": str(other)}
    # ``stream`` finds the API as ``transcribe`` does and fails without the client's retries
    for args in (["stream", clip], ["admin", "list-accounts"], ["sql", "SELECT 1"]):
        line = _refused(args, named)
        assert f"127.0.0.1:{other}" in line, line
    line = _refused(["admin", "--url", f"http://127.0.0.1:{api}", "list-accounts"], named)
    assert f"127.0.0.1:{api}" in line, line
    line = _refused(["stream", clip, "--url", f"http://127.0.0.1:{console}"], named)
    assert f"127.0.0.1:{console}" in line, line
    line = _refused(["stream", clip], _clean_env(A5S_API_KEY="a5s_sk_x",
                                                 A5S_DATA_DIR=str(tmp_path / "none")))
    assert "127.0.0.1:8000" in line, line  # no record, no variable: the default


def test_a_data_directory_without_a_console_token_is_named(tmp_path: Path) -> None:
    for args in (["admin", "list-accounts"], ["sql", "SELECT 1"]):
        line = _refused(args, _clean_env(A5S_DATA_DIR=str(tmp_path)))
        assert f"no console token in {tmp_path / 'console.token'}" in line, line
        assert "A5S_DATA_DIR" in line, line
    assert not list(tmp_path.iterdir())  # a client writes nothing there


def test_admin_help_says_which_settings_it_honours() -> None:
    out = _cli("admin", "--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "env var: A5S_DATA_DIR" in text and "A5S_CONSOLE_PORT" in text, text
