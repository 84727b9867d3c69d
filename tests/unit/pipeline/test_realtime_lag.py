"""The finals' lag a worker admits new live sessions by (``pipeline.realtime.lag``)."""

from __future__ import annotations

import pytest

from pipeline.realtime.lag import ArrivalClock, FinalLags, admits


def test_a_final_is_timed_from_the_arrival_of_the_audio_it_settles() -> None:
    clock = ArrivalClock()
    assert clock.arrived(1.0) is None                    # no audio yet
    for k in range(1, 11):                               # 0.5 s records, one a second
        clock.heard(0.5 * k, float(k))
    assert clock.arrived(1.2) == 3.0                     # the record that brought 1.2 s
    assert clock.arrived(1.5) == 3.0                     # a mark exactly at the position
    assert clock.arrived(2.1) == 5.0
    assert clock.arrived(0.4) == 5.0                     # marks before a timed final are gone
    assert clock.arrived(99.0) == 10.0                   # past the audio: the latest mark
    assert len(clock) == 1


def test_old_arrival_marks_go_and_a_late_final_is_timed_from_the_oldest() -> None:
    clock = ArrivalClock(keep_s=5.0)
    for k in range(20):
        clock.heard(0.02 * (k + 1), float(k))
    assert len(clock) == 6                               # marks of the last 5 s
    assert clock.arrived(0.02) == 14.0


def test_lags_are_judged_over_the_window_and_only_with_enough_finals() -> None:
    lags = FinalLags(window_s=20.0)
    for k, lag in enumerate([0.2, 0.3, 0.25, 0.4]):
        lags.add(lag, now=float(k))
    assert lags.quantile(0.9, now=4.0) is None           # four finals are too few
    lags.add(2.0, now=4.0)
    assert lags.quantile(0.9, now=4.0) == 2.0
    assert lags.quantile(0.5, now=4.0) == 0.3
    for k in range(10):
        lags.add(0.3, now=10.0 + k)
    assert lags.quantile(0.9, now=19.0) == 0.4           # ten 0.3s beside the five above
    assert lags.quantile(0.9, now=30.0) == 0.3           # the first five have left the window
    assert lags.quantile(0.9, now=50.0) is None          # and then all


@pytest.mark.parametrize(("sessions", "lag", "limit", "expected"), [
    (4, 9.0, 1.0, True),       # under the floor: always
    (5, 0.8, 1.0, True),
    (5, 1.2, 1.0, False),      # at the floor and behind
    (12, 1.2, 1.0, False),
    (12, None, 1.0, True),     # too few finals to judge by
    (12, 9.0, None, True),     # admission by lag off
])
def test_admission(sessions: int, lag: float | None, limit: float | None, expected: bool) -> None:
    assert admits(sessions, lag, floor=5, limit_s=limit) is expected
