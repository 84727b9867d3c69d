"""Read finished transcripts from the public ``transcripts.completed`` topic (aiokafka).

::

    python examples/consume_completed.py                      # from now on, group a5s-example
    python examples/consume_completed.py --from-beginning --group my-etl
    A5S_KAFKA_BOOTSTRAP=kafka:9092 python examples/consume_completed.py

The broker and the topic prefix come from the service's own settings (``A5S_KAFKA_BOOTSTRAP``,
or the embedded broker's port ``A5S_EMBEDDED__KAFKA``; ``A5S_TOPIC_PREFIX``, default ``a5s.``),
so the script reads the same topic the service writes. Each record is JSON matching
``schemas.records.CompletedTranscript``, keyed by transcript id. Delivery is at-least-once:
the script de-duplicates by ``id`` within its run, and commits offsets only after a record
is handled, so a crash re-reads rather than loses. Prints one JSON line per transcript.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer

from schemas.records import CompletedTranscript
from schemas.settings import Settings

TOPIC = "transcripts.completed"


def summarise(record: CompletedTranscript) -> dict[str, object]:
    """What a downstream table might keep: a row per transcript."""
    return {"id": record.id, "account_id": record.account_id, "status": record.status,
            "completed_at": record.completed_at.isoformat(), "audio_duration":
            record.audio_duration, "words": len(record.words or []),
            "speakers": len(record.speakers or []), "error_code": record.error_code,
            "text": (record.text or "")[:200], "metadata": record.metadata}


async def consume(bootstrap: str, topic: str, group: str, from_beginning: bool,
                  handle: Callable[[CompletedTranscript], bool], timeout_s: float | None) -> int:
    """Handle records until ``handle`` returns True or ``timeout_s`` passes; returns a count."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest" if from_beginning else "latest",
        fetch_max_wait_ms=200)
    await consumer.start()
    seen: set[str] = set()
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    try:
        while deadline is None or loop.time() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for msg in records:
                    record = CompletedTranscript.model_validate_json(msg.value)
                    if record.id in seen:  # at-least-once: a redelivered record
                        continue
                    seen.add(record.id)
                    if handle(record):
                        await consumer.commit()
                        return len(seen)
            if batches:
                await consumer.commit()
        return len(seen)
    finally:
        await consumer.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", default="a5s-example", help="consumer group id")
    parser.add_argument("--from-beginning", action="store_true",
                        help="a new group starts at the oldest kept record (30 days)")
    parser.add_argument("--until", metavar="ID", help="stop once this transcript is seen")
    parser.add_argument("--timeout", type=float, default=None, help="stop after N seconds")
    args = parser.parse_args()
    settings = Settings()
    topic = settings.topic_prefix + TOPIC

    def handle(record: CompletedTranscript) -> bool:
        print(json.dumps(summarise(record)), flush=True)
        return record.id == args.until

    asyncio.run(consume(settings.bootstrap, topic, args.group, args.from_beginning, handle,
                        args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
