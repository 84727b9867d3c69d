"""A process's memo of values it parsed or verified, bounded in entries."""

from __future__ import annotations

from typing import TypeVar

__all__ = ["Memo"]

K = TypeVar("K")
V = TypeVar("V")


class Memo(dict[K, V]):
    """A dict of at most ``most`` entries: a new key past that drops the oldest first.

    For values a polling client asks for again and again (a row's summary, a live row, a
    verified key); insertion order is age, which is all such a memo needs."""

    def __init__(self, most: int) -> None:
        super().__init__()
        self.most = most

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self:
            while len(self) >= self.most:
                del self[next(iter(self))]
        super().__setitem__(key, value)
