"""Nothing is lost across restarts: the Faust table, ClickHouse rows, Redis, the broker's log.

Runs its own stack so it can kill and restart it without disturbing other tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from ops.stack import EvalServer, Stack, free_port, temporary_stack
from schemas.records import AccountLimits, Submitted
from topologies.topics import ACCOUNT_EVENTS, TopicSpec

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("persist") / "data")
    s.data_dir.mkdir(parents=True)
    s.start()
    yield s
    s.stop()


def _transcribe(stack: Stack, key: str, url: str) -> dict:
    with stack.client(key) as client:
        resp = client.post("/v1/transcripts", json={"audio_url": url, "metadata": {"n": 1}})
        assert resp.status_code == 201, resp.text
        return stack.wait_transcript(client, resp.json()["id"])


def _used(stack: Stack, key: str) -> dict:
    with stack.client(key) as client:
        return client.get("/v1/account").json()["usage_limit"]


def _sql(stack: Stack, query: str) -> str:
    """A read through the console's SQL endpoint (the data engineers' way in)."""
    token = (stack.data_dir / "console.token").read_text().strip()
    resp = httpx.post(f"http://127.0.0.1:{stack.console_port}/", content=query,
                      auth=("default", token), timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.text.strip()


def test_rows_in_the_insert_log_survive_a_killed_service(eval_server: EvalServer) -> None:
    """The job path's rows wait in the embedded engine's insert log (here for up to a
    minute); a service killed with rows there inserts them when it starts again."""
    with temporary_stack(env={"A5S_CLICKHOUSE_BATCH_S": "60"}) as stack:
        _, key = stack.new_account()
        url = eval_server.url("real/whisper/jfk.flac")
        first = _transcribe(stack, key, url)
        assert first["status"] == "completed"
        with stack.client(key) as client:
            resp = client.post("/v1/transcripts", json={"audio_url": url})
            assert resp.status_code == 201, resp.text
            second = resp.json()["id"]
            # Killed at once: the queued row and the request event are in the log, not yet
            # in a part (no statement ran since the POST; the reconciler reads every 15 s).
            stack.restart_service()
            assert "rows left by an earlier process, to insert" in stack.log_tail(400)
            listed = {t["id"] for t in client.get("/v1/transcripts").json()["data"]}
            assert {first["id"], second} <= listed, "the list reads ClickHouse"
            assert stack.wait_transcript(client, second)["status"] == "completed"
        assert _sql(stack, "SELECT kind, count() FROM a5s.usage_events FINAL WHERE "
                    f"transcript_id = '{second}' GROUP BY kind ORDER BY kind") == \
            "completed\t1\nrequest\t1"
        assert int(_sql(stack, "SELECT count() FROM a5s.transcripts FINAL WHERE "
                        f"id IN ('{first['id']}', '{second}') AND status = 'completed'")) == 2


def test_state_survives_worker_kill_and_full_restart(own_stack: Stack,
                                                     eval_server: EvalServer) -> None:
    account_id, key = own_stack.new_account()
    url = eval_server.url("real/whisper/jfk.flac")
    first = _transcribe(own_stack, key, url)
    assert first["status"] == "completed", first
    assert "ask not what your country can do for you" in first["text"]
    assert _used(own_stack, key)["used_seconds"] == pytest.approx(11.0, abs=0.01)

    # SIGKILL the process that runs the accounts agent; its table comes back from the changelog.
    own_stack.restart_service()
    second = _transcribe(own_stack, key, url)
    assert second["status"] == "completed"
    usage = _used(own_stack, key)
    assert usage["used_seconds"] == pytest.approx(22.0, abs=0.01), usage
    assert usage["reserved_seconds"] == 0

    # A whole stop and start on the same directory: accounts, keys, transcripts, results, usage.
    own_stack.stop()
    own_stack.start()
    with own_stack.client(key) as client:
        again = client.get(f"/v1/transcripts/{first['id']}").json()
        assert again["status"] == "completed" and again["text"] == first["text"]
        assert again["metadata"] == {"n": 1}
        listed = client.get("/v1/transcripts").json()["data"]
        assert {t["id"] for t in listed} >= {first["id"], second["id"]}
    assert _used(own_stack, key)["used_seconds"] == pytest.approx(22.0, abs=0.01)
    third = _transcribe(own_stack, key, url)
    assert third["status"] == "completed"
    assert _used(own_stack, key)["used_seconds"] == pytest.approx(33.0, abs=0.01)
    accounts = own_stack.console("GET", "/accounts")["data"]
    assert account_id in {a["account"]["id"] for a in accounts}


async def _changelog_records(bootstrap: str, suffix: str) -> tuple[int, int]:
    """(records still readable, offsets written) over every partition of the changelog."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        topic = next(t for t in await consumer.topics() if t.endswith(suffix))
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        records, deadline = 0, time.monotonic() + 30
        while any([await consumer.position(tp) < ends[tp] for tp in parts]):
            assert time.monotonic() < deadline, "the changelog could not be read to its end"
            batch = await consumer.getmany(timeout_ms=500)
            records += sum(len(messages) for messages in batch.values())
        return records, sum(ends.values())
    finally:
        await consumer.stop()


JOBS = 260
"""More than ``RECENT_PAGE`` (256): the first ids that left the account move to a page."""


async def _publish(bootstrap: str, spec: TopicSpec, key: str, value: object) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait("a5s." + spec.name, spec.encode(value), key=key.encode())
    finally:
        await producer.stop()


def _counted(stack: Stack, name: str, **labels: str) -> float:
    families = text_string_to_metric_families(httpx.get(stack.url("/metrics")).text)
    return sum(s.value for f in families for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_the_accounts_changelog_is_compacted_as_it_grows(own_stack: Stack) -> None:
    """An account's state is written whole on every change; old versions must not pile up
    in the broker (the embedded one keeps its log in memory). Its first ids to leave move
    to a page (``account-recent``), which a restarted worker recovers with the state: a
    replayed submission of such a job is still recognised."""
    account_id, key = own_stack.new_account()
    dead = f"http://127.0.0.1:{free_port()}/nothing.wav"  # refused: each job fails fast
    with own_stack.client(key) as client:
        ids = []
        for n in range(JOBS):
            resp = client.post("/v1/transcripts", json={"audio_url": dead, "metadata": {"n": n}})
            assert resp.status_code == 201, resp.text
            ids.append(resp.json()["id"])
        for tid in reversed(ids):  # first in, first out: the last one ends last
            assert own_stack.wait_transcript(client, tid, timeout_s=120)["status"] == "error"
    bootstrap = f"127.0.0.1:{own_stack.env['A5S_EMBEDDED__KAFKA']}"
    deadline = time.monotonic() + 60
    while True:
        records, written = asyncio.run(_changelog_records(bootstrap, "accounts-changelog"))
        # Each job changes the account's state at least twice (queued, then ended);
        # compaction keeps the latest version from each closed 1 MiB segment and the open
        # segment as it is.
        if written >= 2 * JOBS and records < written / 2:
            break
        assert time.monotonic() < deadline, (records, written)
        time.sleep(2)
    with own_stack.client(key) as client:  # and the compacted table still serves the account
        resp = client.post("/v1/transcripts", json={"audio_url": dead})
        assert resp.status_code == 201
        assert own_stack.wait_transcript(client, resp.json()["id"])["status"] == "error"

    own_stack.restart_service()  # SIGKILL: both tables come back from their changelogs
    queued = _counted(own_stack, "a5s_jobs_total", state="queued")
    asyncio.run(_publish(bootstrap, ACCOUNT_EVENTS, account_id, Submitted(
        account_id=account_id, transcript_id=ids[0], at=datetime.now(UTC),
        limits=AccountLimits(usage_limit_seconds=3600))))
    with own_stack.client(key) as client:  # behind the replay on the account's partition
        resp = client.post("/v1/transcripts", json={"audio_url": dead})
        assert resp.status_code == 201
        assert own_stack.wait_transcript(client, resp.json()["id"])["status"] == "error"
        assert client.get(f"/v1/transcripts/{ids[0]}").json()["status"] == "error"
    assert _counted(own_stack, "a5s_jobs_total", state="queued") == queued + 1, \
        "the replayed submission of a job in the account's first page was queued again"
