"""Silero VAD for live streams: one shared ONNX session, per-stream recurrent state.

``silero_vad.OnnxWrapper`` keeps the recurrent state inside the model object, so it
would need one model per session, and :class:`pipeline.vad.SileroVad` runs whole files.
Here the ONNX session (thread-safe, read-only) is shared and each :class:`VadStream`
owns its 2x1x128 state and 64-sample context.
Endpointing itself lives in the recognizer; this module only yields probabilities.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import numpy as np
import onnxruntime

__all__ = ["StreamingVad", "VadStream", "VAD_WINDOW", "default_vad_path"]

VAD_WINDOW = 512
"""Samples per VAD decision at 16 kHz (32 ms), fixed by the Silero model."""

_CONTEXT = 64


def default_vad_path() -> Path:
    """The Silero VAD v6 ONNX file bundled with the ``silero-vad`` package."""
    return Path(str(files("silero_vad") / "data" / "silero_vad.onnx"))


class StreamingVad:
    """The Silero VAD v6 ONNX model, loaded once per process.

    Args:
        path: the ``silero_vad.onnx`` file (shipped inside the ``silero-vad`` package).
    """

    def __init__(self, path: str | Path) -> None:
        opts = onnxruntime.SessionOptions()
        # One thread: calls are tiny (~0.2 ms) and come from a dedicated thread.
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(
            str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        self._sr = np.array(16000, dtype=np.int64)

    def stream(self) -> VadStream:
        """A fresh per-session state."""
        return VadStream(self)

    def _run(self, window: np.ndarray, state: np.ndarray) -> tuple[float, np.ndarray]:
        prob, new_state = self._session.run(
            None, {"input": window[None, :], "state": state, "sr": self._sr})
        return float(prob[0, 0]), new_state


class VadStream:
    """Speech probabilities of one stream, one per 512-sample window.

    Not thread-safe; one caller at a time (the engine serialises calls per session).
    """

    def __init__(self, model: StreamingVad) -> None:
        self._model = model
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(_CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)

    def accept(self, samples: np.ndarray) -> np.ndarray:
        """Probabilities for every complete window now available.

        Args:
            samples: float32 mono 16 kHz audio following the previous call's.

        Returns:
            float32 array, one speech probability per 512-sample window completed by
            this call (leftover samples wait for the next call).
        """
        buf = np.concatenate([self._pending, samples]) if len(self._pending) else samples
        n = len(buf) // VAD_WINDOW
        probs = np.empty(n, dtype=np.float32)
        for i in range(n):
            chunk = buf[i * VAD_WINDOW:(i + 1) * VAD_WINDOW]
            window = np.concatenate([self._context, chunk])
            probs[i], self._state = self._model._run(window, self._state)
            self._context = chunk[-_CONTEXT:]
        self._pending = buf[n * VAD_WINDOW:].copy()
        return probs

    def snapshot(self) -> bytes:
        """The recurrent state and context after the last complete window (float32)."""
        return self._state.astype(np.float32).tobytes() + self._context.astype(np.float32).tobytes()

    def restore(self, snapshot: bytes) -> None:
        """Go on from a :meth:`snapshot`: the next window judged is the one after it."""
        values = np.frombuffer(snapshot, dtype=np.float32)
        if len(values) != self._state.size + _CONTEXT:
            raise ValueError("not a VAD snapshot")
        self._state = values[:self._state.size].reshape(self._state.shape).copy()
        self._context = values[self._state.size:].copy()
        self._pending = np.zeros(0, dtype=np.float32)
