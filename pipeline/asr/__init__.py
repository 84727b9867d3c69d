"""Speech recognition engines: one protocol, a Whisper engine and a transducer engine."""

from .base import AsrEngine, BatchAsrEngine, map_engine_errors, resolve_device
from .transducer import TransducerEngine, TransducerOptions
from .whisper import WhisperEngine, WhisperOptions

__all__ = ["AsrEngine", "BatchAsrEngine", "map_engine_errors", "resolve_device",
           "WhisperEngine", "WhisperOptions",
           "TransducerEngine", "TransducerOptions"]
