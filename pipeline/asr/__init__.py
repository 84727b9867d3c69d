"""Speech recognition engines: one protocol, a Whisper engine and two transducer engines
(an icefall export on sherpa-onnx, or in TorchScript on torch)."""

from .base import AsrEngine, BatchAsrEngine, map_engine_errors, resolve_device
from .torch_transducer import TorchTransducerEngine, TorchTransducerOptions
from .transducer import TransducerEngine, TransducerOptions
from .whisper import WhisperEngine, WhisperOptions

__all__ = ["AsrEngine", "BatchAsrEngine", "map_engine_errors", "resolve_device",
           "WhisperEngine", "WhisperOptions",
           "TransducerEngine", "TransducerOptions", "TorchTransducerEngine",
           "TorchTransducerOptions"]
