"""The models one worker holds, loaded once, and the CPU work the batch stages ask of them.

Model work runs on the named ``models`` thread pool, never on the event loop, so
Kafka heartbeats and the gateway stay responsive while a file is transcribed.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np

from schemas.records import TranscriptResult
from schemas.settings import Settings

from .types import Region, TimedWord

__all__ = ["Engines"]

log = logging.getLogger(__name__)


class Engines:
    """Lazily loaded recognisers; ``warm()`` loads them ahead of the first job."""

    def __init__(self, settings: Settings, registry: Any = None) -> None:
        """``registry``: the process's Prometheus registry, for the ASR batch-size histogram."""
        from .asr.batching import BatchingTranscriber, BatchOptions
        self.settings = settings
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="models")
        self._lock = threading.Lock()
        self._asr: Any = None
        self._diarizer: Any = None
        self._vad: Any = None
        from .asr.base import resolve_device
        m = settings.models
        self.batch_size = m.batch_size or (16 if resolve_device(m.device) == "cuda" else 1)
        """Chunks per ASR call: the setting, or by device when it is 0."""
        self.batcher = BatchingTranscriber(
            lambda: self.asr, self.run,
            BatchOptions(max_batch=self.batch_size, max_wait_ms=m.batch_max_wait_ms),
            registry=registry)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the models thread; a coroutine function is awaited instead.

        The transcribe stage calls ``run(engines.transcribe, ...)``: that one is a
        coroutine, which hands its chunks to the batcher, which in turn runs the
        batched decodes here.
        """
        if inspect.iscoroutinefunction(fn):
            return await fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    # --- models -------------------------------------------------------------------------------

    @property
    def asr(self) -> Any:
        with self._lock:
            if self._asr is None:
                from .asr.whisper import WhisperEngine, WhisperOptions
                from .models import resolve_whisper
                m = self.settings.models
                path = resolve_whisper(m.whisper, self.settings.data_path / "models")
                self._asr = WhisperEngine(path, WhisperOptions(
                    device=m.device, device_index=m.device_index,
                    compute_type=None if m.compute_type == "auto" else m.compute_type,
                    beam_size=m.beam_size, cpu_threads=m.cpu_threads))
                log.info("models: whisper %s loaded from %s on %s (batches of up to %d)",
                         m.whisper, path, self._asr.device, self.batch_size)
            return self._asr

    @property
    def diarizer(self) -> Any:
        with self._lock:
            if self._diarizer is None:
                from .diarization import Diarizer, SpeakerEmbedder
                self._diarizer = Diarizer(SpeakerEmbedder())
                log.info("models: speaker embeddings loaded")
            return self._diarizer

    @property
    def vad(self) -> Any:
        with self._lock:
            if self._vad is None:
                from .vad import SileroVad
                self._vad = SileroVad()
            return self._vad

    def warm(self) -> None:
        _ = self.asr, self.diarizer, self.vad

    # --- work (called on the pool) ----------------------------------------------------------

    def decode(self, src: Path, dst: BinaryIO, max_duration_s: float) -> float:
        from .audio import decode_to_pcm
        return decode_to_pcm(src, dst, max_duration_s=max_duration_s)

    def speech(self, pcm: Path) -> tuple[list[Region], list[Region]]:
        from .vad import VadOptions, plan_chunks, speech_regions
        opts = VadOptions()
        regions = speech_regions(pcm, opts, self.vad)
        return regions, plan_chunks(regions, opts)

    async def transcribe(self, pcm: Path, chunks: list[Region]) -> list[TimedWord]:
        """Recognise a job's chunks, batched with the chunks of the other jobs in flight.

        At most ``batch_size`` of the job's chunks are read and waiting at once, so
        a long file never holds all its audio in memory. With ``batch_size`` 1 the
        chunks are decoded one at a time on the models thread, as before batching.
        """
        from .audio import read_pcm
        if self.batch_size <= 1:
            return await self.run(self.transcribe_sequential, pcm, chunks)
        window = asyncio.Semaphore(self.batch_size)

        async def one(chunk: Region) -> list[TimedWord]:
            async with window:
                audio = await asyncio.to_thread(read_pcm, pcm, chunk)
                return await self.batcher.transcribe(audio, chunk.start)

        words: list[TimedWord] = []
        for part in await asyncio.gather(*(one(c) for c in chunks)):
            words.extend(part)
        return words

    def transcribe_sequential(self, pcm: Path, chunks: list[Region]) -> list[TimedWord]:
        """One chunk after another on the calling thread (the models thread)."""
        from .audio import read_pcm
        words: list[TimedWord] = []
        for chunk in chunks:
            words.extend(self.asr.transcribe(read_pcm(pcm, chunk), chunk.start))
        return words

    def diarize(self, pcm: Path, speech: list[Region],
                words: list[TimedWord]) -> TranscriptResult:
        from .diarization import assemble
        if not words:
            return assemble(words, [])
        with _PcmSamples(pcm) as samples:  # the diarizer reads only the speech regions
            turns = self.diarizer.diarize(samples, speech)  # type: ignore[arg-type]
        return assemble(words, turns)

    # --- (de)serialising intermediate results -------------------------------------------------

    @staticmethod
    def dump_regions(regions: list[Region]) -> bytes:
        return json.dumps([[r.start, r.end] for r in regions]).encode()

    @staticmethod
    def load_regions(raw: bytes) -> list[Region]:
        return [Region(s, e) for s, e in json.loads(raw)]

    @staticmethod
    def dump_words(words: list[TimedWord]) -> bytes:
        return json.dumps([asdict(w) for w in words]).encode()

    @staticmethod
    def load_words(raw: bytes) -> list[TimedWord]:
        return [TimedWord(**w) for w in json.loads(raw)]


class _PcmSamples:
    """A raw PCM file seen as float32 samples: ``len()`` and slices, read through a memory map.

    Stands in for the whole-file array the diarizer takes, so a long file is never
    loaded whole: each slice reads and converts only its span.
    """

    def __init__(self, path: Path) -> None:
        from .audio import PCM_DTYPE
        n = Path(path).stat().st_size // PCM_DTYPE.itemsize
        self._map = np.memmap(path, dtype=PCM_DTYPE, mode="r", shape=(n,)) if n else \
            np.zeros(0, dtype=PCM_DTYPE)

    def __enter__(self) -> "_PcmSamples":
        return self

    def __exit__(self, *exc: object) -> None:
        del self._map

    def __len__(self) -> int:
        return int(self._map.shape[0])

    def __getitem__(self, index: slice) -> np.ndarray:
        return self._map[index].astype(np.float32) / np.float32(32768.0)
