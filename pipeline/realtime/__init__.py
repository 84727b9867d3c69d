"""Streaming recognition engine of ``a5s-v2-streaming``: Silero VAD endpointing + Whisper.

Library code only (no WebSocket, no Kafka): a worker loads :class:`StreamingModels`
once, builds one :class:`RealtimeEngine`, and drives a session per live connection with
``open`` / ``await accept`` / ``await finish`` / ``close``. Each :class:`Update` carries
the whole transcript so far, punctuated and cased, and whether its segment is settled.
:class:`SessionRecognizer` is the same logic run inline (blocking), for tests and tools.
"""

from .decoder import Decoded, DecodeInput, WhisperDecoder
from .engine import RealtimeEngine
from .models import ModelOptions, StreamingModels
from .options import DecodeOptions, EngineOptions, RecognizerOptions, VadOptions
from .recognizer import SessionRecognizer, Update, pcm_to_float
from .vad import StreamingVad, VadStream, default_vad_path
from .vocabulary import Vocabulary, VocabularyTerm

__all__ = [
    "DecodeInput", "DecodeOptions", "Decoded", "EngineOptions", "ModelOptions", "RealtimeEngine",
    "RecognizerOptions", "SessionRecognizer", "StreamingModels", "StreamingVad", "Update",
    "VadOptions", "VadStream", "Vocabulary", "VocabularyTerm", "WhisperDecoder",
    "default_vad_path", "pcm_to_float",
]
