"""The test stack's start-up: a stack that cannot start says why, after one try on other ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.stack import Stack, StackExited


def test_a_stack_that_cannot_start_is_tried_on_other_ports_then_shows_its_log(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = Stack(tmp_path / "data", env={"A5S_REALTIME__EARLY_PAD_MS": "-5"})
    with pytest.raises(StackExited) as raised:
        stack.start(timeout_s=60)
    message = str(raised.value)
    assert "a5s up exited with 1" in message
    assert "A5S_REALTIME__EARLY_PAD_MS" in message  # the log's own error, not only a path
    first = capsys.readouterr().err
    assert "trying other ports" in first and "A5S_REALTIME__EARLY_PAD_MS" in first
    assert (tmp_path / "data.log").read_text().count("A5S_REALTIME__EARLY_PAD_MS") == 2
    assert stack.env["A5S_REALTIME__EARLY_PAD_MS"] == "-5"  # the caller's settings kept
