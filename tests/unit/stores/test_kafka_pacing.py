"""How long a consumer of the embedded broker pauses after an empty fetch."""

from __future__ import annotations

import math

from stores.kafka import _pause


def test_live_consumers_poll_fast_while_records_flow_and_slowly_when_long_idle() -> None:
    def pause(live: bool, quiet_s: float) -> float:
        return _pause(live, quiet_s, pause_s=0.05, live_pause_s=0.01, live_busy_s=2.0,
                      live_idle_s=30.0)

    assert pause(True, 0.5) == 0.01          # a live session's records flow
    assert pause(True, 5.0) == 0.05          # paused a moment
    assert pause(True, 60.0) == math.inf     # no session: the fetch wait caps it
    assert pause(True, math.inf) == math.inf  # never a record since it started
    # the others pause alike whenever their fetch was empty
    assert pause(False, 0.5) == pause(False, 60.0) == pause(False, math.inf) == 0.05
