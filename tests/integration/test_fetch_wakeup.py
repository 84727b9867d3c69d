"""On the embedded broker a consumer paused after an empty fetch is woken by a record
produced in its own process, not left to sleep out its pause (``pace_empty_fetches``). One
that fetched records pauses too once it has caught up, but hands them over first."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from ops.stack import Stack
from stores.kafka import LIVE_CLIENT

# A fresh interpreter: the pacing is installed once per process, with its pause.
_PRELUDE = """
import asyncio, sys, time
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from stores.kafka import pace_empty_fetches

bootstrap, topic, client_id = sys.argv[1], sys.argv[2], sys.argv[3]
pace_empty_fetches(PACING)

async def main():
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, 1, 1)])
    await admin.close()
"""

# Pauses of 30 s: after an empty fetch, and for a live consumer idle (here at once).
_IDLE_PAUSES = "pause_s=30.0, live_idle_s=0.0, live_idle_pause_s=30.0"

_CONSUMER_AT_THE_END = """\
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=60_000,
                                enable_auto_commit=False, client_id=client_id)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await consumer.start()
    await producer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    await consumer.seek_to_end(tp)
    await consumer.position(tp)
"""

_SCRIPT = _PRELUDE.replace("PACING", _IDLE_PAUSES) + _CONSUMER_AT_THE_END + """\
    assert not await consumer.getmany(timeout_ms=1500)  # fetched nothing: now paused
    await producer.send_and_wait(topic, b"hello")
    sent = time.monotonic()
    record = await asyncio.wait_for(consumer.getone(), 25)
    print(record.value.decode(), round(time.monotonic() - sent, 3))
    await producer.stop()
    await consumer.stop()

asyncio.run(main())
"""


@pytest.mark.parametrize("client_id", ["a5s-batch", f"a5s{LIVE_CLIENT}-idle"])
def test_a_consumer_paused_for_30_s_gets_a_record_produced_here_at_once(
        stack: Stack, client_id: str) -> None:
    """Batch consumers, and live ones idle long enough (here at once) to pause 30 s."""
    bootstrap = f"127.0.0.1:{stack.env['A5S_EMBEDDED__KAFKA']}"
    topic = f"test.wakeup-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([sys.executable, "-c", _SCRIPT, bootstrap, topic, client_id],
                          capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    value, seconds = done.stdout.split()
    assert value == "hello"
    assert float(seconds) < 10.0  # far under the 30 s pause it would otherwise sleep out


_BACKLOG = _PRELUDE.replace("PACING", _IDLE_PAUSES) + """\
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    sent = [await producer.send(topic, b"%03d" % n + b"x" * 97) for n in range(200)]
    await asyncio.gather(*sent)
    # The embedded broker answers a fetch with all a partition holds (it ignores the fetch
    # sizes), so the backlog comes in one caught-up fetch: its records must be handed over
    # before the pause. A partition left behind (``caught_up``) has its unit test.
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=60_000,
                                enable_auto_commit=False)
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    started, got = time.monotonic(), []
    while len(got) < 200 and time.monotonic() - started < 25:
        for records in (await consumer.getmany(timeout_ms=1000)).values():
            got += [r.value[:3] for r in records]
    backlog = time.monotonic() - started
    await producer.send_and_wait(topic, b"hello")
    sent_at = time.monotonic()
    record = await asyncio.wait_for(consumer.getone(), 25)
    print(len(got), got == [b"%03d" % n for n in range(200)], round(backlog, 3),
          record.value.decode(), round(time.monotonic() - sent_at, 3))
    await producer.stop()
    await consumer.stop()

asyncio.run(main())
"""


def test_a_caught_up_fetch_hands_its_records_over_then_a_record_produced_here_wakes_it(
        stack: Stack) -> None:
    bootstrap = f"127.0.0.1:{stack.env['A5S_EMBEDDED__KAFKA']}"
    topic = f"test.backlog-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([sys.executable, "-c", _BACKLOG, bootstrap, topic, "a5s-batch"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    count, in_order, backlog_s, value, woken_s = done.stdout.split()
    assert (int(count), in_order, value) == (200, "True", "hello")
    # Each would be 30 s or more had the caught-up fetch kept its records through its pause,
    # or had the record produced here not woken it.
    assert float(backlog_s) < 10.0
    assert float(woken_s) < 10.0


# A live consumer that received a record in the last 600 s pauses 30 s after an empty fetch.
_BUSY = (_PRELUDE.replace("PACING", "live_pause_s=30.0, live_busy_s=600.0")
         + _CONSUMER_AT_THE_END + """\
    await producer.send_and_wait(topic, b"first")
    await asyncio.wait_for(consumer.getone(), 25)  # records flow: the consumer is busy
    waiting = asyncio.ensure_future(consumer.getone())  # as the service's loops wait
    await asyncio.sleep(1.0)  # its next fetch came back empty: paused
    await producer.send_and_wait(topic, b"final")
    sent = time.monotonic()
    record = await asyncio.wait_for(waiting, 25)
    print(record.value.decode(), round(time.monotonic() - sent, 3))
    await producer.stop()
    await consumer.stop()

asyncio.run(main())
""")


def test_a_busy_live_consumer_is_woken_by_a_record_produced_here(stack: Stack) -> None:
    """While a session's records flow, a live consumer (the worker's of audio, the
    gateway's of transcripts) does not sleep out its pause: a record produced in its
    process reaches it at once (without the wake-up it would wait the 30 s pause)."""
    bootstrap = f"127.0.0.1:{stack.env['A5S_EMBEDDED__KAFKA']}"
    topic = f"test.busy-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([sys.executable, "-c", _BUSY, bootstrap, topic,
                           f"a5s{LIVE_CLIENT}-busy"],
                          capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    value, seconds = done.stdout.split()
    assert value == "final"
    assert float(seconds) < 10.0
