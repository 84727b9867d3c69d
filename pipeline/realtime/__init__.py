"""Streaming recognition engine of ``a5s-v2-streaming``: Silero VAD endpointing + Whisper.

Library code only (no WebSocket, no Kafka): a worker loads :class:`StreamingModels`
once, builds one :class:`RealtimeEngine`, and drives a session per live connection with
``open`` / ``await accept`` / ``await finish`` / ``close``. Each :class:`Update` carries
the whole transcript so far, punctuated and cased, and whether its segment is settled.
:class:`SessionRecognizer` is the same logic run inline (blocking), for tests and tools.
"""

from .decoder import Decoded, DecodeInput, WhisperDecoder
from .engine import RealtimeEngine
from .model_files import assemble_split_model, silero_vad_path, whisper_base_dir, whisper_tiny_en_dir
from .models import ModelOptions, StreamingModels
from .options import DecodeOptions, EngineOptions, RecognizerOptions, VadOptions
from .recognizer import SessionRecognizer, Update, pcm_to_float
from .vad import SileroVad, VadStream
from .vocabulary import Vocabulary, VocabularyTerm

__all__ = [
    "DecodeInput", "DecodeOptions", "Decoded", "EngineOptions", "ModelOptions", "RealtimeEngine",
    "RecognizerOptions", "SessionRecognizer", "SileroVad", "StreamingModels", "Update", "VadOptions",
    "VadStream", "Vocabulary", "VocabularyTerm", "WhisperDecoder", "assemble_split_model",
    "pcm_to_float", "silero_vad_path", "whisper_base_dir", "whisper_tiny_en_dir",
]
