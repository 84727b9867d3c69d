"""What the embedded broker's CPU per live session is made of: a driver without models.

``python -m bench.broker [--sessions 10] [--seconds 60] [--batch-ms MS] [--window N]
[--no-consumers] [--no-producers] [--messages-per-s 3] [--linger-ms 2] [--live-pause-ms 10]
[--truncate-every S] [--compression gzip] [--idle-after S]``

Starts the embedded broker alone (as ``ops.embedded`` does, in a temporary directory),
creates the two realtime topics as ``stores.kafka.ensure_topics`` would, and plays the
live path's Kafka traffic with no gateway, worker or models: per session, one producer
task publishes a ``RealtimeAudio`` record of ``--batch-ms`` of audio every ``--batch-ms``
(``acks=all``; ``--window`` records may be unacknowledged at once, 1 = awaited one by
one as the gateway did), a consumer in the realtime agent's group reads them, and for
each session ``--messages-per-s`` ``RealtimeMessage`` records go back to a gateway-style
consumer (manual assignment of every partition). The consumers are paced as the service
paces them (``stores.kafka.pace_empty_fetches``).

Printed: the broker's CPU seconds per second of the run in windows of 10 s (does it grow
with the log?), per second per session, per produced record and per produce and fetch
request (counted in the clients). CPU time, not wall time: it does not depend on the
machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete

from bench.streaming import load_pcm
from ops.embedded import BROKER_MALLOC, _binary, wait_port
from ops.procstat import cpu_seconds
from ops.stack import EVAL, free_port
from schemas.records import RealtimeAudio, RealtimeMessage
from schemas.settings import RealtimeSettings
from stores.kafka import LIVE_CLIENT, pace_empty_fetches
from topologies.topics import REALTIME_AUDIO, REALTIME_MESSAGES

__all__ = ["main"]

COUNTS = {"fetch": 0, "fetch_records": 0, "produce": 0}
SPEECH = (load_pcm(EVAL / "synthetic" / "conv01_support_call.wav") * 32768).astype("<i2").tobytes()
"""Real speech, so that what the records compress to is real (16 kHz s16le)."""


def _count_requests() -> None:
    """Count fetch and produce requests in the clients (the broker says nothing)."""
    from aiokafka.consumer import consumer as consumer_module
    from aiokafka.producer import sender as sender_module

    paced = consumer_module.Fetcher

    class Counted(paced):  # type: ignore[misc, valid-type]
        async def _proc_fetch_request(self, *args: Any) -> bool:
            COUNTS["fetch"] += 1
            got = await super()._proc_fetch_request(*args)
            COUNTS["fetch_records"] += bool(got)
            return got

    consumer_module.Fetcher = Counted  # type: ignore[misc]
    handler = sender_module.SendProduceReqHandler
    original = handler.create_request

    def create_request(self: Any) -> Any:
        COUNTS["produce"] += 1
        return original(self)

    handler.create_request = create_request  # type: ignore[method-assign]


async def _topics(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(s.name, 4, 1, topic_configs=s.config())
                                   for s in (REALTIME_AUDIO, REALTIME_MESSAGES)])
    finally:
        await admin.close()


async def _session(k: int, producer: AIOKafkaProducer, args: argparse.Namespace,
                   stop: float) -> int:
    """One session's audio: a record per ``batch_ms``, at most ``window`` unacknowledged."""
    sid = f"rs_{k:04d}"
    size = args.batch_ms * 32
    pending: list[asyncio.Future[Any]] = []
    seq, start = 0, time.monotonic() + 0.23 * k
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    while time.monotonic() < stop:
        seq += 1
        at = (k * 7919 * size + seq * size) % (len(SPEECH) - size) // 2 * 2
        record = RealtimeAudio(session_id=sid, seq=seq, gateway_id="gw_bench",
                               pcm=SPEECH[at:at + size], origin=0)
        pending.append(await producer.send(REALTIME_AUDIO.name, REALTIME_AUDIO.encode(record),
                                           key=sid.encode()))
        while len(pending) >= args.window:
            await pending.pop(0)
        await asyncio.sleep(max(0.0, start + seq * args.batch_ms / 1000 - time.monotonic()))
    for fut in pending:
        await fut
    return seq


async def _worker(bootstrap: str, producer: AIOKafkaProducer, args: argparse.Namespace,
                  stop: float) -> int:
    """The realtime agent's consumer; answers each session ``messages_per_s`` times a second."""
    consumer = AIOKafkaConsumer(REALTIME_AUDIO.name, bootstrap_servers=bootstrap,
                                group_id="bench-realtime", client_id=f"bench{LIVE_CLIENT}",
                                auto_offset_reset="latest", enable_auto_commit=False,
                                fetch_max_wait_ms=100)
    await consumer.start()
    got, said = 0, {}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    consumed: dict[TopicPartition, int] = {}
    truncated = time.monotonic()
    try:
        while time.monotonic() < stop + 1:
            batches = await consumer.getmany(timeout_ms=500, max_records=500)
            now = time.monotonic()
            if args.truncate_every and now - truncated > args.truncate_every and consumed:
                truncated = now
                await admin.delete_records({tp: RecordsToDelete(offset)
                                            for tp, offset in consumed.items()})
            for tp, records in batches.items():
                if records:
                    consumed[tp] = records[-1].offset + 1
                for record in records:
                    got += 1
                    audio = REALTIME_AUDIO.decode(record.value)
                    if args.messages_per_s and \
                            now - said.get(audio.session_id, 0) >= 1 / args.messages_per_s:
                        said[audio.session_id] = now
                        message = RealtimeMessage(session_id=audio.session_id, seq=audio.seq,
                                                  type="transcript", text="word " * 20)
                        await producer.send_and_wait(REALTIME_MESSAGES.name,
                                                     REALTIME_MESSAGES.encode(message),
                                                     key=audio.session_id.encode())
    finally:
        await consumer.stop()
        await admin.close()
    return got


async def _gateway_reader(bootstrap: str, stop: float) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                client_id=f"bench{LIVE_CLIENT}-gw", auto_offset_reset="latest",
                                enable_auto_commit=False, fetch_max_wait_ms=100)
    await consumer.start()
    got = 0
    try:
        tps = [TopicPartition(REALTIME_MESSAGES.name, p) for p in range(4)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        while time.monotonic() < stop + 1:
            batches = await consumer.getmany(timeout_ms=500, max_records=1000)
            got += sum(len(r) for r in batches.values())
    finally:
        await consumer.stop()
    return got


async def _run(args: argparse.Namespace, bootstrap: str, pid: int) -> None:
    await _topics(bootstrap)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                linger_ms=args.linger_ms, enable_idempotence=False,
                                compression_type=args.compression)
    await producer.start()
    await asyncio.sleep(1.0)
    cpu0, t0 = cpu_seconds(pid) or 0.0, time.monotonic()
    stop = t0 + args.seconds
    tasks = []
    if not args.no_consumers:
        tasks.append(asyncio.create_task(_worker(bootstrap, producer, args, stop)))
        tasks.append(asyncio.create_task(_gateway_reader(bootstrap, stop)))
        await asyncio.sleep(1.0)
    counts0 = dict(COUNTS)
    cpu1, t1 = cpu_seconds(pid) or 0.0, time.monotonic()
    senders = [asyncio.create_task(_session(k, producer, args, stop))
               for k in range(0 if args.no_producers else args.sessions)]
    windows: list[float] = []
    last_cpu, last_t = cpu1, t1
    while time.monotonic() < stop:
        await asyncio.sleep(10.0)
        cpu, now = cpu_seconds(pid) or 0.0, time.monotonic()
        windows.append((cpu - last_cpu) / (now - last_t))
        last_cpu, last_t = cpu, now
    records = sum(await asyncio.gather(*senders))
    cpu2, t2 = cpu_seconds(pid) or 0.0, time.monotonic()
    results = await asyncio.gather(*tasks)
    if args.idle_after:
        cpu3, t3 = cpu_seconds(pid) or 0.0, time.monotonic()
        await asyncio.sleep(args.idle_after)
        print(f"broker CPU idle afterwards (producer connected, no consumers): "
              f"{((cpu_seconds(pid) or 0.0) - cpu3) / (time.monotonic() - t3) * 100:.1f}% "
              f"of a core over {args.idle_after:.0f} s")
    await producer.stop()
    used, span = cpu2 - cpu1, t2 - t1
    counts = {k: COUNTS[k] - counts0[k] for k in COUNTS}
    print(f"broker CPU while starting consumers {cpu1 - cpu0:.2f} s; over the run "
          f"{used:.2f} s in {span:.0f} s = {used / span * 100:.1f}% of a core "
          f"({used / span / max(args.sessions, 1) * 100:.2f}% per session)")
    print("per 10 s window, % of a core: " + " ".join(f"{w * 100:.1f}" for w in windows))
    print(f"records produced {records} ({records / span:.0f}/s), produce requests "
          f"{counts['produce']} ({counts['produce'] / span:.0f}/s), fetches {counts['fetch']} "
          f"({counts['fetch'] / span:.0f}/s, {counts['fetch_records']} with records); "
          f"consumed {results if results else '-'}")
    if records:
        print(f"broker CPU per produced record {used / records * 1e6:.0f} us, per request "
              f"(produce + fetch) {used / max(counts['produce'] + counts['fetch'], 1) * 1e6:.0f} us")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--batch-ms", type=int, default=RealtimeSettings().batch_ms,
                        help="audio per record, ms (default: the service's)")
    parser.add_argument("--window", type=int, default=1)
    parser.add_argument("--linger-ms", type=int, default=2)
    parser.add_argument("--messages-per-s", type=float, default=3.0)
    parser.add_argument("--live-pause-ms", type=float, default=10.0)
    parser.add_argument("--compression", default=None, help="the producers' (gzip)")
    parser.add_argument("--no-consumers", action="store_true")
    parser.add_argument("--no-producers", action="store_true")
    parser.add_argument("--truncate-every", type=float, default=0.0,
                        help="the consumer deletes the records it has read this often, s")
    parser.add_argument("--idle-after", type=float, default=0.0,
                        help="then sample the broker this many seconds with no traffic")
    args = parser.parse_args(argv)
    pace_empty_fetches(live_pause_s=args.live_pause_ms / 1000)
    _count_requests()
    root = Path(tempfile.mkdtemp(prefix="a5s-broker-"))
    port = free_port()
    log = open(root / "broker.log", "ab")
    import subprocess
    proc = subprocess.Popen([_binary("noida_db", "noida-db"), "start", "--data-dir",
                             str(root / "broker"), "--host", "127.0.0.1", "--only", "kafka",
                             "--kafka-port", str(port)], env={**os.environ, **BROKER_MALLOC},
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_port(port, 30, proc)
        print(f"command: python -m bench.broker {' '.join(argv or os.sys.argv[1:])}; load "
              f"average {os.getloadavg()[0]:.2f}")
        asyncio.run(_run(args, f"127.0.0.1:{port}", proc.pid))
        print(f"load average now {os.getloadavg()[0]:.2f}")
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
