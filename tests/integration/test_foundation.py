"""The foundation against the real embedded stack: models, account, errors, console, auth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from schemas.api import Account, ModelList
from ops.stack import REPO, Stack

pytestmark = pytest.mark.stack


def test_models_need_no_auth_and_list_both(stack: Stack) -> None:
    resp = httpx.get(stack.url("/v1/models"))
    assert resp.status_code == 200
    models = ModelList.model_validate(resp.json())
    assert {(m.id, m.type, m.endpoint) for m in models.data} == {
        ("a5s-async-v1", "async", "/v1/transcripts"),
        ("a5s-v2-streaming", "streaming", "/v1/realtime")}
    assert all(m.languages == ["en"] for m in models.data)
    assert resp.headers["x-request-id"].startswith("req_")


def test_first_key_works_on_account(stack: Stack) -> None:
    key = (stack.data_dir / "first-key.txt").read_text().strip()
    assert key.startswith("a5s_sk_")
    with stack.client(key) as client:
        resp = client.get("/v1/account")
    assert resp.status_code == 200, resp.text
    account = Account.model_validate(resp.json())
    assert account.object == "account" and account.status == "active"
    body = resp.json()
    assert set(body["usage_limit"]) == {"limit_seconds", "used_seconds", "reserved_seconds",
                                        "remaining_seconds"}
    assert body["usage_limit"]["limit_seconds"] == 5 * 3600
    assert set(body["models"]["a5s-async-v1"]) == {
        "name", "type", "enabled", "max_concurrent_jobs", "max_queued_jobs",
        "max_requests_per_minute", "max_audio_duration_seconds", "retention_days",
        "jobs_queued", "jobs_processing"}
    assert set(body["models"]["a5s-v2-streaming"]) == {
        "name", "type", "enabled", "max_concurrent_sessions", "max_session_seconds"}
    assert body["models"]["a5s-async-v1"]["max_concurrent_jobs"] == 5


@pytest.mark.parametrize("header", [None, "Bearer a5s_sk_nope", "Basic abc", "Bearer  x y"])
def test_bad_credentials_are_401(stack: Stack, header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    resp = httpx.get(stack.url("/v1/account"), headers=headers)
    assert resp.status_code == 401
    err = resp.json()["error"]
    assert err["code"] == "unauthorized" and err["type"] == "authentication_error"
    assert err["request_id"] == resp.headers["x-request-id"]


@pytest.mark.parametrize("method,path", [("PUT", "/v1/models"), ("DELETE", "/v1/account"),
                                         ("PATCH", "/v1/transcripts"), ("POST", "/v1/models")])
def test_unsupported_method_is_405(stack: Stack, method: str, path: str) -> None:
    resp = httpx.request(method, stack.url(path))
    assert resp.status_code == 405
    assert resp.json()["error"]["code"] == "method_not_allowed"
    assert resp.headers["x-request-id"].startswith("req_")


def test_unknown_path_is_404_envelope(stack: Stack) -> None:
    resp = httpx.get(stack.url("/v1/nothing-here"))
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "not_found"


def test_health_reports_each_component(stack: Stack) -> None:
    body = httpx.get(stack.url("/health")).json()
    assert body["status"] == "ok"
    assert set(body["components"]) == {"clickhouse", "redis", "objects", "kafka"}
    assert all(c["ok"] for c in body["components"].values())


def test_listeners_bind_loopback_only(stack: Stack) -> None:
    out = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout \
        if os.path.exists("/usr/bin/ss") or os.path.exists("/bin/ss") else ""
    ports = [stack.port, stack.console_port, int(stack.env["A5S_EMBEDDED__KAFKA"]),
             int(stack.env["A5S_EMBEDDED__REDIS"])]
    if not out:
        pytest.fail("ss is not available to list listening sockets")
    for port in ports:
        lines = [line for line in out.splitlines() if f":{port} " in line]
        assert lines, f"nothing listens on {port}"
        assert all("127.0.0.1:" in line for line in lines), lines


# --- console: accounts, keys, statuses ------------------------------------------------------

def _admin(stack: Stack, *args: str) -> dict:
    env = {**os.environ, **stack.env}
    proc = subprocess.run([sys.executable, "-m", "ops.cli", "admin", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _admin_fails(stack: Stack, *args: str) -> str:
    env = {**os.environ, **stack.env}
    proc = subprocess.run([sys.executable, "-m", "ops.cli", "admin", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    return proc.stderr


def test_admin_account_lifecycle(stack: Stack) -> None:
    created = _admin(stack, "create-account", "--email", "ops@example.com", "--name", "Ops",
                     "--tier", "pro", "--usage-limit-seconds", "7200", "--no-streaming")
    account = created["account"]
    key = created["key"]["key"]
    assert key.startswith("a5s_sk_") and created["webhook_secret"].startswith("whsec_")
    assert account["tier"] == "pro" and account["usage_limit"]["limit_seconds"] == 7200
    assert account["models"]["a5s-v2-streaming"]["enabled"] is False
    with stack.client(key) as client:
        assert client.get("/v1/account").json()["email"] == "ops@example.com"
        _admin(stack, "suspend", account["id"])
        resp = client.get("/v1/account")
        assert resp.status_code == 403 and resp.json()["error"]["code"] == "account_suspended"
        _admin(stack, "disable", account["id"])
        resp = client.get("/v1/account")
        assert resp.status_code == 403 and resp.json()["error"]["code"] == "account_disabled"
        assert resp.json()["error"]["type"] == "permission_error"
        _admin(stack, "activate", account["id"])
        assert client.get("/v1/account").status_code == 200
    listed = _admin(stack, "list-accounts")["data"]
    assert account["id"] in {a["account"]["id"] for a in listed}


def test_admin_keys_limit_and_revocation(stack: Stack) -> None:
    account = _admin(stack, "create-account", "--email", "keys@example.com", "--no-key")
    acct = account["account"]["id"]
    keys = [_admin(stack, "create-key", acct, "--name", f"k{i}") for i in range(10)]
    assert len({k["key"] for k in keys}) == 10
    err = _admin_fails(stack, "create-key", acct)
    assert "at most 10 active keys" in err
    listed = _admin(stack, "list-keys", acct)["data"]
    assert len(listed) == 10 and all("key" not in k for k in listed)
    victim = keys[0]
    with stack.client(victim["key"]) as client:
        assert client.get("/v1/account").status_code == 200
        started = time.monotonic()
        _admin(stack, "revoke-key", victim["key_id"])
        while client.get("/v1/account").status_code != 401:
            assert time.monotonic() - started < 60, "revoked key still works after 60 s"
            time.sleep(0.5)
    # a slot is free again
    assert _admin(stack, "create-key", acct)["key"].startswith("a5s_sk_")


def test_only_key_hashes_are_stored(stack: Stack) -> None:
    account = _admin(stack, "create-account", "--email", "hash@example.com")
    key = account["key"]["key"]
    # The key text appears nowhere in the data directory, only its SHA-256.
    for path in stack.data_dir.rglob("*"):
        if path.is_file() and path.name not in ("first-key.txt",) and \
                path.stat().st_size < 50_000_000:
            assert key.encode() not in path.read_bytes(), path


def test_webhook_secret_show_and_rotate(stack: Stack) -> None:
    acct = _admin(stack, "create-account", "--email", "wh@example.com", "--no-key")
    account_id = acct["account"]["id"]
    first = _admin(stack, "webhook-secret", account_id)["webhook_secret"]
    assert first.startswith("whsec_") and first == acct["webhook_secret"]
    rotated = _admin(stack, "webhook-secret", account_id, "--rotate")["webhook_secret"]
    assert rotated.startswith("whsec_") and rotated != first
    assert _admin(stack, "webhook-secret", account_id)["webhook_secret"] == rotated


def test_console_refuses_without_token(stack: Stack) -> None:
    resp = httpx.get(f"http://127.0.0.1:{stack.console_port}/console/v1/accounts",
                     headers={"Authorization": "Bearer wrong"})
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "session_required"


def test_api_keys_cannot_reach_the_console(stack: Stack) -> None:
    _, key = stack.new_account()
    resp = httpx.get(f"http://127.0.0.1:{stack.console_port}/console/v1/accounts",
                     headers={"Authorization": f"Bearer {key}"})
    assert resp.status_code == 403
