"""The supervisor's delay before restarting a service that keeps dying."""

from __future__ import annotations

from ops.cli import restart_delay
from schemas.settings import Settings


def test_the_delay_doubles_from_two_seconds_up_to_the_cap() -> None:
    cap = Settings.model_fields["restart_delay_max_s"].default
    assert [restart_delay(n, cap) for n in range(1, 8)] == [2, 4, 8, 16, 30, 30, 30]


def test_a_lower_cap_holds_from_the_first_restart() -> None:
    assert [restart_delay(n, 2.0) for n in (1, 2, 5)] == [2, 2, 2]
    assert restart_delay(3, 0.0) == 0


def test_a_long_crash_loop_does_not_overflow() -> None:
    assert restart_delay(10_000, 30.0) == 30
