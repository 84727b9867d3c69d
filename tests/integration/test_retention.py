"""Retention and data handling (spec sections 3 and 8) with a controllable clock.

The console's ``POST /console/v1/maintenance/sweep {"now": ...}`` runs the worker's
retention sweep as of a chosen instant, so "30 days later" takes a second. What
expired must be gone from every store the test can see: the API, the object store
under the data directory, and Redis. The 30-day default runs last in this module,
since it expires every transcript the session finished before it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from schemas.rows import TranscriptRow
from ops.stack import EVAL, EvalServer, Stack, free_port

pytestmark = pytest.mark.stack

SHORT_CLIP = "real/asterisk_16k/added.wav"
MISSING = "no/such/file.wav"


@pytest.fixture(scope="module")
def valkey(stack: Stack) -> Iterator[redis.Redis]:
    client = redis.Redis(port=int(stack.env["A5S_EMBEDDED__REDIS"]), decode_responses=True)
    yield client
    client.close()


def _sweep(stack: Stack, now: datetime) -> dict[str, Any]:
    # A sweep that expires the whole session's transcripts does real work per transcript.
    return stack.console("POST", "/maintenance/sweep", {"now": now.isoformat()}, timeout_s=600)


def _submit(client: httpx.Client, **body: Any) -> str:
    resp = client.post("/v1/transcripts", json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def _job_dir(stack: Stack, tid: str) -> Path:
    return stack.data_dir / "objects" / "jobs" / tid


def _upload(client: httpx.Client, path: str) -> str:
    resp = client.post("/v1/files", content=(EVAL / path).read_bytes())
    assert resp.status_code in (200, 201), resp.text
    return resp.json()["id"]


def _eventually(check: Any, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_transcripts_expire_after_their_account_retention(
        stack: Stack, eval_server: EvalServer, valkey: redis.Redis) -> None:
    account_id, key = stack.new_account(retention_days=2)
    refused = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens: retried, then given up
    with stack.client(key) as client:
        done = _submit(client, audio_url=eval_server.url(SHORT_CLIP), webhook_url=refused,
                       webhook_auth_header_name="X-Token", webhook_auth_header_value="t",
                       metadata={"customer": "c-1"})
        failed = _submit(client, audio_url=eval_server.url(MISSING))
        assert stack.wait_transcript(client, done)["status"] == "completed"
        assert stack.wait_transcript(client, failed)["status"] == "error"
        finished = datetime.now(UTC)

        kept = _sweep(stack, finished + timedelta(days=1))
        assert kept["transcripts"] == 0
        for tid in (done, failed):
            assert client.get(f"/v1/transcripts/{tid}").status_code == 200

        report = _sweep(stack, finished + timedelta(days=2, minutes=5))
        assert report["transcripts"] >= 2
        for tid in (done, failed):
            resp = client.get(f"/v1/transcripts/{tid}")
            assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"
            assert not _job_dir(stack, tid).exists()
        assert not valkey.exists(f"a5s:webhook-auth:{done}")
        listed = client.get("/v1/transcripts").json()["data"]
        assert {t["id"] for t in listed}.isdisjoint({done, failed})
        assert _sweep(stack, finished + timedelta(days=3))["transcripts"] == 0  # idempotent


def test_unused_uploads_expire_after_24_hours(stack: Stack, valkey: redis.Redis) -> None:
    _, key = stack.new_account()
    with stack.client(key) as client:
        direct = _upload(client, SHORT_CLIP)
        resp = client.post("/v1/files/upload-url")
        assert resp.status_code in (200, 201), resp.text
        presigned = resp.json()["id"]
        stored = stack.data_dir / "objects" / "uploads" / direct
        assert stored.is_file()
        created = datetime.now(UTC)

        _sweep(stack, created + timedelta(hours=23))
        assert stored.is_file()
        assert valkey.exists(f"a5s:upload:{direct}") and valkey.exists(f"a5s:upload:{presigned}")

        report = _sweep(stack, created + timedelta(hours=24, minutes=5))
        assert report["uploads"] >= 2
        assert not stored.exists()
        assert not valkey.exists(f"a5s:upload:{direct}")
        assert not valkey.exists(f"a5s:upload:{presigned}")
        resp = client.post("/v1/transcripts", json={"file_id": direct})
        assert resp.status_code in (400, 404) and resp.json()["error"]["param"] == "file_id"


def test_a_used_upload_and_the_processing_copies_go_when_the_job_ends(
        stack: Stack, valkey: redis.Redis) -> None:
    _, key = stack.new_account()
    with stack.client(key) as client:
        file_id = _upload(client, SHORT_CLIP)
        tid = _submit(client, file_id=file_id)
        assert stack.wait_transcript(client, tid)["status"] == "completed"
        assert _eventually(lambda: not _job_dir(stack, tid).exists())
        assert not (stack.data_dir / "objects" / "uploads" / file_id).exists()


def test_orphaned_processing_copies_are_swept(stack: Stack) -> None:
    now = datetime.now(UTC)
    old, fresh = _job_dir(stack, "tr_orphanold0001"), _job_dir(stack, "tr_orphannew0001")
    for folder in (old, fresh):
        folder.mkdir(parents=True)
        (folder / "audio.pcm").write_bytes(b"\0" * 64)
    stamp = (now - timedelta(hours=2)).timestamp()
    os.utime(old / "audio.pcm", (stamp, stamp))
    report = _sweep(stack, now)
    assert report["job_objects"] >= 1
    assert not old.exists() and fresh.exists()  # a job just submitted writes before its row
    _sweep(stack, now + timedelta(hours=2))
    assert not fresh.exists()


def test_deleting_a_transcript_removes_its_details(stack: Stack, eval_server: EvalServer,
                                                   valkey: redis.Redis) -> None:
    _, key = stack.new_account()
    with stack.client(key) as client:
        tid = _submit(client, audio_url=eval_server.url(SHORT_CLIP),
                      webhook_url=f"http://127.0.0.1:{free_port()}/hook",
                      webhook_auth_header_name="X-Token", webhook_auth_header_value="t",
                      metadata={"customer": "c-2"})
        assert stack.wait_transcript(client, tid)["status"] == "completed"
        resp = client.delete(f"/v1/transcripts/{tid}")
        assert resp.status_code == 200 and resp.json()["deleted"] is True
        assert client.get(f"/v1/transcripts/{tid}").status_code == 404
        assert not valkey.exists(f"a5s:webhook-auth:{tid}")
        assert _eventually(lambda: not _job_dir(stack, tid).exists())


def test_deleted_rows_keep_no_details_in_clickhouse(tmp_path: Path) -> None:
    """The store itself, on a real ClickHouse engine (chdb) of this test's own."""
    from stores.clickhouse import ClickHouse
    from stores.transcripts import Transcripts

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
        ch = ClickHouse(f"chdb://{tmp_path / 'ch'}", "retention_test")
        await ch.start()
        try:
            store = Transcripts(ch)
            now = datetime.now(UTC)
            await ch.insert("accounts", [{
                "id": "acct_1", "email": "a@example.com", "display_name": "a",
                "created_at": now, "status": "active", "tier": "free",
                "usage_limit_seconds": 1.0, "async_enabled": 1, "streaming_enabled": 1,
                "max_concurrent_jobs": 5, "max_queued_jobs": 5, "max_requests_per_minute": 5,
                "max_audio_duration_seconds": 5, "retention_days": 30,
                "max_concurrent_sessions": 5, "max_session_seconds": 5,
                "webhook_secret": "whsec_x", "updated_at": now}])
            await store.insert(TranscriptRow(
                id="tr_a", account_id="acct_1", key_id="k", created_at=now, status="queued",
                audio_url="https://example.com/secret.wav", webhook_url="https://h.example/x",
                metadata='{"customer":"c-3"}'))
            row = await store.change("tr_a", "completed", now - timedelta(days=31))
            assert row is not None
            from schemas.records import TranscriptResult
            await store.save_result(row, TranscriptResult(text="hello world"))
            expired = [r.id for r in await store.expired(now)]
            await store.delete(row)
            versions = await ch.query("SELECT * FROM {db}.transcripts WHERE id = 'tr_a'")
            results = await ch.query("SELECT * FROM {db}.transcript_results FINAL "
                                     "WHERE id = 'tr_a' AND deleted = 0")
            return versions, results, expired
        finally:
            await ch.close()

    versions, results, expired = asyncio.run(scenario())
    assert expired == ["tr_a"]
    assert results == []
    assert len(versions) == 1 and versions[0]["deleted"] == 1
    assert versions[0]["metadata"] == "{}" and versions[0]["audio_url"] is None
    assert versions[0]["webhook_url"] is None


def test_default_retention_is_30_days(stack: Stack, eval_server: EvalServer) -> None:
    """Runs last: sweeping at +31 days expires every transcript finished so far."""
    _, key = stack.new_account()
    with stack.client(key) as client:
        assert client.get("/v1/account").json()["models"]["a5s-async-v1"][
            "retention_days"] == 30
        tid = _submit(client, audio_url=eval_server.url(SHORT_CLIP))
        assert stack.wait_transcript(client, tid)["status"] == "completed"
        finished = datetime.now(UTC)
        _sweep(stack, finished + timedelta(days=29, hours=23))
        assert client.get(f"/v1/transcripts/{tid}").status_code == 200
        _sweep(stack, finished + timedelta(days=30, minutes=5))
        assert client.get(f"/v1/transcripts/{tid}").status_code == 404
