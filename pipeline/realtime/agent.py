"""The realtime agent: live sessions' decoder state on one worker, fed from ``realtime-audio``.

Reads :data:`~topologies.topics.REALTIME_AUDIO` in its own consumer group (one worker
owns a partition, so every record of a session reaches the same worker), keeps one
:class:`~pipeline.realtime.RealtimeEngine` session per live session, and publishes
:class:`~schemas.records.RealtimeMessage` records to ``realtime-messages`` for the
gateway that owns the socket.

It uses a plain aiokafka consumer rather than a Faust agent stream: Faust's worker
consumer is shared with the batch topics and fetches with a fixed 1.5 s wait, while
live audio needs a fetch wait of milliseconds (``realtime.fetch_max_wait_ms``).

The models load when the first session arrives (the gateway shows ``provider_status``
meanwhile). Per session, records are taken in ``seq`` order; a replayed record (at-least-once
delivery) has a ``seq`` already seen and is dropped. Record 0 opens the session (it
carries the vocabulary and no audio; the gateway repeats it until answered), a record
with ``final`` ends it. A record for a session this worker does not hold, past record 0,
means the session lived on another worker (a rebalance moved its partition): it is
answered with ``provider_error`` and the gateway ends the session with
``a5sv2_unavailable``. A session whose gateway went silent is dropped after
``realtime.worker_orphan_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

from schemas.errors import StreamError
from schemas.records import RealtimeAudio, RealtimeMessage
from schemas.settings import Settings
from topologies.topics import REALTIME_AUDIO, REALTIME_MESSAGES, TopicSpec

from .engine import RealtimeEngine
from .models import ModelOptions, StreamingModels
from .options import EngineOptions
from .recognizer import Update
from .vocabulary import VocabularyTerm

__all__ = ["RealtimeAgent", "PROGRESS_INTERVAL_S"]

log = logging.getLogger("a5s.realtime")

PROGRESS_INTERVAL_S = 1.0
"""A session with no message for this long while audio flows gets a ``progress`` message."""

Send = Callable[[TopicSpec[Any], str, Any], Awaitable[None]]


@dataclass(eq=False)
class _Live:
    id: str
    partition: int
    seq: int = 0
    """The last record taken in by the decoder."""
    queued: int = 0
    """The last record put in ``inbox``."""
    inbox: asyncio.Queue[RealtimeAudio] = field(default_factory=asyncio.Queue)
    last_record: float = field(default_factory=time.monotonic)
    last_sent: float = 0.0
    task: asyncio.Task[None] | None = None


class RealtimeAgent:
    """Serves the live sessions of the ``realtime-audio`` partitions this worker is assigned.

    Args:
        settings: the process settings (``realtime`` group, models, Kafka).
        send: publishes a record (the worker's producer).
    """

    def __init__(self, settings: Settings, send: Send) -> None:
        self.settings = settings
        self.opts = settings.realtime
        self.send = send
        self.engine: RealtimeEngine | None = None
        self.sessions: dict[str, _Live] = {}
        self._ended: dict[str, float] = {}
        self._assigned: set[int] = set()
        self._loading: asyncio.Task[None] | None = None

    # --- the consumer loop --------------------------------------------------------------------

    async def serve(self) -> None:
        """``run`` until cancelled; a failure (broker gone) restarts it after a pause."""
        while True:
            try:
                await self.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # open sessions end through their gateway's stall check
                log.warning("realtime: consumer failed, restarting: %r", exc)
                await asyncio.sleep(2.0)

    async def run(self) -> None:
        """Load the models, then consume until cancelled (restarting the consumer on failure)."""
        topic = self.settings.topic_prefix + REALTIME_AUDIO.name
        consumer = self._consumer()
        consumer.subscribe([topic], listener=_Listener(self))
        await consumer.start()
        try:
            while True:
                batches = await consumer.getmany(timeout_ms=500, max_records=500)
                for tp, records in batches.items():
                    for record in records:
                        await self._route(tp.partition, record.value, record.timestamp)
                await self._acknowledge()
                self._reap()
        finally:
            for live in list(self.sessions.values()):
                if live.task is not None:
                    live.task.cancel()
            with contextlib.suppress(Exception):
                await consumer.stop()

    def _consumer(self) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap,
            group_id=f"{self.settings.app_id}-realtime",
            client_id=f"{self.settings.app_id}-realtime",
            # A new group starts at the end: old audio belongs to sessions long gone.
            auto_offset_reset="latest", enable_auto_commit=True, auto_commit_interval_ms=1000,
            fetch_max_wait_ms=self.opts.fetch_max_wait_ms, session_timeout_ms=10_000,
            heartbeat_interval_ms=1000, max_poll_interval_ms=300_000,
            rebalance_timeout_ms=10_000)

    def _ensure_engine(self) -> bool:
        """Whether the engine is up; the first call starts loading the models (lazily, so a
        worker that never sees a live session never pays for them)."""
        if self.engine is not None:
            return True
        if self._loading is None or (self._loading.done() and self._loading.exception()):
            self._loading = asyncio.create_task(self._load())
        return False

    async def _load(self) -> None:
        started = time.monotonic()
        if self.settings.models.streaming_engine == "zipformer":
            self.engine = await self._load_zipformer()  # type: ignore[assignment]
            log.info("realtime: zipformer loaded in %.1f s", time.monotonic() - started)
            return
        try:
            models = await self._load_models()
        except Exception:
            log.exception("realtime: loading the streaming models failed")
            raise
        self.engine = RealtimeEngine(models, EngineOptions(
            max_sessions=self.opts.worker_max_sessions))
        log.info("realtime: models loaded in %.1f s", time.monotonic() - started)

    async def _load_zipformer(self) -> Any:
        """The chunk-by-chunk transducer engine (its own module, same interface)."""
        from .zipformer import load_engine
        m = self.settings.models
        try:
            return await load_engine(m.streaming_model_dir, self.settings.data_path / "models",
                                     m.zipformer_truecase, self.opts.worker_max_sessions)
        except Exception:
            log.exception("realtime: loading the streaming Zipformer failed")
            raise

    async def _load_models(self) -> StreamingModels:
        m = self.settings.models
        final = None if m.streaming_final == m.streaming_partial else m.streaming_final
        options = ModelOptions(cpu_threads=1, num_workers=EngineOptions().decode_workers)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: StreamingModels.from_specs(
            self.settings.data_path / "models", m.streaming_partial, final, options))

    # --- routing ------------------------------------------------------------------------------

    async def _route(self, partition: int, raw: bytes, timestamp_ms: int) -> None:
        try:
            record = REALTIME_AUDIO.decode(raw)
        except ValueError:
            log.warning("realtime: undecodable audio record dropped")
            return
        live = self.sessions.get(record.session_id)
        if live is None:
            await self._open(partition, record, timestamp_ms)
            return
        live.last_record = time.monotonic()
        if record.seq > live.queued:  # a lower one is a replay of a record already taken
            live.queued = record.seq
            live.inbox.put_nowait(record)

    async def _open(self, partition: int, record: RealtimeAudio, timestamp_ms: int) -> None:
        sid = record.session_id
        age_s = time.time() - timestamp_ms / 1000 if timestamp_ms > 0 else 0.0
        if sid in self._ended or age_s > self.opts.stall_timeout_s:
            return  # its end was already answered, or its gateway gave up on it long ago
        if record.seq != 0:
            self._ended[sid] = time.monotonic()
            await self._message(sid, record.seq, "provider_error",
                                text="The session's recognizer was moved; start a new session.")
            return
        if not self._ensure_engine():
            return  # record 0 is repeated until answered; the gateway shows provider_status
        assert self.engine is not None
        terms = [VocabularyTerm(text=t, strength=s) for t, s in record.vocabulary or ()]
        try:
            self.engine.open(sid, terms)
        except StreamError as exc:
            self._ended[sid] = time.monotonic()
            await self._message(sid, 0, "provider_error", text=exc.message)
            return
        live = _Live(sid, partition)
        self.sessions[sid] = live
        live.task = asyncio.create_task(self._serve(live), name=f"a5s-realtime-{sid}")

    async def _acknowledge(self) -> None:
        """Tell each gateway its audio arrived, even when decoding lags behind: the gateway's
        stall check is about a worker that is gone, not one that is busy."""
        now = time.monotonic()
        for live in list(self.sessions.values()):
            if live.queued > live.seq and now - live.last_sent >= PROGRESS_INTERVAL_S:
                live.last_sent = now
                await self._message(live.id, live.queued, "progress")

    def _reap(self) -> None:
        now = time.monotonic()
        for live in list(self.sessions.values()):
            moved = self._assigned and live.partition not in self._assigned
            if (moved or now - live.last_record > self.opts.worker_orphan_s) and live.task:
                log.info("realtime: dropping session %s (%s)", live.id,
                         "partition moved" if moved else "no audio")
                live.task.cancel()
        for sid, at in list(self._ended.items()):
            if now - at > 600:
                del self._ended[sid]

    # --- one session --------------------------------------------------------------------------

    async def _serve(self, live: _Live) -> None:
        engine = self.engine
        assert engine is not None
        getter: asyncio.Task[RealtimeAudio] | None = None
        try:
            await self._message(live.id, 0, "progress")
            while True:
                if getter is None:
                    getter = asyncio.create_task(live.inbox.get())
                waiter = asyncio.create_task(engine.wait_updates(live.id, PROGRESS_INTERVAL_S))
                done, _ = await asyncio.wait({getter, waiter},
                                             return_when=asyncio.FIRST_COMPLETED)
                if waiter not in done:
                    waiter.cancel()
                    updates: list[Update] = []
                else:
                    updates = waiter.result()
                await self._publish(live, updates)
                if getter in done:
                    record, getter = getter.result(), None
                    live.seq = record.seq
                    if record.pcm:
                        await self._publish(live, await engine.accept(live.id, record.pcm))
                    if record.final:  # acknowledged first: the last finals may take a while
                        await self._message(live.id, live.seq, "progress")
                        await self._publish(live, await engine.finish(live.id))
                        await self._message(live.id, live.seq, "finished")
                        return
                if time.monotonic() - live.last_sent >= PROGRESS_INTERVAL_S:
                    await self._message(live.id, live.seq, "progress")
                    live.last_sent = time.monotonic()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the session ends; its gateway must hear of it
            log.warning("realtime: session %s failed: %r", live.id, exc,
                        exc_info=not isinstance(exc, StreamError))
            with contextlib.suppress(Exception):
                await self._message(live.id, live.seq, "provider_error",
                                    text="Recognition failed during the session.")
        finally:
            if getter is not None:
                getter.cancel()
            engine.close(live.id)
            self.sessions.pop(live.id, None)
            self._ended[live.id] = time.monotonic()

    async def _publish(self, live: _Live, updates: list[Update]) -> None:
        for update in updates:
            await self._message(live.id, live.seq, "transcript", text=update.text,
                                is_final=update.is_final)
            live.last_sent = time.monotonic()

    async def _message(self, sid: str, seq: int, kind: str, *, text: str = "",
                       is_final: bool = False) -> None:
        await self.send(REALTIME_MESSAGES, sid, RealtimeMessage(
            session_id=sid, seq=seq, type=kind, text=text, is_final=is_final))  # type: ignore[arg-type]


class _Listener(ConsumerRebalanceListener):
    """Tracks this worker's partitions: sessions whose partition moved away are dropped."""

    def __init__(self, agent: RealtimeAgent) -> None:
        self.agent = agent

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.agent._assigned = {tp.partition for tp in assigned}
        log.info("realtime: partitions %s", sorted(self.agent._assigned))
