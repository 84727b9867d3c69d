"""The SDK's ``wait`` loop, driven without a service: ``a5s.client.Poll`` on a clock the
test moves (the integration tests run ``wait`` against the real stack)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from a5s import TranscriptFailed, WaitTimeout
from a5s.client import Poll
from schemas.api import Transcript


def _transcript(status: str) -> Transcript:
    return Transcript(id="tr_01", status=status, created_at=datetime(2026, 1, 1, tzinfo=UTC))


def test_each_status_is_reported_once_and_the_delay_backs_off_to_ten_intervals() -> None:
    seen: list[str] = []
    poll = Poll(1.0, None, now=0.0, on_progress=lambda stage, _: seen.append(stage))
    delays = [poll.after(_transcript(s), now=0.0)
              for s in ["queued", "queued", "processing"] + ["processing"] * 6]
    assert delays == [1.0, 1.5, 2.25, 3.375, 5.0625, 7.59375, 10.0, 10.0, 10.0]
    assert poll.after(_transcript("completed"), now=0.0) is None
    assert seen == ["queued", "processing", "completed"]


def test_an_error_raises_or_is_returned_as_asked() -> None:
    with pytest.raises(TranscriptFailed):
        Poll(1.0, None, now=0.0).after(_transcript("error"), now=0.0)
    assert Poll(1.0, None, now=0.0, raise_on_error=False).after(
        _transcript("error"), now=0.0) is None


def test_no_poll_is_promised_past_the_deadline() -> None:
    poll = Poll(1.0, 3.0, now=100.0)
    assert poll.after(_transcript("queued"), now=100.0) == 1.0
    assert poll.after(_transcript("queued"), now=101.0) == 1.5
    with pytest.raises(WaitTimeout) as timed_out:  # 102.5 + 2.25 is past 103
        poll.after(_transcript("processing"), now=102.5)
    assert timed_out.value.transcript.status == "processing"
    assert "after 3 s" in str(timed_out.value)
    # A job that ends on the last poll before the deadline is returned, not timed out.
    assert Poll(1.0, 0.5, now=0.0).after(_transcript("completed"), now=0.4) is None
