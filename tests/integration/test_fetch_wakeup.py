"""On the embedded broker a consumer paused after an empty fetch is woken by a record
produced in its own process, not left to sleep out its pause (``pace_empty_fetches``)."""

from __future__ import annotations

import subprocess
import sys
import uuid

from ops.stack import Stack

# A fresh interpreter: the pacing is installed once per process, with its pause.
_SCRIPT = """
import asyncio, sys, time
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from stores.kafka import pace_empty_fetches

bootstrap, topic = sys.argv[1], sys.argv[2]
pace_empty_fetches(pause_s=30.0)

async def main():
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, 1, 1)])
    await admin.close()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=60_000,
                                enable_auto_commit=False)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await consumer.start()
    await producer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    await consumer.seek_to_end(tp)
    await consumer.position(tp)
    assert not await consumer.getmany(timeout_ms=1500)  # fetched nothing: now paused
    await producer.send_and_wait(topic, b"hello")
    sent = time.monotonic()
    record = await asyncio.wait_for(consumer.getone(), 25)
    print(record.value.decode(), round(time.monotonic() - sent, 3))
    await producer.stop()
    await consumer.stop()

asyncio.run(main())
"""


def test_a_consumer_paused_for_30_s_gets_a_record_produced_here_at_once(stack: Stack) -> None:
    bootstrap = f"127.0.0.1:{stack.env['A5S_EMBEDDED__KAFKA']}"
    topic = f"test.wakeup-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([sys.executable, "-c", _SCRIPT, bootstrap, topic], capture_output=True,
                          text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    value, seconds = done.stdout.split()
    assert value == "hello"
    assert float(seconds) < 10.0  # far under the 30 s pause it would otherwise sleep out
