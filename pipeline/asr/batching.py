"""Dynamic batching of chunk decodes across the jobs one worker has in flight.

Every chunk of every job in the transcribe stage becomes a request here. One
loop gathers the pending requests and decodes a batch in one engine call on an
ASR thread (``transcribe_batch``: one encoder pass, one beam search, one
alignment for the whole batch). A batch leaves when ``max_batch`` requests are
waiting, or when the oldest has waited ``max_wait_ms`` (the latency budget: a
lone job waits at most that long for company). Up to ``parallel`` batches run at
once (one per model replica); while they all run, new requests queue, so under
load batches fill without waiting at all.

Requests wait in the order of their ``rank`` (the engines give each job's chunks the
time the job reached the stage), then of arrival: the oldest job's chunks go first,
on every replica, so jobs finish one after another and each can go on to diarization
while the next is recognised, instead of all the jobs in flight finishing together at
the end. When more requests wait than fit, the batch is the first request and those
closest to it in duration (beam search runs as long as the longest item, so similar
lengths waste the least). The first request always goes, and a later job never ranks
before an earlier one, so nothing starves. If a batched call fails, its items are
decoded one by one, so only a chunk that fails alone fails its job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..types import SAMPLE_RATE, TimedWord

__all__ = ["BatchOptions", "BatchingTranscriber", "BatchStats", "choose_batch"]

log = logging.getLogger("a5s.asr.batching")

Run = Callable[..., Awaitable[Any]]
"""Runs ``fn(*args)`` on the models thread: ``Engines.run``."""


class BatchOptions(BaseModel):
    """How chunk requests are grouped."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_batch: int = Field(8, ge=1)
    """Chunks decoded in one call, at most."""
    max_wait_ms: float = Field(20.0, ge=0)
    """The longest a request waits for others before its batch leaves, ms."""
    parallel: int = Field(1, ge=1)
    """Batches decoded at once (the engine's workers)."""
    summary_interval_s: float = Field(60.0, gt=0)
    """How often the batch-size summary is logged, s."""


@dataclass
class _Request:
    audio: np.ndarray
    offset: float
    future: asyncio.Future[list[TimedWord]]
    enqueued: float = field(default_factory=time.monotonic)
    rank: float = 0.0
    """Served in this order (then ``enqueued``); the job's arrival at the stage."""
    hotwords: str | None = None
    """The job's key terms for the recogniser's prompt; a batch holds one prompt only."""

    @property
    def duration(self) -> float:
        return self.audio.size / SAMPLE_RATE


@dataclass
class BatchStats:
    """What the batcher did: batch sizes, items, the longest wait."""

    sizes: Counter[int] = field(default_factory=Counter)
    items: int = 0
    max_wait_s: float = 0.0

    @property
    def batches(self) -> int:
        return sum(self.sizes.values())

    @property
    def mean_size(self) -> float:
        return self.items / self.batches if self.batches else 0.0

    def summary(self) -> str:
        sizes = ", ".join(f"{k}x{v}" for k, v in sorted(self.sizes.items()))
        return (f"{self.batches} batches, {self.items} chunks, mean size {self.mean_size:.2f}, "
                f"longest wait {self.max_wait_s * 1000:.0f} ms (size x count: {sizes})")


def choose_batch(durations: Sequence[float], max_batch: int) -> list[int]:
    """Indices of the next batch: the oldest request (index 0) and its nearest in duration.

    Args:
        durations: durations of the waiting requests, oldest first.
        max_batch: the largest batch.

    Returns:
        Indices into ``durations``, the oldest first.
    """
    if len(durations) <= max_batch:
        return list(range(len(durations)))
    order = sorted(range(len(durations)), key=lambda i: (durations[i], i))
    at = order.index(0)
    best: tuple[float, int] | None = None
    for lo in range(max(0, at - max_batch + 1), min(at, len(order) - max_batch) + 1):
        window = order[lo:lo + max_batch]
        spread = durations[window[-1]] - durations[window[0]]
        if best is None or spread < best[0]:
            best = (spread, lo)
    assert best is not None  # the oldest request always lies in some window
    chosen = order[best[1]:best[1] + max_batch]
    return sorted(chosen)


class BatchingTranscriber:
    """Collects chunk requests from concurrent jobs and decodes them in batches.

    Args:
        engine: returns the loaded engine (called on the models thread, so a slow
            first load never blocks the event loop). An engine without
            ``transcribe_batch`` is called chunk by chunk.
        run: runs a function on an ASR thread (one of ``opts.parallel``).
        opts: batching options.
        registry: a Prometheus registry for the batch-size histogram, if any.
    """

    def __init__(self, engine: Callable[[], Any], run: Run, opts: BatchOptions | None = None,
                 registry: Any = None) -> None:
        self._engine = engine
        self._run = run
        self.opts = opts or BatchOptions()
        self.stats = BatchStats()
        self._pending: list[_Request] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._summarised = time.monotonic()
        self._logged_items = 0
        self._histogram = None
        if registry is not None:
            from prometheus_client import Histogram
            self._histogram = Histogram(
                "a5s_asr_batch_size", "Chunks per batched ASR call.",
                buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64), registry=registry)

    async def transcribe(self, audio: np.ndarray, offset: float, rank: float | None = None,
                         hotwords: str | None = None) -> list[TimedWord]:
        """Recognise one chunk (batched with whatever else is waiting); see ``AsrEngine``.

        ``rank``: requests are served in its order (default: their arrival).
        ``hotwords``: key terms for the engine's prompt (engines with ``takes_hotwords``);
        the chunk is batched only with chunks of the same terms.
        """
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        request = _Request(audio, offset, loop.create_future(), now,
                           now if rank is None else rank, hotwords)
        self._pending.append(request)
        self._ensure_loop()
        assert self._wake is not None
        self._wake.set()
        try:
            return await request.future
        finally:
            if not request.future.done():  # the caller was cancelled: forget the request
                request.future.cancel()
                if request in self._pending:
                    self._pending.remove(request)

    async def transcribe_many(self, items: Sequence[tuple[np.ndarray, float]]
                              ) -> list[list[TimedWord]]:
        """Recognise several chunks (e.g. one job's), all batched with the other jobs."""
        return list(await asyncio.gather(*(self.transcribe(a, o) for a, o in items)))

    async def close(self) -> None:
        tasks = [t for t in (self._task, *self._running) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._running.clear()
        for request in self._pending:
            request.future.cancel()
        self._pending.clear()

    # --- the loop ---------------------------------------------------------------------------

    def _ensure_loop(self) -> None:
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._serve(),
                                                                name="a5s.asr-batcher")

    async def _serve(self) -> None:
        assert self._wake is not None
        while True:
            self._pending = [r for r in self._pending if not r.future.done()]
            if len(self._running) >= self.opts.parallel:
                # Every replica is busy: requests gather meanwhile, so the next batch is full.
                await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
                continue
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._pending.sort(key=lambda r: (r.rank, r.enqueued))
            oldest = min(r.enqueued for r in self._pending)
            budget = oldest + self.opts.max_wait_ms / 1000 - time.monotonic()
            if len(self._pending) < self.opts.max_batch and budget > 0:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), budget)
                except TimeoutError:
                    pass
                continue
            alike = [r for r in self._pending if r.hotwords == self._pending[0].hotwords]
            picked = choose_batch([r.duration for r in alike], self.opts.max_batch)
            batch = [alike[i] for i in picked]
            chosen = {id(r) for r in batch}
            self._pending = [r for r in self._pending if id(r) not in chosen]
            task = asyncio.get_running_loop().create_task(self._decode(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _decode(self, batch: list[_Request]) -> None:
        now = time.monotonic()
        self.stats.max_wait_s = max(self.stats.max_wait_s, now - min(r.enqueued for r in batch))
        self.stats.sizes[len(batch)] += 1
        self.stats.items += len(batch)
        if self._histogram is not None:
            self._histogram.observe(len(batch))
        self._maybe_summarise(now)
        items = [(r.audio, r.offset) for r in batch]
        hotwords = batch[0].hotwords
        try:
            results = await self._run(self._decode_on_pool, items, hotwords)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one bad chunk must not fail its batch-mates
            if len(batch) == 1:
                _settle(batch[0].future, exc=exc)
                return
            log.warning("a batch of %d chunks failed (%r); decoding them one by one",
                        len(batch), exc)
            for request in batch:
                try:
                    words = await self._run(self._decode_on_pool, [(request.audio,
                                                                    request.offset)],
                                            hotwords)
                except asyncio.CancelledError:
                    raise
                except Exception as single:  # delivered to the job that owns the chunk
                    _settle(request.future, exc=single)
                else:
                    _settle(request.future, words[0])
            return
        for request, words in zip(batch, results, strict=True):
            _settle(request.future, words)

    def _decode_on_pool(self, items: list[tuple[np.ndarray, float]],
                        hotwords: str | None = None) -> list[list[TimedWord]]:
        engine = self._engine()
        # Only an engine that takes a prompt gets the key terms (the transducers take none).
        extra = {"hotwords": hotwords} if hotwords and getattr(engine, "takes_hotwords",
                                                               False) else {}
        if len(items) > 1 and hasattr(engine, "transcribe_batch"):
            return list(engine.transcribe_batch(items, **extra))
        return [engine.transcribe(audio, offset, **extra) for audio, offset in items]

    def _maybe_summarise(self, now: float) -> None:
        if now - self._summarised >= self.opts.summary_interval_s and \
                self.stats.items > self._logged_items:
            log.info("asr batching: %s", self.stats.summary())
            self._summarised = now
            self._logged_items = self.stats.items


def _settle(future: asyncio.Future[list[TimedWord]], words: list[TimedWord] | None = None,
            exc: BaseException | None = None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(words or [])
