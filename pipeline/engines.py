"""The models one worker holds, loaded once, and the CPU work the batch stages ask of them.

Model work runs on thread pools, never on the event loop, so Kafka heartbeats and
the gateway stay responsive while a file is transcribed: chunk decodes on the
``asr`` pool (one thread per model replica, so decodes of several jobs run at
once), everything else (audio decoding, VAD, diarization) on the ``models`` pool (as many
threads as ASR workers by default, so two jobs' diarizations run side by side as the bare
models' two files do, rather than queueing on one thread behind the ASR replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np

from schemas.records import SpeakerCount, TranscriptResult
from schemas.settings import ModelSettings, Settings

from .types import Region, TimedWord

__all__ = ["Engines", "AsrLayout", "PcmSamples", "load_zipformer", "import_model_code",
           "CUDA_BATCH", "CUDA_BATCH_WITH_TIMESTAMPS"]

log = logging.getLogger(__name__)

CUDA_BATCH = 16
"""Chunks per Whisper call on a GPU by default, where Whisper writes no timestamp tokens
(the CUDA default): base decoded at RTF 0.0048 in batches of 16 on an H100 against 0.0067
in batches of 4 (docs/scaling.md, "Measured on one H100")."""
CUDA_BATCH_WITH_TIMESTAMPS = 4
"""The same where timestamp tokens are on: CTranslate2's beam search then costs more per
step the more rows it carries (batch x beam), so past 4 chunks a batch is slower per
chunk."""


@dataclass(frozen=True)
class AsrLayout:
    """How batch ASR uses the machine: the model settings with their 0s chosen by device."""

    device: str
    workers: int
    """Decodes at once, each on a model replica of its own."""
    threads: int
    """Threads per decode (CPU)."""
    batch_size: int
    """Chunks per decode call."""
    stage_workers: int = 1
    """Decode, VAD and diarization calls at once (the ``models`` pool's threads)."""
    timestamp_tokens: bool = True
    """Whisper writes timestamp tokens (see ``ModelSettings.timestamp_tokens``)."""
    model_calls: int = 0
    """Model calls of both pools that run at once; 0: no limit."""

    @classmethod
    def of(cls, m: ModelSettings, cores: int | None = None) -> "AsrLayout":
        from .asr.base import resolve_device
        device = resolve_device(m.device)
        cores = cores or len(os.sched_getaffinity(0))
        timestamps = m.timestamp_tokens if m.timestamp_tokens is not None else device != "cuda"
        if device == "cuda":
            workers = m.asr_workers or 1
            batch = CUDA_BATCH_WITH_TIMESTAMPS if timestamps else CUDA_BATCH
            return cls(device, workers, m.cpu_threads or 1, m.batch_size or batch,
                       m.stage_workers or workers, timestamps, m.model_calls)
        workers = m.asr_workers or max(1, min(4, cores))
        threads = m.cpu_threads or max(1, cores // workers)
        return cls(device, workers, threads, m.batch_size or 1, m.stage_workers or workers,
                   timestamps, m.model_calls or workers * threads)


def load_zipformer(m: ModelSettings, layout: AsrLayout) -> Any:
    """The batch Zipformer of ``m.batch_model_dir``: sherpa-onnx for an ONNX export, the
    torch engine for a TorchScript one."""
    from .models import zipformer_form
    if zipformer_form(m.batch_model_dir) == "onnx":
        from .asr.transducer import TransducerEngine, TransducerOptions
        return TransducerEngine(m.batch_model_dir, TransducerOptions(
            num_threads=layout.threads, provider=layout.device,
            decoding_method=m.zipformer_decoding, max_active_paths=m.zipformer_beam))
    from .asr.torch_transducer import TorchTransducerEngine, TorchTransducerOptions
    return TorchTransducerEngine(m.batch_model_dir, TorchTransducerOptions(
        device=layout.device, num_threads=layout.threads, decoding_method=m.zipformer_decoding,
        beam=m.zipformer_beam))


_imports = threading.Lock()
_imported = False


def import_model_code() -> None:
    """Imports what the pools' threads run (torch, scipy, onnxruntime: seconds), one thread
    at a time: scipy's package set-up breaks for good when two threads run it at once.

    ``warm()`` calls it first, off the event loop, so the API and the consumer start while
    it runs; every pool call waits for it, since after a restart replayed records reach
    the stages while ``warm()`` is still importing.
    """
    global _imported
    if _imported:
        return
    with _imports:
        if not _imported:
            from . import audio, diarization, vad  # noqa: F401
            _imported = True


def _read_chunk(pcm: Path, chunk: Region) -> np.ndarray:
    import_model_code()
    from .audio import read_pcm
    return read_pcm(pcm, chunk)


class Engines:
    """Lazily loaded recognisers; ``warm()`` loads them ahead of the first job."""

    def __init__(self, settings: Settings, registry: Any = None) -> None:
        """``registry``: the process's Prometheus registry, for the ASR batch-size histogram."""
        from .asr.batching import BatchingTranscriber, BatchOptions
        self.settings = settings
        self.layout = layout = AsrLayout.of(settings.models)
        self.pool = ThreadPoolExecutor(layout.stage_workers, thread_name_prefix="models")
        self.asr_pool = ThreadPoolExecutor(layout.workers, thread_name_prefix="asr")
        self._lock = threading.Lock()
        # Both pools' threads take a slot for each model call: with more calls than cores
        # at once, each ran slower (see ``ModelSettings.model_calls``).
        self._slots: Any = (threading.BoundedSemaphore(layout.model_calls)
                            if layout.model_calls else contextlib.nullcontext())
        self._asr: Any = None
        self._diarizer: Any = None
        self._vad: Any = None
        self.batcher = BatchingTranscriber(
            lambda: self.asr, self._run_asr,
            BatchOptions(max_batch=layout.batch_size, parallel=layout.workers,
                         max_wait_ms=settings.models.batch_max_wait_ms),
            registry=registry)

    @property
    def batch_size(self) -> int:
        return self.layout.batch_size

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the models pool; a coroutine function is awaited instead.

        The transcribe stage calls ``run(engines.transcribe, ...)``: that one is a
        coroutine, which hands its chunks to the batcher, which in turn runs the
        batched decodes here.
        """
        if inspect.iscoroutinefunction(fn):
            return await fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self.pool, self._slotted, fn,
                                                                *args)

    async def _run_asr(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.asr_pool, self._slotted,
                                                                fn, *args)

    def _slotted(self, fn: Callable[..., Any], *args: Any) -> Any:
        import_model_code()
        with self._slots:
            return fn(*args)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.asr_pool.shutdown(wait=False, cancel_futures=True)

    # --- models -------------------------------------------------------------------------------

    @property
    def asr(self) -> Any:
        with self._lock:
            if self._asr is None and self.settings.models.batch_engine == "zipformer":
                self._asr = load_zipformer(self.settings.models, self.layout)
                log.info("models: %s loaded on %s (%d decodes at once, batches of up to %d)",
                         self._asr.name, self.layout.device, self.layout.workers,
                         self.layout.batch_size)
            if self._asr is None:
                from .asr.whisper import WhisperEngine, WhisperOptions
                from .models import resolve_whisper
                m, layout = self.settings.models, self.layout
                path = resolve_whisper(m.whisper, self.settings.data_path / "models")
                self._asr = WhisperEngine(path, WhisperOptions(
                    device=layout.device, device_index=m.device_index,
                    compute_type=None if m.compute_type == "auto" else m.compute_type,
                    beam_size=m.beam_size, cpu_threads=layout.threads,
                    timestamp_tokens=layout.timestamp_tokens,
                    **({} if m.fit_window else {"window_pad_frames": None}),
                    workers=layout.workers))
                log.info("models: whisper %s loaded from %s on %s (%d decodes at once, "
                         "%d thread(s) each, batches of up to %d)", m.whisper, path,
                         self._asr.device, layout.workers, layout.threads, layout.batch_size)
            return self._asr

    @property
    def diarizer(self) -> Any:
        with self._lock:
            if self._diarizer is None:
                import torch

                from .diarization import Diarizer, SpeakerEmbedder

                # The models thread gets what the ASR workers leave (at least one core);
                # torch's default, every core, would fight them for the CPU under load.
                layout = self.layout
                spare = len(os.sched_getaffinity(0)) - (
                    layout.workers * layout.threads if layout.device == "cpu" else 0)
                torch.set_num_threads(max(1, spare))
                self._diarizer = Diarizer(SpeakerEmbedder())
                log.info("models: speaker segmentation and embeddings loaded")
            return self._diarizer

    @property
    def vad(self) -> Any:
        with self._lock:
            if self._vad is None:
                from .vad import SileroVad
                self._vad = SileroVad()
            return self._vad

    def warm(self) -> None:
        import_model_code()
        _ = self.asr, self.diarizer, self.vad

    # --- work (called on the pool) ----------------------------------------------------------

    def decode(self, src: Path, dst: BinaryIO, max_duration_s: float) -> float:
        from .audio import decode_to_pcm
        return decode_to_pcm(src, dst, max_duration_s=max_duration_s)

    def channels(self, src: Path) -> int:
        from .audio import audio_channels
        return audio_channels(src)

    def decode_channels(self, src: Path, dsts: list[BinaryIO], max_duration_s: float) -> float:
        from .audio import decode_channels_to_pcm
        return decode_channels_to_pcm(src, dsts, max_duration_s=max_duration_s)

    def speech(self, pcm: Path) -> tuple[list[Region], list[Region]]:
        from .vad import VadOptions, plan_chunks, speech_regions
        opts = VadOptions()
        regions = speech_regions(pcm, opts, self.vad)
        return regions, plan_chunks(regions, opts)

    async def transcribe(self, pcm: Path, chunks: list[Region],
                         hotwords: str | None = None) -> list[TimedWord]:
        """Recognise a job's chunks, batched with the chunks of the other jobs in flight
        (those with the same ``hotwords``: the job's key terms, Whisper's prompt).

        At most a batch per ASR worker of the job's chunks are read and waiting at
        once, so a long file never holds all its audio in memory, yet fills every
        worker when it is the only job. The chunks rank by the job's arrival here: the
        oldest job in flight is recognised first, on every worker.
        """
        window = asyncio.Semaphore(self.layout.batch_size * self.layout.workers)
        rank = time.monotonic()

        async def one(chunk: Region) -> list[TimedWord]:
            async with window:
                audio = await asyncio.to_thread(_read_chunk, pcm, chunk)
                return await self.batcher.transcribe(audio, chunk.start, rank, hotwords)

        words: list[TimedWord] = []
        for part in await asyncio.gather(*(one(c) for c in chunks)):
            words.extend(part)
        return words

    def diarize(self, pcm: Path, speech: list[Region], words: list[TimedWord],
                speakers: SpeakerCount | None = None) -> TranscriptResult:
        from .diarization import assemble
        if not words:
            return assemble(words, [])
        with PcmSamples(pcm) as samples:  # the diarizer reads only the speech regions
            turns = self.diarizer.diarize(samples, speech, speakers)  # type: ignore[arg-type]
        return assemble(words, turns)

    def channel_result(self, speech: dict[int, list[Region]], words: list[TimedWord],
                       channels: int) -> TranscriptResult:
        """A multichannel job's result: the speaker is the channel, nothing is diarized."""
        from .diarization import assemble_channels
        return assemble_channels(words, speech).model_copy(update={"audio_channels": channels})

    @staticmethod
    def undiarized(words: list[TimedWord]) -> TranscriptResult:
        """The result of a job that is not diarized: every word is ``speaker_1``'s and
        utterances break at pauses; no speaker model runs."""
        from .diarization import assemble
        return assemble(words, [])

    # --- (de)serialising intermediate results -------------------------------------------------

    @staticmethod
    def dump_regions(regions: list[Region]) -> bytes:
        return json.dumps([[r.start, r.end] for r in regions]).encode()

    @staticmethod
    def load_regions(raw: bytes) -> list[Region]:
        return [Region(s, e) for s, e in json.loads(raw)]

    @staticmethod
    def dump_words(words: list[TimedWord]) -> bytes:
        """A word's ``channel`` only where it has one (a multichannel job's)."""
        return json.dumps([{k: v for k, v in asdict(w).items()
                            if v is not None or k != "channel"} for w in words]).encode()

    @staticmethod
    def load_words(raw: bytes) -> list[TimedWord]:
        return [TimedWord(**w) for w in json.loads(raw)]


class PcmSamples:
    """A raw PCM file seen as float32 samples: ``len()`` and slices, read through a memory map.

    Stands in for the whole-file array the diarizer takes, so a long file is never
    loaded whole: each slice reads and converts only its span.
    """

    def __init__(self, path: Path) -> None:
        from .audio import PCM_DTYPE
        n = Path(path).stat().st_size // PCM_DTYPE.itemsize
        self._map = np.memmap(path, dtype=PCM_DTYPE, mode="r", shape=(n,)) if n else \
            np.zeros(0, dtype=PCM_DTYPE)

    def __enter__(self) -> "PcmSamples":
        return self

    def __exit__(self, *exc: object) -> None:
        del self._map

    def __len__(self) -> int:
        return int(self._map.shape[0])

    def __getitem__(self, index: slice) -> np.ndarray:
        return self._map[index].astype(np.float32) / np.float32(32768.0)
