"""Speech recognition engines: one protocol, a Whisper engine and a transducer engine."""

from .base import AsrEngine, map_engine_errors
from .transducer import TransducerEngine, TransducerOptions
from .whisper import WhisperEngine, WhisperOptions

__all__ = ["AsrEngine", "map_engine_errors", "WhisperEngine", "WhisperOptions",
           "TransducerEngine", "TransducerOptions"]
