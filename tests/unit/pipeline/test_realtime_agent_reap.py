"""When the realtime agent gives up a session whose gateway sends no more audio."""

from __future__ import annotations

from pipeline.realtime.agent import orphaned
from schemas.settings import RealtimeSettings


def test_a_session_without_audio_is_given_up_after_worker_orphan_s() -> None:
    opts = RealtimeSettings(worker_orphan_s=90, finish_timeout_s=30)
    assert not orphaned(89, False, opts)
    assert orphaned(91, False, opts)


def test_a_finishing_session_keeps_its_worker_while_its_gateway_waits() -> None:
    # Its final record came: no audio follows, and its last finals may take longer to
    # decode than worker_orphan_s on a busy worker; its gateway waits finish_timeout_s.
    opts = RealtimeSettings(worker_orphan_s=90, finish_timeout_s=600)
    assert not orphaned(120, True, opts)
    assert not orphaned(599, True, opts)
    assert orphaned(601, True, opts)
    assert orphaned(91, True, RealtimeSettings(worker_orphan_s=90, finish_timeout_s=30))
