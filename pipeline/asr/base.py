"""What every recognition engine offers the pipeline.

An engine is built once (loading its model in the constructor) and then called
for each chunk from one worker thread. It returns words already in batch form
(see :mod:`pipeline.text`) with absolute times, so the stage that stitches
chunks together never needs to know which engine ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import numpy as np

from schemas.errors import InternalError

from ..types import TimedWord

__all__ = ["AsrEngine", "map_engine_errors"]


@runtime_checkable
class AsrEngine(Protocol):
    """A speech recogniser for chunks of at most 30 s."""

    name: str
    """Short name of the engine and model, for logs and metrics."""

    def transcribe(self, audio: np.ndarray, offset: float) -> list[TimedWord]:
        """Recognise one chunk.

        Args:
            audio: float32 samples in [-1, 1], 16 kHz mono.
            offset: where the chunk starts in the file, in seconds.

        Returns:
            Lowercase, unpunctuated words in order, with times in seconds from
            the start of the file (``offset`` + time within the chunk). Empty
            for silence, noise or music.

        Raises:
            InternalError: the runtime failed (not the audio's fault).
        """
        ...


@contextmanager
def map_engine_errors(runtime: str) -> Iterator[None]:
    """Translate a runtime's exceptions into the service's internal error."""
    try:
        yield
    except (RuntimeError, ValueError, MemoryError) as exc:
        raise InternalError("Speech recognition failed.", log=f"{runtime}: {exc}") from exc
