"""Async engine running many live sessions on one worker's models.

Model work never runs on the event loop. VAD (about 0.2 ms per 32 ms of audio) runs on
a one-thread pool; Whisper decodes run on a small named pool, fed by one scheduler that
serves every session (the sherpa-onnx ``streaming_server`` pattern):

* finals first (oldest segment first), then speculative finals, then partials;
* a decode batches finals of several sessions that share model and prompt length;
  partials go one at a time (``partial_batch``), so that none holds a core for long;
* partials are coalesced: a session has at most one partial waiting or running, and it
  is cut from the newest audio when it starts, so a busy engine simply shows partials
  less often instead of falling behind;
* partials yield the CPU to finals: but for a segment's first, none starts while a final
  or speculative final decode runs, and they take at most ``partial_duty`` of a thread
  (:func:`partials_held`). Partials pace themselves by their own decode time, so
  otherwise they take every free cycle of 2 cores shared with the gateway and the broker,
  and finals wait for the CPU beside them.

Usage (one event loop)::

    engine = RealtimeEngine(models, EngineOptions())
    engine.open("s1", vocabulary)
    for update in await engine.accept("s1", pcm):   # returns at once; never waits for a decode
        ...
    updates = await engine.finish("s1")             # waits for the last final
    engine.close("s1")
    await engine.aclose()

``accept`` returns the updates produced since the previous call; :meth:`RealtimeEngine.wait_updates`
waits for the next ones when no audio is arriving.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from schemas.errors import StreamError, StreamErrorCode
from schemas.records import ResumePoint

from .decoder import Decoded, DecodeInput, WhisperDecoder
from .lag import ArrivalClock, FinalLags, admits
from .models import StreamingModels
from .options import DecodeOptions, EngineOptions
from .recognizer import (DecodeKind, DecodeRequest, SessionRecognizer, Update, check_opening,
                         pcm_to_float)
from .vocabulary import VocabularyTerm

__all__ = ["RealtimeEngine", "final_decode_options", "partial_rest", "partials_held",
           "within_sessions"]


def partial_rest(elapsed: float, duty: float) -> float:
    """Seconds the partial slots stay idle after a partial batch of ``elapsed`` s, so that
    partials take at most ``duty`` of a thread's time."""
    return elapsed * (1.0 / duty - 1.0)


def partials_held(*, finals_running: int, beside_finals: bool, now: float,
                  rest_until: float) -> float:
    """Whether partials that refresh a shown text are held back now (a segment's first
    partial never is: its first words are what a user waits for).

    Returns:
        0.0 when they may start; otherwise the seconds until the rest ends, or ``inf``
        while a final decode runs (its end wakes the scheduler).
    """
    if finals_running and not beside_finals:
        return float("inf")
    return max(0.0, rest_until - now)


def final_decode_options(options: DecodeOptions, *, sessions: int,
                         wide_sessions: int | None) -> DecodeOptions:
    """The options of a final batch: the recognizer's beam while at most ``wide_sessions``
    sessions are open, greedy with more (None: the beam always).

    A beam of 3 costs each final decode about 7% more CPU; with 10 sessions on 2 cores
    finals queue for a core, and every final behind one pays for its beam again.
    """
    if within_sessions(sessions, wide_sessions):
        return options
    return options.greedy()


def within_sessions(sessions: int, limit: int | None) -> bool:
    """Whether ``sessions`` open on the worker are within a load rule's ``limit`` (None: no
    limit); the engine's rules that spend more CPU per session apply only up to theirs."""
    return limit is None or sessions <= limit


@dataclass(eq=False)
class _Session:
    id: str
    recognizer: SessionRecognizer
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    outbox: list[Update] = field(default_factory=list)
    error: BaseException | None = None
    in_flight: int = 0
    clock: ArrivalClock = field(default_factory=ArrivalClock)


class RealtimeEngine:
    """Schedules the decodes of up to ``max_sessions`` live sessions.

    All methods must be called from one event loop. Sessions are independent; calls for
    one session are serialised.

    Args:
        models: the worker's models (loaded once, shared by every session).
        options: limits, pool sizes and the recognizer options of every session.
    """

    def __init__(self, models: StreamingModels, options: EngineOptions = EngineOptions()) -> None:
        self._models = models
        self._opts = options
        prefix = options.thread_name_prefix
        self._vad_pool = ThreadPoolExecutor(1, thread_name_prefix=f"{prefix}-vad")
        self._decode_pool = ThreadPoolExecutor(options.decode_workers,
                                               thread_name_prefix=f"{prefix}-decode")
        self._sessions: dict[str, _Session] = {}
        self._work = asyncio.Event()
        self._workers: list[asyncio.Task] = []
        self._closed = False
        workers = options.decode_workers
        self._partial_slots = options.partial_workers or max(1, workers - 1)
        self._partials_running = 0
        self._finals_running = 0                 # final and speculative final batches
        self._partial_rest_until = 0.0           # monotonic; see partial_rest
        self._wake: asyncio.TimerHandle | None = None
        self._lags = FinalLags(options.admit_window_s)

    # ---------------------------------------------------------------- sessions

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    def final_lag(self, now: float | None = None) -> float | None:
        """The p90 of the recent finals' lags, s (:mod:`.lag`); None: too few finals."""
        return self._lags.quantile(0.9, time.monotonic() if now is None else now)

    def open(self, session_id: str, vocabulary: Sequence[VocabularyTerm] = (), *,
             new: bool = False) -> None:
        """Start a session; ``new``: one a client has just started, not one moved here.

        Raises:
            StreamError: ``a5sv2_unavailable`` (close 1013) when ``max_sessions`` are open,
                or for a new session past ``admit_floor`` while the recent finals lag by
                more than ``admit_final_lag_s``.
            ValueError: the id is already open.
        """
        check_opening(session_id, self._sessions, self._closed, self._opts.max_sessions)
        if new and not admits(len(self._sessions), lag := self.final_lag(),
                              floor=self._opts.admit_floor,
                              limit_s=self._opts.admit_final_lag_s):
            raise StreamError(StreamErrorCode.a5sv2_unavailable,
                              f"the recognizer is behind (finals {lag:.1f} s after their "
                              f"audio with {len(self._sessions)} sessions); retry shortly")
        rec = SessionRecognizer(self._models, vocabulary, self._opts.recognizer)
        self._sessions[session_id] = _Session(session_id, rec)

    def close(self, session_id: str) -> None:
        """Forget a session (its running decodes finish and are discarded). Idempotent."""
        self._sessions.pop(session_id, None)

    async def accept(self, session_id: str, pcm: bytes,
                     sent: float | None = None) -> list[Update]:
        """Feed audio (16 kHz mono s16le); returns at once with the updates ready so far.
        ``sent``: when the client's audio reached the service (``time.monotonic()``; default
        now), which the finals' lag is counted from.

        VAD runs on the engine's VAD thread; decodes are only scheduled, never awaited.

        Raises:
            StreamError: ``invalid_audio_frame`` for odd-length PCM, or the error of a
                failed decode (``internal_error``).
            KeyError: unknown session.
        """
        arrived = time.monotonic() if sent is None else sent
        s = self._session(session_id)
        self._start_workers()
        async with s.lock:
            self._raise_if_failed(s)
            loop = asyncio.get_running_loop()
            samples, probs = await loop.run_in_executor(self._vad_pool, s.recognizer.detect, pcm)
            updates = s.recognizer.advance(samples, probs)
            s.clock.heard(s.recognizer.heard_s, arrived)
            s.outbox += self._timed(s, updates)
            self._work.set()
            return self._drain(s)

    def resume_point(self, session_id: str) -> ResumePoint | None:
        """Where the session could be rebuilt from now (:meth:`SessionRecognizer.resume_point`)."""
        return self._session(session_id).recognizer.resume_point()

    def restore(self, session_id: str, point: ResumePoint, primer: bytes) -> None:
        """Rebuild a just-opened session from ``point``; ``primer`` is its audio
        ``[point.start, point.judged)`` (16 kHz s16le), which the VAD judged already."""
        self._session(session_id).recognizer.restore(point, pcm_to_float(primer))

    async def finish(self, session_id: str) -> list[Update]:
        """End of audio: settle the open segment and wait for every final.

        Returns:
            the remaining updates; the last is final and carries the whole transcript.
        """
        s = self._session(session_id)
        self._start_workers()
        async with s.lock:
            self._raise_if_failed(s)
            s.outbox += s.recognizer.end_of_stream()
            self._work.set()
            while s.recognizer.finals_outstanding:
                s.changed.clear()
                await s.changed.wait()
                self._raise_if_failed(s)
            updates = self._drain(s)
            if not updates or not updates[-1].is_final:
                updates.append(s.recognizer.closing_update())
            return updates

    async def wait_updates(self, session_id: str, timeout: float | None = None) -> list[Update]:
        """Wait until updates are ready (or ``timeout`` s pass) and return them.

        For callers that want results while the client sends no audio; ``accept`` already
        returns whatever is ready.
        """
        s = self._session(session_id)
        if not s.outbox and s.error is None:
            s.changed.clear()
            try:
                await asyncio.wait_for(s.changed.wait(), timeout)
            except TimeoutError:
                pass
        self._raise_if_failed(s)
        return self._drain(s)

    async def aclose(self) -> None:
        """Stop the scheduler and the pools (running decodes are allowed to end)."""
        self._closed = True
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._decode_pool.shutdown)
        await loop.run_in_executor(None, self._vad_pool.shutdown)

    # --------------------------------------------------------------- scheduler

    def _session(self, session_id: str) -> _Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise KeyError(f"unknown session {session_id!r}") from None

    @staticmethod
    def _raise_if_failed(s: _Session) -> None:
        if s.error is not None:
            raise StreamError(StreamErrorCode.internal_error, "recognition failed") from s.error

    def _timed(self, s: _Session, updates: list[Update]) -> list[Update]:
        """``updates``, their finals' lags noted for admission."""
        for u in updates:
            if u.is_final and (arrived := s.clock.arrived(u.end)) is not None:
                now = time.monotonic()
                self._lags.add(now - arrived, now)
        return updates

    @staticmethod
    def _drain(s: _Session) -> list[Update]:
        out, s.outbox = s.outbox, []
        return out

    def _start_workers(self) -> None:
        if not self._workers and not self._closed:
            prefix = self._opts.thread_name_prefix
            self._workers = [asyncio.create_task(self._worker(), name=f"{prefix}-scheduler-{i}")
                             for i in range(self._opts.decode_workers)]

    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = self._pick()
            if not batch:
                self._work.clear()
                await self._work.wait()
                continue
            head_session, head = batch[0]
            inputs = [r.input for _, r in batch]
            options = head_session.recognizer.decode_options(head.kind)
            partial = head.kind is DecodeKind.PARTIAL
            if not partial:
                options = final_decode_options(options, sessions=len(self._sessions),
                                               wide_sessions=self._opts.wide_beam_sessions)
            self._partials_running += partial
            self._finals_running += not partial
            try:
                decoded, elapsed = await loop.run_in_executor(
                    self._decode_pool, self._decode, head.decoder, inputs, options)
            except Exception as exc:  # delivered to every session in the batch, not swallowed
                for s, _ in batch:
                    s.error = exc
                    s.changed.set()
                continue
            finally:
                self._partials_running -= partial
                self._finals_running -= not partial
            if partial:
                rest = partial_rest(elapsed, self._opts.partial_duty)
                self._partial_rest_until = max(self._partial_rest_until, time.monotonic() + rest)
            for (s, req), result in zip(batch, decoded):
                s.in_flight -= 1
                if self._sessions.get(s.id) is not s:
                    continue                                 # closed meanwhile
                s.outbox += self._timed(s, s.recognizer.complete(req, result, elapsed))
                s.changed.set()
            self._work.set()

    @staticmethod
    def _decode(decoder: WhisperDecoder, inputs: list[DecodeInput],
                options: DecodeOptions) -> tuple[list[Decoded], float]:
        t0 = time.perf_counter()
        out = decoder.decode(inputs, options)
        return out, time.perf_counter() - t0

    def _end_rest(self) -> None:
        self._wake = None
        self._work.set()

    def _pick(self) -> list[tuple[_Session, DecodeRequest]]:
        """The next batch: highest priority first, filled with compatible requests."""
        sessions = [s for s in self._sessions.values() if s.error is None]
        batch: list[tuple[_Session, DecodeRequest]] = []
        limit = self._opts.max_batch

        def compatible(req: DecodeRequest) -> bool:
            head = batch[0][1]
            return req.decoder is head.decoder and len(req.input.prompt) == len(head.input.prompt)

        early = within_sessions(len(self._sessions), self._opts.early_final_sessions)
        # Finals, oldest first, then speculative finals: both decide final latency.
        for kind in (DecodeKind.FINAL, DecodeKind.PREFINAL):
            for s in sorted(sessions, key=lambda x: x.recognizer.waiting_since(kind)):
                while len(batch) < limit:
                    req = s.recognizer.take(kind, early=early)
                    if req is None:
                        break
                    if batch and not compatible(req):
                        s.recognizer.give_back(req)
                        break
                    s.in_flight += 1
                    batch.append((s, req))
            if batch:
                return batch
        if self._partials_running >= self._partial_slots:
            return batch
        held = partials_held(finals_running=self._finals_running,
                             beside_finals=self._opts.partials_beside_finals,
                             now=time.monotonic(), rest_until=self._partial_rest_until)
        if 0 < held < float("inf") and self._wake is None:
            self._wake = asyncio.get_running_loop().call_later(held, self._end_rest)
        # Partials: segments showing nothing yet first, then the longest wait.
        for s in sorted(sessions, key=lambda x: x.recognizer.partial_rank()):
            if len(batch) >= self._opts.partial_batch or (held and s.recognizer.partial_rank()[0]):
                break
            req = s.recognizer.take(DecodeKind.PARTIAL)
            if req is None:
                continue
            if batch and not compatible(req):
                s.recognizer.give_back(req)
                continue
            s.in_flight += 1
            batch.append((s, req))
        return batch
