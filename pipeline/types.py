"""Plain result types passed between the pipeline's engines (no I/O, no Kafka).

The engines (decode, VAD, ASR, diarization) exchange these; the stages turn them
into the ``schemas`` records and API resources.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SAMPLE_RATE", "Region", "TimedWord", "SpeakerTurn"]

SAMPLE_RATE = 16000
"""Every engine works on 16 kHz mono float32 PCM in [-1, 1]."""


@dataclass(frozen=True, slots=True)
class Region:
    """A span of audio in seconds from the start of the file (speech region, chunk)."""

    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class TimedWord:
    """A recognised word: batch form (lowercase, no punctuation), times in seconds."""

    text: str
    start: float
    end: float
    probability: float = 1.0
    channel: int | None = None
    """The channel (1-based) a multichannel job's word was heard on; None: the mix."""
    formatted: str | None = None
    """The word as the recogniser wrote it (cased, punctuated: ``"Hello,"``), without its
    leading space; None where the recogniser writes no such form (the transducers)."""


@dataclass(frozen=True, slots=True)
class SpeakerTurn:
    """A span attributed to one speaker by diarization; turns may overlap."""

    speaker: int
    start: float
    end: float
