"""Nothing is lost across restarts: the Faust table, ClickHouse rows, Redis, the broker's log.

Runs its own stack so it can kill and restart it without disturbing other tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.stack import EvalServer, Stack

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
