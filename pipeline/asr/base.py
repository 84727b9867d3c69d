"""What every recognition engine offers the pipeline.

An engine is built once (loading its model in the constructor) and then called
for each chunk from one worker thread. It returns words already in batch form
(see :mod:`pipeline.text`) with absolute times, so the stage that stitches
chunks together never needs to know which engine ran.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import numpy as np

from schemas.errors import InternalError

from ..types import TimedWord

__all__ = ["AsrEngine", "BatchAsrEngine", "map_engine_errors", "resolve_device",
           "cuda_device_count"]


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


@runtime_checkable
class BatchAsrEngine(AsrEngine, Protocol):
    """An engine that also recognises several chunks in one call (GPU-friendly)."""

    def transcribe_batch(self, items: Sequence[tuple[np.ndarray, float]]) -> list[list[TimedWord]]:
        """Recognise each ``(audio, offset)`` chunk as :meth:`transcribe` would, together."""
        ...


def cuda_device_count() -> int:
    """CUDA devices CTranslate2 can use (0 without a GPU or without CUDA libraries)."""
    try:
        import ctranslate2
        return int(ctranslate2.get_cuda_device_count())
    except (ImportError, RuntimeError, OSError):
        return 0


def resolve_device(device: str) -> str:
    """``auto`` becomes ``cuda`` where a CUDA device is present, else ``cpu``."""
    if device == "auto":
        return "cuda" if cuda_device_count() > 0 else "cpu"
    return device


@contextmanager
def map_engine_errors(runtime: str) -> Iterator[None]:
    """Translate a runtime's exceptions into the service's internal error."""
    try:
        yield
    except (RuntimeError, ValueError, MemoryError) as exc:
        raise InternalError("Speech recognition failed.", log=f"{runtime}: {exc}") from exc
