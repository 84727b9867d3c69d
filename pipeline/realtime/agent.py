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
delivery) has a ``seq`` already seen and is dropped, and one past a gap (a record the broker
lost) is dropped too: the acknowledgements stop before the gap, and the gateway publishes
the records again from there (``realtime.resend_after_s``). Record 0 opens the session (it
carries the vocabulary and no audio; the gateway repeats it until answered), a record
with ``final`` ends it. A session whose gateway went silent is dropped after
``realtime.worker_orphan_s``; one that has its final record is not, while its last finals
may still be decoding, until ``realtime.finish_timeout_s`` (the gateway's wait) has passed
(:func:`orphaned`).

**Takeover.** A record for a session this worker does not hold, past record 0, means the
session lived on another worker: it died, or a rebalance moved its partition. Every record
names the offset of the session's opening record (``origin``), so this worker rebuilds the
session by replaying its audio: a consumer of its own reads the partition from ``origin``
(or from the log's start, when that is gone) up to the record that arrived, feeds the
session's records to a new engine session (their updates are not published: the client
has seen them), then goes on with the live records queued meanwhile. Between segments,
at most every ``CHECKPOINT_INTERVAL_S``, the worker holding a session writes a checkpoint
into its audio log (:mod:`.checkpoint`): the settled text and where the recognizer can go
on from. A takeover that finds one restores it and replays only the audio after it.
Messages say ``replaying`` until then, so the gateway holds back any transcript that
would show less than the client has already seen. Only a record without
``origin`` (an older gateway) or a replay that fails is answered with ``provider_error``,
and the gateway ends the session with ``a5sv2_unavailable``.

**Trimming.** Every ``TRIM_INTERVAL_S`` the agent deletes the records of its partitions of
both live topics that no session can need (:mod:`.trim`): older than
``realtime.log_keep_s`` and, for the audio, before the origin (or the latest checkpoint's
audio record) of every session it holds or has seen while its models were loading.
The embedded broker's CPU grows with what its log holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from schemas.errors import StreamError
from schemas.records import RealtimeAudio, RealtimeCheckpoint, RealtimeMessage
from schemas.settings import RealtimeSettings, Settings
from stores.kafka import LIVE_CLIENT, delete_before
from stores.metrics import Metrics
from topologies.topics import REALTIME_AUDIO, REALTIME_MESSAGES, TopicSpec

from ..engines import import_model_code
from .checkpoint import CHECKPOINT_INTERVAL_S, FedAudio, checkpoint_for, resume_audio
from .engine import RealtimeEngine
from .models import ModelOptions, StreamingModels
from .options import EngineOptions
from .recognizer import Update
from .trim import TRIM_INTERVAL_S, LogTrim
from .vocabulary import VocabularyTerm

__all__ = ["RealtimeAgent", "PROGRESS_INTERVAL_S", "engine_options", "orphaned"]

log = logging.getLogger("a5s.realtime")

PROGRESS_INTERVAL_S = 1.0
"""A session with no message for this long while audio flows gets a ``progress`` message."""
SEND_RETRY_S = 30.0
"""How long a message is retried while the broker is away (a broker restart after a worker
died takes a few seconds); a session is not given up for that."""

Send = Callable[[TopicSpec[Any], str, Any], Awaitable[None]]


def engine_options(settings: Settings) -> EngineOptions:
    """The engine's options for these settings.

    Finals from a model of their own (``models.streaming_final`` not the partial model)
    decode with the batch path's beam (``models.beam_size``): on the dev items of the coverage
    benchmark, base finals gave 7.77% WER greedy and 7.09% with beam 5 against tiny.en's
    9.20% greedy (``python -m bench.streaming --offline --coverage``), for 2.0 and 2.5 times
    tiny.en's greedy final-decode CPU. tiny.en finals keep the recognizer's own beam of 3
    (7.77%; beam 5 7.96%), greedy above ``wide_beam_sessions``. The switch is
    ``A5S_MODELS__STREAMING_FINAL=base``, for machines with cores to spare: its finals keep
    the beam however many sessions are open. ``realtime.early_pad_ms`` switches on the
    early speculative decode.
    """
    m = settings.models
    live = settings.realtime
    options = EngineOptions(max_sessions=live.worker_max_sessions,
                            admit_final_lag_s=live.admit_final_lag_s or None)
    rec = options.recognizer
    vad = rec.vad.model_copy(update={"early_pad_ms": live.early_pad_ms})
    options = options.model_copy(update={"recognizer": rec.model_copy(update={"vad": vad})})
    if m.streaming_final == m.streaming_partial:
        return options
    rec = options.recognizer
    decode = rec.decode.model_copy(update={"beam_size": min(m.beam_size, 10)})
    return options.model_copy(update={"recognizer": rec.model_copy(update={"decode": decode}),
                                      "wide_beam_sessions": None})


def orphaned(quiet_s: float, finishing: bool, settings: RealtimeSettings) -> bool:
    """Whether a session with no audio record for ``quiet_s`` is given up. A ``finishing``
    one (its final record taken in) waits for no more audio: its backlog of decodes may run
    past ``worker_orphan_s``, and the gateway waits ``finish_timeout_s`` for its last words."""
    limit = settings.worker_orphan_s
    if finishing:
        limit = max(limit, settings.finish_timeout_s)
    return quiet_s > limit


def sent_at(timestamp_ms: int) -> float:
    """When a record's gateway sent it (its broker timestamp), on this process's monotonic
    clock: the finals' lag then counts the hop through the broker and the wait for this
    loop too. A timestamp ahead of this host's clock counts as now."""
    now = time.monotonic()
    if timestamp_ms <= 0:
        return now
    return now - max(0.0, time.time() - timestamp_ms / 1000)


@dataclass(eq=False)
class _Live:
    id: str
    partition: int
    seq: int = 0
    """The last record taken in by the decoder."""
    queued: int = 0
    """The last record put in ``inbox``."""
    finishing: bool = False
    """The record with ``final`` is in ``inbox`` (or taken)."""
    inbox: asyncio.Queue[tuple[RealtimeAudio, int, float]] = field(default_factory=asyncio.Queue)
    """Records to feed: (record, its offset, when its gateway sent it on this clock)."""
    last_record: float = field(default_factory=time.monotonic)
    last_sent: float = 0.0
    task: asyncio.Task[None] | None = None
    origin: int = 0
    """Offset its log is kept from: its opening record, then its latest checkpoint's audio
    record."""
    gateway_id: str = ""
    vocabulary: list[tuple[str, int]] | None = None
    fed: FedAudio = field(default_factory=FedAudio)
    settled_at: float = 0.0
    """When a final was last published; a checkpoint is due after it."""
    checkpointed: float = -CHECKPOINT_INTERVAL_S
    """When the last checkpoint was written (monotonic): the first final makes one."""
    replay: tuple[int, int] | None = None
    """Offsets ``[origin, until)`` of the partition to replay before the live records."""
    missing: int = 0
    """The record last found missing (logged once; later records wait for it)."""
    moved: bool = False
    """Dropped because its partition went to another worker (which takes it over; if the
    partition comes back, this worker takes it over again)."""


class RealtimeAgent:
    """Serves the live sessions of the ``realtime-audio`` partitions this worker is assigned.

    Args:
        settings: the process settings (``realtime`` group, models, Kafka).
        send: publishes a record (the worker's producer).
        metrics: the process's metrics (the finals' lag and the sessions refused).
    """

    def __init__(self, settings: Settings, send: Send, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.opts = settings.realtime
        self.end_pad_s = engine_options(settings).recognizer.vad.speech_pad_ms / 1000
        """A final's end less this is where its speech ended (``RealtimeMessage.end``)."""
        self.send = send
        self.metrics = metrics
        self.engine: RealtimeEngine | None = None
        if metrics is not None:
            metrics.live_final_lag.set_function(
                lambda: (self.engine.final_lag() if self.engine else None) or 0.0)
        self.sessions: dict[str, _Live] = {}
        self._ended: dict[str, float] = {}
        self._assigned: set[int] = set()
        self._loading: asyncio.Task[None] | None = None
        keep_s = max(self.opts.log_keep_s, self.opts.stall_timeout_s)
        self.trim = (LogTrim(keep_s, self.opts.provider_start_timeout_s)
                     if self.opts.log_keep_s > 0 else None)

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
        trimmer = asyncio.create_task(self._trim_logs(consumer), name="a5s-realtime-trim")
        try:
            while True:
                batches = await consumer.getmany(timeout_ms=500, max_records=500)
                for tp, records in batches.items():
                    for record in records:
                        await self._route(tp.partition, record.value, record.timestamp,
                                          record.offset)
                await self._acknowledge()
                self._reap()
        finally:
            trimmer.cancel()
            for live in list(self.sessions.values()):
                if live.task is not None:
                    live.task.cancel()
            with contextlib.suppress(Exception):
                await consumer.stop()

    def _consumer(self) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap,
            group_id=f"{self.settings.app_id}-realtime",
            client_id=f"{self.settings.app_id}{LIVE_CLIENT}",
            # Offsets are not committed: a worker that is given a partition starts at its end,
            # and rebuilds any session it meets mid-way from the session's own origin. (With
            # auto-commit, the embedded broker never settled a group that a second worker
            # joined: a commit racing the join round got the member dropped, over and over.)
            auto_offset_reset="latest", enable_auto_commit=False,
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
        # torch (silero-vad's, a TorchScript export's) is imported by one thread at a time:
        # the batch models' warm-up may be importing it now
        await asyncio.get_running_loop().run_in_executor(None, import_model_code)
        if self.settings.models.streaming_engine == "zipformer":
            self.engine = await self._load_zipformer()  # type: ignore[assignment]
            log.info("realtime: zipformer loaded in %.1f s", time.monotonic() - started)
            return
        try:
            models = await self._load_models()
        except Exception:
            log.exception("realtime: loading the streaming models failed")
            raise
        self.engine = RealtimeEngine(models, engine_options(self.settings))
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

    async def _route(self, partition: int, raw: bytes, timestamp_ms: int, offset: int) -> None:
        try:
            record = REALTIME_AUDIO.decode(raw)
        except ValueError:
            log.warning("realtime: undecodable audio record dropped")
            return
        if record.checkpoint is not None:
            return  # read only by a takeover's replay
        live = self.sessions.get(record.session_id)
        if live is None:
            await self._open(partition, record, timestamp_ms, offset)
            return
        live.last_record = time.monotonic()
        if record.seq == live.queued + 1:  # a lower one is a replay of a record already taken
            live.queued = record.seq
            live.finishing = record.final
            live.inbox.put_nowait((record, offset, sent_at(timestamp_ms)))
        elif record.seq > live.queued + 1 and live.missing != live.queued + 1:
            # One before it never came (a broker that lost an acknowledged record): taking
            # this one would decode the gap as silence. The acknowledgements stay at
            # ``queued``, so the gateway publishes the rest again from the missing one.
            live.missing = live.queued + 1
            log.warning("realtime: session %s: record %d missing (record %d came); waiting "
                        "for it to be sent again", record.session_id, live.missing, record.seq)

    async def _open(self, partition: int, record: RealtimeAudio, timestamp_ms: int,
                    offset: int) -> None:
        sid = record.session_id
        age_s = time.time() - timestamp_ms / 1000 if timestamp_ms > 0 else 0.0
        if sid in self._ended or age_s > self.opts.stall_timeout_s:
            return  # its end was already answered, or its gateway gave up on it long ago
        moved = record.seq != 0
        if moved and record.origin is None:
            self._ended[sid] = time.monotonic()
            await self._message(sid, record.seq, "provider_error",
                                text="The session's recognizer was moved; start a new session.")
            return
        if not self._ensure_engine():
            # Record 0 is repeated until answered (the gateway shows provider_status); a
            # moved session's next record tries again, and its replay covers this one.
            if self.trim is not None:
                self.trim.wait(sid, partition, offset if record.origin is None
                               else record.origin, time.monotonic())
            return
        assert self.engine is not None
        try:
            if moved:
                self.engine.open(sid)   # the vocabulary comes with the replayed record 0
            else:
                self.engine.open(sid, [VocabularyTerm(text=t, strength=s)
                                       for t, s in record.vocabulary or ()], new=True)
        except StreamError as exc:
            log.info("realtime: session %s not opened: %s", sid, exc.message)
            if self.metrics is not None:
                self.metrics.live_refused.inc()
            self._ended[sid] = time.monotonic()
            await self._message(sid, record.seq, "provider_error", text=exc.message)
            return
        live = _Live(sid, partition, origin=offset if record.origin is None else record.origin,
                     gateway_id=record.gateway_id, vocabulary=record.vocabulary)
        if moved:
            assert record.origin is not None
            live.replay = (record.origin, offset)
            live.queued = record.seq
            live.finishing = record.final
            live.inbox.put_nowait((record, offset, sent_at(timestamp_ms)))
            log.info("realtime: session %s taken over at record %d by process %d; replaying "
                     "offsets %d-%d of partition %d", sid, record.seq, os.getpid(),
                     record.origin, offset, partition)
        else:
            log.info("realtime: session %s opened on partition %d by process %d", sid,
                     partition, os.getpid())
        self.sessions[sid] = live
        if self.trim is not None:
            self.trim.opened(sid)
        live.task = asyncio.create_task(self._serve(live), name=f"a5s-realtime-{sid}")

    async def _acknowledge(self) -> None:
        """Tell each gateway its audio arrived, even when decoding lags behind: the gateway's
        stall check is about a worker that is gone, not one that is busy."""
        now = time.monotonic()
        for live in list(self.sessions.values()):
            if live.queued > live.seq and now - live.last_sent >= PROGRESS_INTERVAL_S:
                live.last_sent = now
                await self._message(live.id, live.queued, "progress")

    async def _trim_logs(self, consumer: AIOKafkaConsumer) -> None:
        """Delete what no live session of this worker's partitions can need (``trim``)."""
        if self.trim is None:
            return
        prefix = self.settings.topic_prefix
        admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.bootstrap,
                                    request_timeout_ms=10_000)
        started = False
        try:
            while True:
                await asyncio.sleep(TRIM_INTERVAL_S)
                if not self._assigned:
                    continue
                try:
                    if not started:
                        await admin.start()
                        started = True
                    await self._trim_once(consumer, admin, prefix)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the log is bounded by retention meanwhile
                    log.info("realtime: trimming the live topics failed: %r", exc)
        finally:
            if started:
                with contextlib.suppress(Exception):
                    await admin.close()

    async def _trim_once(self, consumer: AIOKafkaConsumer, admin: AIOKafkaAdminClient,
                         prefix: str) -> None:
        assert self.trim is not None
        audio, messages = prefix + REALTIME_AUDIO.name, prefix + REALTIME_MESSAGES.name
        partitions = sorted(self._assigned)
        ends = await consumer.end_offsets([TopicPartition(t, p) for t in (audio, messages)
                                           for p in partitions])
        if sorted(self._assigned) != partitions:
            return
        now = time.monotonic()
        floors = self.trim.floors(audio, [(live.partition, live.origin)
                                          for live in self.sessions.values()], now)
        self.trim.observe(now, ends)
        await delete_before(admin, self.trim.points(now, floors))

    def _reap(self) -> None:
        now = time.monotonic()
        for live in list(self.sessions.values()):
            moved = self._assigned and live.partition not in self._assigned
            quiet = now - live.last_record
            if (moved or orphaned(quiet, live.finishing, self.opts)) and live.task:
                log.info("realtime: dropping session %s (%s)", live.id,
                         "partition moved" if moved else "no audio")
                live.moved = bool(moved)
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
            if live.replay is not None:
                await self._message(live.id, live.queued, "progress", replaying=True)
                await self._replay(live)
            else:
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
                    (record, offset, sent), getter = getter.result(), None
                    live.seq, live.gateway_id = record.seq, record.gateway_id
                    if record.pcm:
                        updates = await engine.accept(live.id, record.pcm, sent)
                        live.fed.add(record.seq, offset, len(record.pcm) // 2)
                        await self._publish(live, updates)
                    if record.final:  # acknowledged first: the last finals may take a while
                        await self._message(live.id, live.seq, "progress")
                        await self._publish(live, await engine.finish(live.id))
                        await self._message(live.id, live.seq, "finished")
                        return
                if time.monotonic() - live.last_sent >= PROGRESS_INTERVAL_S:
                    await self._message(live.id, live.seq, "progress")
                    live.last_sent = time.monotonic()
                if live.settled_at > live.checkpointed + CHECKPOINT_INTERVAL_S:
                    await self._checkpoint(live)
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
            if self.sessions.get(live.id) is live:
                del self.sessions[live.id]
            if not live.moved:
                self._ended[live.id] = time.monotonic()

    async def _checkpoint(self, live: _Live) -> None:
        """Write where the session can be rebuilt from (once every closed segment is
        settled); its log is then kept only from the audio record the checkpoint names."""
        assert self.engine is not None
        point = self.engine.resume_point(live.id)
        made = checkpoint_for(point, live.fed, live.vocabulary) if point else None
        if made is None:
            return
        seq, offset, checkpoint = made
        await self.send(REALTIME_AUDIO, live.id, RealtimeAudio(
            session_id=live.id, seq=seq, gateway_id=live.gateway_id, checkpoint=checkpoint))
        live.origin = max(live.origin, offset)
        live.checkpointed = time.monotonic()
        log.debug("realtime: session %s checkpointed at record %d (offset %d)", live.id, seq,
                  offset)

    async def _replay(self, live: _Live) -> None:
        """Rebuild a moved session: its records before the first live one, from the topic,
        from its latest checkpoint where there is one."""
        engine = self.engine
        assert engine is not None and live.replay is not None
        origin, until = live.replay
        started = time.monotonic()
        records, checkpoints = await self._read_back(live.partition, live.id, origin, until)
        first_live = live.queued
        replayable = [r for r in records if 0 < r[0].seq < first_live]
        replayed, restored = 0, False
        for seq, checkpoint in reversed(checkpoints):   # the latest whose audio is all here
            after = [r for r in replayable if r[0].seq >= seq]
            try:
                audio = resume_audio(checkpoint, seq, [r for r, _ in after])
            except ValueError as exc:
                log.info("realtime: session %s: its checkpoint at record %d is not usable: %s",
                         live.id, seq, exc)
                continue
            replayed = await self._restore(live, checkpoint, audio, after)
            restored = True
            break
        if not restored:
            if not records or records[0][0].seq != 0:
                raise ValueError("the log no longer holds the session's start")
            vocabulary = records[0][0].vocabulary
            live.vocabulary = vocabulary
            if vocabulary:
                engine.close(live.id)
                engine.open(live.id, [VocabularyTerm(text=t, strength=s) for t, s in vocabulary])
            for record, offset in records:
                if 0 < record.seq < first_live and record.seq > live.seq:
                    live.seq = record.seq
                    if record.pcm:
                        await engine.accept(live.id, record.pcm)   # seen by the client already
                        live.fed.add(record.seq, offset, len(record.pcm) // 2)
                        replayed += len(record.pcm)
        await engine.wait_updates(live.id, 0)                   # drop what the replay made
        live.replay = None
        log.info("realtime: session %s replayed %.1f s of audio (%d records%s) in %.2f s",
                 live.id, replayed / 32000, len(records),
                 ", from a checkpoint" if restored else "", time.monotonic() - started)

    async def _restore(self, live: _Live, checkpoint: RealtimeCheckpoint,
                       audio: tuple[bytes, bytes],
                       records: list[tuple[RealtimeAudio, int]]) -> int:
        """Rebuild the session from its checkpoint: ``audio`` is the primer and the rest
        (:func:`.checkpoint.resume_audio`) of ``records``, those from the checkpoint's
        record on. Returns the bytes replayed."""
        engine = self.engine
        assert engine is not None
        primer, rest = audio
        live.vocabulary = checkpoint.vocabulary
        engine.close(live.id)
        engine.open(live.id, [VocabularyTerm(text=t, strength=s)
                              for t, s in checkpoint.vocabulary or ()])
        engine.restore(live.id, checkpoint.point, primer)
        if rest:
            await engine.accept(live.id, rest)                 # seen by the client already
        live.fed = FedAudio(checkpoint.point.start - checkpoint.skip)
        for record, offset in records:
            live.fed.add(record.seq, offset, len(record.pcm) // 2)
        live.seq = max(live.seq, records[-1][0].seq)
        live.origin = records[0][1]
        live.checkpointed = time.monotonic()
        return len(primer) + len(rest)

    async def _read_back(self, partition: int, sid: str, origin: int, until: int
                         ) -> tuple[list[tuple[RealtimeAudio, int]],
                                    list[tuple[int, RealtimeCheckpoint]]]:
        """The audio records of ``sid`` at offsets ``[origin, until)`` of ``partition``
        (from the log's start where ``origin`` was deleted), by seq, with their offsets;
        and its checkpoints there, oldest first, with the seq each names."""
        topic = self.settings.topic_prefix + REALTIME_AUDIO.name
        tp = TopicPartition(topic, partition)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap, group_id=None, enable_auto_commit=False,
            client_id=f"{self.settings.app_id}-realtime-replay", auto_offset_reset="earliest",
            fetch_max_wait_ms=self.opts.fetch_max_wait_ms)
        found: dict[int, tuple[RealtimeAudio, int]] = {}
        checkpoints: list[tuple[int, RealtimeCheckpoint]] = []
        await consumer.start()
        try:
            consumer.assign([tp])
            consumer.seek(tp, origin)
            position = origin
            while position < until:
                batches = await consumer.getmany(tp, timeout_ms=1000, max_records=1000)
                for record in batches.get(tp, []):
                    position = record.offset + 1
                    if record.offset >= until:
                        break
                    with contextlib.suppress(ValueError):
                        audio = REALTIME_AUDIO.decode(record.value)
                        if audio.session_id != sid:
                            continue
                        if audio.checkpoint is not None:
                            checkpoints.append((audio.seq, audio.checkpoint))
                        else:
                            found.setdefault(audio.seq, (audio, record.offset))
                if not batches:
                    position = max(position, await consumer.position(tp))
                    if position < until and await consumer.end_offsets([tp]) == {tp: position}:
                        break
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()
        return [found[k] for k in sorted(found)], checkpoints

    async def _publish(self, live: _Live, updates: list[Update]) -> None:
        for update in updates:
            await self._message(live.id, live.seq, "transcript", text=update.text,
                                is_final=update.is_final, start=update.start,
                                end=update.end - self.end_pad_s if update.is_final
                                else update.end)
            live.last_sent = time.monotonic()
            if update.is_final:
                live.settled_at = live.last_sent

    async def _message(self, sid: str, seq: int, kind: str, *, text: str = "",
                       is_final: bool = False, replaying: bool = False,
                       start: float | None = None, end: float | None = None) -> None:
        message = RealtimeMessage(session_id=sid, seq=seq, type=kind,  # type: ignore[arg-type]
                                  text=text, is_final=is_final, replaying=replaying,
                                  start=start, end=end)
        deadline = time.monotonic() + SEND_RETRY_S
        while True:
            try:
                await self.send(REALTIME_MESSAGES, sid, message)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker restarting: retried, the session kept
                if time.monotonic() > deadline:
                    raise
                log.info("realtime: a message to %s waits for the broker: %r", sid, exc)
                await asyncio.sleep(0.5)


class _Listener(ConsumerRebalanceListener):
    """Tracks this worker's partitions: sessions whose partition moved away are dropped."""

    def __init__(self, agent: RealtimeAgent) -> None:
        self.agent = agent

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.agent._assigned = {tp.partition for tp in assigned}
        if self.agent.trim is not None:
            self.agent.trim.reset()
        log.info("realtime: partitions %s", sorted(self.agent._assigned))
