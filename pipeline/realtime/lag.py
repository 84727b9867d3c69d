"""How far a worker's finals trail the audio they settle: what its admission goes by.

A cap on the sessions a worker holds fits one host: the same 2 cores kept 15 sessions in
real time on a fast day and were at the edge with 10 on a slow one (docs/realtime.md,
"Sessions a worker"). Past a floor, the engine therefore also admits a new session only
while its recent finals came soon after the audio they settle; a worker that is behind
refuses it, so the sessions it holds keep real time instead of all falling behind together.

A final's lag is measured on the worker: from when the gateway sent the audio at its
segment's end (the record's broker timestamp; the segment's padding puts that end about
0.16 s after the phrase ends) to the final, so it covers the broker hop, the wait for the
worker's event loop, the VAD thread, the wait for a decode thread and the decode.
"""

from __future__ import annotations

from collections import deque

__all__ = ["ArrivalClock", "FinalLags", "admits"]


class ArrivalClock:
    """When a session's audio arrived, by its position in the stream (s).

    Finals come in order of position, so the marks before a timed final are dropped;
    marks older than ``keep_s`` go too (a final later than that is timed from the oldest).
    """

    def __init__(self, keep_s: float = 60.0) -> None:
        self._keep_s = keep_s
        self._marks: deque[tuple[float, float]] = deque()

    def heard(self, position: float, now: float) -> None:
        """The audio up to ``position`` had arrived by ``now`` (monotonic s)."""
        self._marks.append((position, now))
        while now - self._marks[0][1] > self._keep_s:
            self._marks.popleft()

    def arrived(self, position: float) -> float | None:
        """When the audio up to ``position`` had arrived (None: no audio marked yet)."""
        while len(self._marks) > 1 and self._marks[0][0] < position:
            self._marks.popleft()
        return self._marks[0][1] if self._marks else None

    def __len__(self) -> int:
        return len(self._marks)


class FinalLags:
    """The lags of a worker's finals over the last ``window_s`` seconds."""

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._lags: deque[tuple[float, float]] = deque()

    def add(self, lag: float, now: float) -> None:
        self._lags.append((now, lag))
        self._expire(now)

    def quantile(self, q: float, now: float, least: int = 5) -> float | None:
        """The ``q`` quantile (nearest rank) of the window's lags; None with fewer than
        ``least`` of them, too few to judge by."""
        self._expire(now)
        if len(self._lags) < least:
            return None
        ordered = sorted(lag for _, lag in self._lags)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def _expire(self, now: float) -> None:
        while self._lags and now - self._lags[0][0] > self._window_s:
            self._lags.popleft()


def admits(sessions: int, lag: float | None, *, floor: int, limit_s: float | None) -> bool:
    """Whether a worker holding ``sessions`` takes one more, its finals lagging ``lag``
    seconds (None: unknown). Up to ``floor`` sessions it always does (the cap aside)."""
    return sessions < floor or limit_s is None or lag is None or lag <= limit_s
