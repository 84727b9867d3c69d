"""A bounded, preallocated buffer of one session's recent audio.

Appending a 20 ms frame to a numpy array by concatenation copies the whole segment each
time (tens of MB/s per session); this buffer writes in place and only shifts when the
dead prefix is large, so the cost per frame stays constant.
"""

from __future__ import annotations

import numpy as np

__all__ = ["AudioBuffer"]


class AudioBuffer:
    """Samples ``[start, end)`` of a stream, addressed by absolute sample index.

    Args:
        capacity: most samples held; older audio is dropped when exceeded.
    """

    def __init__(self, capacity: int) -> None:
        self._data = np.zeros(capacity, dtype=np.float32)
        self.start = 0
        self.end = 0

    def append(self, samples: np.ndarray) -> None:
        """Add samples at the end, dropping the oldest ones if full."""
        n = len(samples)
        cap = len(self._data)
        if n >= cap:
            self._data[:] = samples[-cap:]
            self.end += n
            self.start = self.end - cap
            return
        used = self.end - self.start
        if used + n > cap:
            self.drop_before(self.end + n - cap, force=True)
            used = self.end - self.start
        self._data[used:used + n] = samples
        self.end += n

    def drop_before(self, sample: int, force: bool = False) -> None:
        """Forget audio before ``sample``; shifts only when a quarter of the buffer is dead."""
        sample = min(max(sample, self.start), self.end)
        dead = sample - self.start
        if dead <= 0 or (not force and dead < len(self._data) // 4):
            return
        used = self.end - sample
        self._data[:used] = self._data[dead:dead + used]
        self.start = sample

    def slice(self, begin: int, end: int) -> np.ndarray:
        """A copy of samples ``[begin, end)`` (clipped to what is held)."""
        begin = max(begin, self.start)
        end = min(end, self.end)
        if end <= begin:
            return np.zeros(0, dtype=np.float32)
        return self._data[begin - self.start:end - self.start].copy()
