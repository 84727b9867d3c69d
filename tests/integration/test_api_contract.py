"""The batch REST API against the real embedded stack: every endpoint, every HTTP error row
of spec section 7 the API can produce, and every section 8 limit it enforces.

Jobs made here are cheap: ``audio_url`` points at a loopback path that answers 404, so
they end in ``download_failed`` at once. One test transcribes a 2-second clip.
"""

from __future__ import annotations

import http.server
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from security.signing import sign_upload
from schemas.api import (FIELD_MAXIMA, METADATA_MAX_BYTES, Account, DeletedTranscript,
                         FileObject, ModelList, Transcript, TranscriptList, UploadUrl, Usage)
from schemas.errors import HTTP_ERRORS
from ops.stack import EvalServer, Stack, free_port

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]

TYPES = {e.code: (e.http_status, e.type) for e in HTTP_ERRORS}
CLIP = "real/asterisk_16k/vm-leavemsg.wav"  # 2.1 s, "press 5 to leave a message"


def expect_error(resp: httpx.Response, status: int, code: str,
                 param: str | None | type[Ellipsis] = ...) -> dict[str, Any]:
    """The spec's envelope with this status and code, and the request id in both places."""
    assert resp.status_code == status, f"{resp.status_code} {resp.text[:300]}"
    assert resp.headers["content-type"].startswith("application/json")
    err = resp.json()["error"]
    assert (err["code"], resp.status_code, err["type"]) == (code, *TYPES[code])
    assert set(err) == {"type", "code", "message", "param", "request_id"} and err["message"]
    assert re.fullmatch(r"req_[0-9a-z]{26}", resp.headers["x-request-id"])
    assert err["request_id"] == resp.headers["x-request-id"]
    if param is not ...:
        assert err["param"] == param, err
    return err


def raw_request(port: int, head: str, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request over a socket: lets a test declare a Content-Length it never sends."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while True:
            head_raw, sep, payload = data.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head_raw)
            if sep and length and len(payload) >= int(length.group(1)):
                break
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    lines = head_raw.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, payload


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def no_uncaught_errors(stack: Stack) -> Iterator[None]:
    with stack.no_uncaught_errors():
        yield


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.new_account()[1]


@pytest.fixture(scope="module")
def client(stack: Stack, key: str) -> Iterator[httpx.Client]:
    with stack.client(key) as c:
        yield c


@pytest.fixture(scope="module")
def dead_url(eval_server: EvalServer) -> str:
    """A loopback URL that answers 404: its jobs fail fast with download_failed."""
    return eval_server.url("no-such-file.wav")


class _SlowAudio(http.server.BaseHTTPRequestHandler):
    release: threading.Event

    def do_GET(self) -> None:  # noqa: N802
        self.release.wait(300)
        self.send_error(404)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def slow_url() -> Iterator[str]:
    """A loopback URL that holds every request until the test ends: keeps a job processing."""
    release = threading.Event()
    handler = type("SlowAudio", (_SlowAudio,), {"release": release})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/slow.wav"
    release.set()
    server.shutdown()


# --- discovery: models, account, OpenAPI ------------------------------------------------------


def test_models_and_openapi_need_no_key(stack: Stack) -> None:
    resp = httpx.get(stack.url("/v1/models"))
    assert resp.status_code == 200 and resp.headers["x-request-id"].startswith("req_")
    assert {m.id for m in ModelList.model_validate(resp.json()).data} == {
        "a5s-async-v1", "a5s-v2-streaming"}
    doc = httpx.get(stack.url("/v1/openapi.json")).json()
    assert doc["openapi"].startswith("3.1") and doc["info"]["version"] == "1.0.0"


class _RouteTableContext(SimpleNamespace):
    """Enough of a Context to build the route table without connecting to anything."""

    def __init__(self) -> None:
        super().__init__(extras={})

    def __getattr__(self, name: str) -> None:
        return None


def test_openapi_describes_every_route(stack: Stack) -> None:
    from gateway.app import api_routes
    doc = httpx.get(stack.url("/v1/openapi.json")).json()
    described = {re.sub(r"\{[^}]+\}", "X", p) for p in doc["paths"]}
    routes = {re.sub(r"\([^)]*\)", "X", r[0]).replace("\\", "")
              for r in api_routes(_RouteTableContext())}  # type: ignore[arg-type]
    assert routes | {"/v1/realtime"} <= described, routes - described
    for path, item in doc["paths"].items():
        for method, op in item.items():
            for name in ("{id}", "{file_id}"):
                if name in path:
                    assert any(p["name"] == name[1:-1] for p in op["parameters"])
            for status, response in op["responses"].items():
                if "$ref" in response:
                    response = doc["components"]["responses"][response["$ref"].split("/")[-1]]
                assert "x-request-id" in response["headers"], (path, method, status)
    body = doc["components"]["schemas"]["CreateTranscript"]["properties"]
    for name, limit in FIELD_MAXIMA.items():
        schema = body[name].get("anyOf", [body[name]])[0]
        assert schema["maxLength"] == limit, name
    assert doc["paths"]["/v1/transcripts"]["post"]["responses"]["429"]
    assert doc["components"]["responses"]["Error429"]["headers"]["Retry-After"]["required"]


def test_account(client: httpx.Client) -> None:
    resp = client.get("/v1/account")
    assert resp.status_code == 200
    account = Account.model_validate(resp.json())
    assert account.status == "active" and account.usage_limit.limit_seconds == 5 * 3600


# --- 401, 403 ---------------------------------------------------------------------------------

AUTHED = [("GET", "/v1/account"), ("POST", "/v1/transcripts"), ("GET", "/v1/transcripts"),
          ("GET", "/v1/transcripts/tr_00000000000000000000000000"),
          ("DELETE", "/v1/transcripts/tr_00000000000000000000000000"),
          ("GET", "/v1/transcripts/tr_00000000000000000000000000/subtitles"),
          ("POST", "/v1/files"), ("POST", "/v1/files/upload-url"), ("GET", "/v1/usage")]


@pytest.mark.parametrize("header", [None, "Bearer a5s_sk_unknown", "Basic Zm9vOmJhcg=="])
def test_every_endpoint_needs_a_key(stack: Stack, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    for method, path in AUTHED:
        resp = httpx.request(method, stack.url(path), headers=headers, content=b"{}")
        expect_error(resp, 401, "unauthorized", None)


@pytest.mark.parametrize(("status", "code"), [("suspended", "account_suspended"),
                                               ("disabled", "account_disabled")])
def test_suspended_and_disabled_accounts(stack: Stack, status: str, code: str) -> None:
    account_id, key = stack.new_account()
    stack.console("PATCH", f"/accounts/{account_id}", {"status": status})
    with stack.client(key) as c:
        for method, path in AUTHED:
            expect_error(c.request(method, path, content=b"{}"), 403, code)


def test_usage_limit_reached(stack: Stack, dead_url: str) -> None:
    _, key = stack.new_account(usage_limit_seconds=0)
    with stack.client(key) as c:
        expect_error(c.post("/v1/transcripts", json={"audio_url": dead_url}), 403,
                     "usage_limit_reached")
        assert c.get("/v1/account").status_code == 200  # reading stays allowed


def test_model_access_denied(stack: Stack, dead_url: str) -> None:
    _, key = stack.new_account(async_enabled=False)
    with stack.client(key) as c:
        expect_error(c.post("/v1/transcripts", json={"audio_url": dead_url}), 403,
                     "model_access_denied", "model")


# --- create: validation and section 8 field limits --------------------------------------------


def _url_of_length(n: int) -> str:
    base = "http://127.0.0.1:9/a"
    return base + "b" * (n - len(base))


BAD_BODIES: list[tuple[str, Any, str, str | None]] = [
    ("not json", b"{nope", "invalid_request", None),
    ("array", b"[]", "invalid_request", None),
    ("neither source", {}, "invalid_request", "audio_url"),
    ("both sources", {"audio_url": "http://a.example/x.wav", "file_id": "file_x"},
     "invalid_request", "file_id"),
    ("url wrong type", {"audio_url": 5}, "invalid_request", "audio_url"),
    ("url not http", {"audio_url": "ftp://a.example/x.wav"}, "invalid_request", "audio_url"),
    ("url relative", {"audio_url": "/x.wav"}, "invalid_request", "audio_url"),
    ("url credentials", {"audio_url": "https://user:pw@a.example/x.wav"}, "invalid_request",
     "audio_url"),
    ("url user only", {"audio_url": "http://user@a.example/x.wav"}, "invalid_request",
     "audio_url"),
    ("metadata not object", {"audio_url": "http://a.example/x", "metadata": [1]},
     "invalid_request", "metadata"),
    ("metadata too big", {"audio_url": "http://a.example/x",
                          "metadata": {"k": "x" * (METADATA_MAX_BYTES - 7)}},
     "invalid_request", "metadata"),
    ("unknown field", {"audio_url": "http://a.example/x", "speed": 2}, "invalid_request",
     "speed"),
    ("header name without url", {"audio_url": "http://a.example/x",
                                 "webhook_auth_header_name": "X-A",
                                 "webhook_auth_header_value": "b"},
     "invalid_request", "webhook_auth_header_name"),
    ("header value without url", {"audio_url": "http://a.example/x",
                                  "webhook_auth_header_value": "b"},
     "invalid_request", "webhook_auth_header_value"),
    ("header name not a token", {"audio_url": "http://a.example/x",
                                 "webhook_url": "http://a.example/h",
                                 "webhook_auth_header_name": "X Auth",
                                 "webhook_auth_header_value": "b"},
     "invalid_request", "webhook_auth_header_name"),
    ("header value injects", {"audio_url": "http://a.example/x",
                              "webhook_url": "http://a.example/h",
                              "webhook_auth_header_name": "X-Auth",
                              "webhook_auth_header_value": "b\r\nX-Evil: 1"},
     "invalid_request", "webhook_auth_header_value"),
    ("webhook not http", {"audio_url": "http://a.example/x", "webhook_url": "mailto:a@b.c"},
     "invalid_request", "webhook_url"),
    ("model wrong type", {"audio_url": "http://a.example/x", "model": 1}, "invalid_request",
     "model"),
    ("other model", {"audio_url": "http://a.example/x", "model": "a5s-v2-streaming"},
     "unsupported_model", "model"),
    ("french", {"audio_url": "http://a.example/x", "language_code": "fr"},
     "unsupported_language", "language_code"),
    ("english-ish", {"audio_url": "http://a.example/x", "language_code": "en-XX"},
     "unsupported_language", "language_code"),
]
for _field, _limit in FIELD_MAXIMA.items():  # one character over each section 8 maximum
    _over = ({"audio_url": _url_of_length(_limit + 1)} if _field == "audio_url" else
             {"audio_url": "http://a.example/x", "webhook_url": "http://a.example/h",
              "webhook_auth_header_name": "X-A", "webhook_auth_header_value": "v",
              _field: (_url_of_length(_limit + 1) if _field == "webhook_url"
                       else "e" * (_limit + 1))})
    BAD_BODIES.append((f"{_field} over {_limit}", _over, "invalid_request", _field))


@pytest.mark.parametrize(("case", "body", "code", "param"), BAD_BODIES,
                         ids=[b[0] for b in BAD_BODIES])
def test_create_rejects(client: httpx.Client, case: str, body: Any, code: str,
                        param: str | None) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    resp = client.post("/v1/transcripts", content=raw,
                       headers={"Content-Type": "application/json"})
    expect_error(resp, 400, code, param)


def test_create_accepts_every_field_at_its_maximum(stack: Stack, dead_url: str) -> None:
    _, key = stack.new_account()
    hook = _url_of_length(FIELD_MAXIMA["webhook_url"]).replace(":9/", ":1/")
    body = {"audio_url": dead_url + "?" + "p" * (FIELD_MAXIMA["audio_url"] - len(dead_url) - 1),
            "language_code": " en-US".ljust(FIELD_MAXIMA["language_code"]),
            "webhook_url": hook,
            "webhook_auth_header_name": "X" * FIELD_MAXIMA["webhook_auth_header_name"],
            "webhook_auth_header_value": "v" * FIELD_MAXIMA["webhook_auth_header_value"],
            "metadata": {"k": "x" * (METADATA_MAX_BYTES - 8)}}
    assert len(body["audio_url"]) == FIELD_MAXIMA["audio_url"]
    with stack.client(key) as c:
        resp = c.post("/v1/transcripts", json=body, headers={"Idempotency-Key": "k" * 255})
        assert resp.status_code == 201, resp.text
        created = Transcript.model_validate(resp.json())
        assert created.status == "queued" and created.language_code == "en"
        assert created.metadata == body["metadata"]
        assert resp.headers["location"].endswith(f"/v1/transcripts/{created.id}")
        # file_id at 64 characters passes validation and is judged as an id
        expect_error(c.post("/v1/transcripts", json={"file_id": "f" * 64}), 404,
                     "file_not_found", "file_id")
        expect_error(c.post("/v1/transcripts", json={"audio_url": dead_url},
                            headers={"Idempotency-Key": "k" * 256}),
                     400, "invalid_request", "Idempotency-Key")
        c.delete(f"/v1/transcripts/{created.id}")


def test_idempotency(client: httpx.Client, dead_url: str) -> None:
    headers = {"Idempotency-Key": f"idem-{time.time_ns()}"}
    first = client.post("/v1/transcripts", json={"audio_url": dead_url}, headers=headers)
    again = client.post("/v1/transcripts", json={"audio_url": dead_url}, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    expect_error(client.post("/v1/transcripts", json={"audio_url": dead_url + "?other"},
                             headers=headers), 409, "idempotency_conflict")


# --- 404, 405 ---------------------------------------------------------------------------------


def test_not_found(stack: Stack, client: httpx.Client, dead_url: str) -> None:
    missing = "tr_00000000000000000000000000"
    for method, path in [("GET", f"/v1/transcripts/{missing}"),
                         ("DELETE", f"/v1/transcripts/{missing}"),
                         ("GET", f"/v1/transcripts/{missing}/subtitles"),
                         ("GET", "/v1/nothing-here"), ("POST", "/v2/transcripts"),
                         ("GET", f"/v1/transcripts/{missing}/words/1")]:
        expect_error(client.request(method, path), 404, "not_found")
    theirs = client.post("/v1/transcripts", json={"audio_url": dead_url}).json()["id"]
    _, other_key = stack.new_account()
    with stack.client(other_key) as other:
        for method, path in [("GET", f"/v1/transcripts/{theirs}"),
                             ("DELETE", f"/v1/transcripts/{theirs}"),
                             ("GET", f"/v1/transcripts/{theirs}/subtitles")]:
            expect_error(other.request(method, path), 404, "not_found")
        assert theirs not in [t["id"] for t in other.get("/v1/transcripts").json()["data"]]


def test_unknown_query_parameters_are_refused(client: httpx.Client) -> None:
    for method, path in [("GET", "/v1/usage"), ("GET", "/v1/transcripts"), ("GET", "/v1/account"),
                         ("POST", "/v1/transcripts"), ("POST", "/v1/files/upload-url")]:
        expect_error(client.request(method, path, params={"days": 1, "bogus": 1}), 400,
                     "invalid_request", "days" if path != "/v1/usage" else "bogus")


ROUTE_METHODS = {
    "/v1/models": {"GET"}, "/v1/account": {"GET"}, "/v1/transcripts": {"GET", "POST"},
    "/v1/transcripts/tr_00000000000000000000000000": {"GET", "DELETE"},
    "/v1/transcripts/tr_00000000000000000000000000/subtitles": {"GET"},
    "/v1/files": {"POST"}, "/v1/files/upload-url": {"POST"},
    "/v1/uploads/file_00000000000000000000000000": {"PUT"}, "/v1/usage": {"GET"},
    "/v1/openapi.json": {"GET"}, "/health": {"GET"},
}


def test_unsupported_methods_are_405(client: httpx.Client) -> None:
    for path, allowed in ROUTE_METHODS.items():
        for method in sorted({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS",
                              "TRACE"} - allowed):
            resp = client.request(method, path)
            assert resp.status_code == 405, (method, path, resp.status_code)
            assert resp.headers["x-request-id"].startswith("req_")
            if method != "HEAD":
                expect_error(resp, 405, "method_not_allowed")


# --- 429 --------------------------------------------------------------------------------------


def test_rate_limited(stack: Stack) -> None:
    _, key = stack.new_account(max_requests_per_minute=3)
    with stack.client(key) as c:
        for _ in range(3):  # every create request counts, valid or not
            expect_error(c.post("/v1/transcripts", json={}), 400, "invalid_request")
        resp = c.post("/v1/transcripts", json={})
        expect_error(resp, 429, "rate_limited")
        assert re.fullmatch(r"[1-9][0-9]*", resp.headers["retry-after"])
        assert int(resp.headers["retry-after"]) <= 60
        assert c.get("/v1/transcripts").status_code == 200  # reads are not limited


def test_queue_full(stack: Stack, slow_url: str) -> None:
    _, key = stack.new_account(max_concurrent_jobs=1, max_queued_jobs=2)
    with stack.client(key) as c:
        accepted, refused = [], None
        for n in range(4):  # 1 processing (held by the slow URL) + 2 waiting, then full
            resp = c.post("/v1/transcripts", json={"audio_url": f"{slow_url}?n={n}"})
            if resp.status_code == 429:
                refused = resp
                break
            assert resp.status_code == 201, resp.text
            accepted.append(resp.json()["id"])
        assert refused is not None and 2 <= len(accepted) <= 3
        expect_error(refused, 429, "queue_full")
        assert re.fullmatch(r"[1-9][0-9]*", refused.headers["retry-after"])
        # canceling a waiting job frees its place at once
        waiting = [t for t in accepted
                   if c.get(f"/v1/transcripts/{t}").json()["status"] == "queued"]
        assert waiting
        canceled = DeletedTranscript.model_validate(
            c.delete(f"/v1/transcripts/{waiting[-1]}").json())
        assert canceled.deleted and canceled.error and canceled.error.code == "canceled"
        again = c.post("/v1/transcripts", json={"audio_url": slow_url})
        assert again.status_code == 201, again.text
        for tid in accepted + [again.json()["id"]]:
            c.delete(f"/v1/transcripts/{tid}")


# --- files ------------------------------------------------------------------------------------


def test_direct_upload_is_one_use(client: httpx.Client, stack: Stack) -> None:
    resp = client.post("/v1/files", content=b"\0" * 70_000,
                       headers={"Content-Type": "application/octet-stream"})
    assert resp.status_code == 201, resp.text
    upload = FileObject.model_validate(resp.json())
    assert upload.id.startswith("file_") and upload.bytes == 70_000
    assert (stack.data_dir / "objects" / "uploads" / upload.id).stat().st_size == 70_000
    _, other_key = stack.new_account()
    with stack.client(other_key) as other:  # another account cannot use it
        expect_error(other.post("/v1/transcripts", json={"file_id": upload.id}), 404,
                     "file_not_found", "file_id")
    first = client.post("/v1/transcripts", json={"file_id": upload.id})
    assert first.status_code == 201 and first.json()["file_id"] == upload.id
    expect_error(client.post("/v1/transcripts", json={"file_id": upload.id}), 404,
                 "file_not_found", "file_id")
    expect_error(client.post("/v1/transcripts", json={"file_id": "file_unknown"}), 404,
                 "file_not_found", "file_id")


def test_chunked_upload_streams(client: httpx.Client) -> None:
    def body() -> Iterator[bytes]:
        for _ in range(20):
            yield b"\1" * 50_000
    resp = client.post("/v1/files", content=body())
    assert resp.status_code == 201, resp.text
    assert resp.json()["bytes"] == 1_000_000


def test_empty_upload_is_refused(client: httpx.Client) -> None:
    expect_error(client.post("/v1/files", content=b""), 400, "invalid_request")


def test_oversized_uploads_are_413_before_the_body(stack: Stack, key: str) -> None:
    limit = 1 << 30
    status, headers, payload = raw_request(
        stack.port, f"POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                    f"Content-Length: {limit + 1}\r\n", b"only a few bytes")
    assert status == 413
    err = json.loads(payload)["error"]
    assert err["code"] == "file_too_large" and err["request_id"] == headers["x-request-id"]
    url = UploadUrl.model_validate(
        httpx.post(stack.url("/v1/files/upload-url"),
                   headers={"Authorization": f"Bearer {key}"}).json()).upload_url
    target = url.split(str(stack.port), 1)[1]
    status, headers, payload = raw_request(
        stack.port, f"PUT {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {(5 << 30) + 1}\r\n")
    assert status == 413 and json.loads(payload)["error"]["code"] == "file_too_large"


def test_presigned_upload(stack: Stack, client: httpx.Client, dead_url: str) -> None:
    resp = client.post("/v1/files/upload-url")
    assert resp.status_code == 201, resp.text
    grant = UploadUrl.model_validate(resp.json())
    assert grant.method == "PUT" and grant.max_bytes == 5 << 30
    assert 3500 <= (grant.expires_at.timestamp() - time.time()) <= 3600
    expect_error(client.post("/v1/transcripts", json={"file_id": grant.id}), 404,
                 "file_not_found", "file_id")  # nothing uploaded yet
    other = "1" if grant.id.endswith("0") else "0"  # a character the id does not end in
    tampered = grant.upload_url.replace(grant.id, grant.id[:-1] + other)
    expect_error(httpx.put(tampered, content=b"x"), 403, "upload_url_invalid", "signature")
    expect_error(httpx.put(grant.upload_url.replace("signature=", "signature=f"), content=b"x"),
                 403, "upload_url_invalid", "signature")
    secret = bytes.fromhex((stack.data_dir / "upload-url.key").read_text())
    past = int(time.time()) - 1
    expired = stack.url(f"/v1/uploads/{grant.id}?expires={past}&signature="
                        f"{sign_upload(secret, grant.id, past)}")
    expect_error(httpx.put(expired, content=b"x"), 403, "upload_url_invalid", "expires")
    put = httpx.put(grant.upload_url, content=b"\2" * 4096)  # no bearer: the URL is the grant
    assert put.status_code == 200, put.text
    assert FileObject.model_validate(put.json()).bytes == 4096
    created = client.post("/v1/transcripts", json={"file_id": grant.id})
    assert created.status_code == 201, created.text
    expect_error(httpx.put(grant.upload_url, content=b"x"), 404, "file_not_found")  # used
    expect_error(httpx.put(stack.url("/v1/uploads/file_x?expires=1&signature=00")), 403,
                 "upload_url_invalid")


# --- list, get, delete ------------------------------------------------------------------------


def test_list_pagination_is_exactly_once_while_creating(stack: Stack, dead_url: str) -> None:
    _, key = stack.new_account()
    with stack.client(key) as c:
        before = [c.post("/v1/transcripts", json={"audio_url": dead_url}).json()["id"]
                  for _ in range(7)]
        seen: list[str] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 2} | ({"before": cursor} if cursor else {})
            page = TranscriptList.model_validate(c.get("/v1/transcripts", params=params).json())
            seen += [t.id for t in page.data]
            c.post("/v1/transcripts", json={"audio_url": dead_url})  # newer: never in later pages
            if not page.has_more:
                break
            cursor = page.next_before
        assert seen == before[::-1]  # newest first, each exactly once, none of the newer ones
        for params in ({"limit": 0}, {"limit": 101}, {"limit": "x"}, {"status": "done"},
                       {"before": "nope"}):
            name = next(iter(params))
            expect_error(c.get("/v1/transcripts", params=params), 400, "invalid_request", name)
        only = c.get("/v1/transcripts", params={"status": "error", "limit": 100}).json()
        assert all(t["status"] == "error" for t in only["data"])


def test_delete_then_gone(client: httpx.Client, dead_url: str) -> None:
    tid = client.post("/v1/transcripts", json={"audio_url": dead_url}).json()["id"]
    resp = client.delete(f"/v1/transcripts/{tid}")
    assert resp.status_code == 200 and resp.json()["deleted"] is True
    assert "text" not in resp.json()
    expect_error(client.get(f"/v1/transcripts/{tid}"), 404, "not_found")
    expect_error(client.delete(f"/v1/transcripts/{tid}"), 404, "not_found")


# --- subtitles and usage (one real transcription) ---------------------------------------------


def test_subtitles_and_usage(stack: Stack, eval_server: EvalServer) -> None:
    _, key = stack.new_account()
    with stack.client(key) as c:
        tid = c.post("/v1/transcripts", json={"audio_url": eval_server.url(CLIP)}).json()["id"]
        early = c.get(f"/v1/transcripts/{tid}/subtitles")
        if c.get(f"/v1/transcripts/{tid}").json()["status"] != "completed":
            expect_error(early, 409, "transcript_not_ready")
        done = stack.wait_transcript(c, tid)
        assert done["status"] == "completed", done
        srt = c.get(f"/v1/transcripts/{tid}/subtitles")
        assert srt.status_code == 200 and srt.headers["content-type"] == "application/x-subrip"
        assert re.match(r"1\n\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}\n\[speaker_\d+\] \S",
                        srt.text), srt.text
        vtt = c.get(f"/v1/transcripts/{tid}/subtitles",
                    params={"format": "vtt", "chars_per_caption": 10})
        assert vtt.status_code == 200 and vtt.headers["content-type"] == "text/vtt"
        assert vtt.text.startswith("WEBVTT\n")
        assert all(len(line.split("] ", 1)[1]) <= 10 or " " not in line.split("] ", 1)[1]
                   for line in vtt.text.splitlines() if line.startswith("[speaker_"))
        for params, name in [({"format": "txt"}, "format"), ({"chars_per_caption": 9},
                             "chars_per_caption"), ({"chars_per_caption": 201},
                             "chars_per_caption"), ({"chars_per_caption": "x"},
                             "chars_per_caption")]:
            expect_error(c.get(f"/v1/transcripts/{tid}/subtitles", params=params), 400,
                         "invalid_request", name)
        failed = c.post("/v1/transcripts", json={"audio_url": eval_server.url("nope")})
        stack.wait_transcript(c, failed.json()["id"])
        expect_error(c.get(f"/v1/transcripts/{failed.json()['id']}/subtitles"), 409,
                     "transcript_not_ready")

        deadline = time.monotonic() + 30  # outcome events land just after the status
        while True:
            usage = Usage.model_validate(c.get("/v1/usage").json())
            batch = usage.totals["a5s-async-v1"]
            if (batch.completed, batch.failed) == (1, 1) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert usage.timezone == "UTC" and len(usage.daily) == 30 * 2
        assert [m.id for m in usage.models] == ["a5s-async-v1", "a5s-v2-streaming"]
        assert set(usage.totals) == {"a5s-async-v1", "a5s-v2-streaming"}
        assert (batch.requests, batch.completed, batch.failed) == (2, 1, 1)
        assert batch.audio_seconds == pytest.approx(done["audio_duration"], abs=0.01)
        assert usage.daily[-1].date == usage.end_date and usage.daily[0].date == usage.start_date
        assert [(k.name, k.model, k.requests) for k in usage.by_key] == [
            ("test", "a5s-async-v1", 2)]
        today = Usage.model_validate(c.get("/v1/usage", params={
            "days": 1, "timezone": "Pacific/Kiritimati"}).json())
        assert len(today.daily) == 2 and today.timezone == "Pacific/Kiritimati"
        assert today.start_date == today.end_date
        for params, name in [({"days": 0}, "days"), ({"days": 91}, "days"),
                             ({"days": "7d"}, "days"), ({"timezone": "Mars/Olympus"},
                                                        "timezone"),
                             ({"timezone": "localtime"}, "timezone")]:
            expect_error(c.get("/v1/usage", params=params), 400, "invalid_request", name)
        assert c.get("/v1/usage", params={"days": 90, "timezone": "Asia/Kathmandu"}
                     ).status_code == 200


# --- the error surface: every error has the envelope, every 405 says what is allowed -------


def expect_envelope(resp: httpx.Response) -> dict[str, Any]:
    """Any error: the envelope, its request id in the body and the header; ``Allow`` on 405."""
    assert resp.status_code >= 400, resp.status_code
    assert re.fullmatch(r"req_[0-9a-z]{26}", resp.headers.get("x-request-id", "")), \
        (resp.status_code, dict(resp.headers))
    if resp.status_code == 405:
        assert resp.headers.get("allow"), dict(resp.headers)
    if resp.request.method == "HEAD":
        return {}
    err = resp.json()["error"]
    assert set(err) == {"type", "code", "message", "param", "request_id"} and err["message"]
    assert (resp.status_code, err["type"]) == TYPES[err["code"]], err
    assert err["request_id"] == resp.headers["x-request-id"]
    return err


def _multipart(size: int) -> tuple[bytes, str]:
    boundary = "a5sboundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\""
            f"\r\nContent-Type: audio/wav\r\n\r\n").encode() + b"\0" * size + \
        f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def test_oversized_json_is_413_with_the_envelope(client: httpx.Client) -> None:
    body = json.dumps({"audio_url": "http://a.example/x.wav",
                       "metadata": {"notes": "x" * 2_000_000}})
    err = expect_envelope(client.post("/v1/transcripts", content=body,
                                      headers={"Content-Type": "application/json"}))
    assert err["code"] == "file_too_large" and "1 MiB" in err["message"]


def test_unknown_routes_answer_not_found_whatever_the_body(client: httpx.Client) -> None:
    """openai's ``audio.translations.create``: a multipart upload to a route that is not ours."""
    for size in (10, 2_000_000):
        body, ctype = _multipart(size)
        err = expect_envelope(client.post("/v1/audio/translations", content=body,
                                          headers={"Content-Type": ctype}))
        assert err["code"] == "not_found", err


def test_routes_outside_the_api_use_the_envelope(stack: Stack) -> None:
    """The playground, its static files, the redirect and the WebSocket route err alike."""
    for method, path, status in [("POST", "/playground", 405), ("DELETE", "/", 405),
                                 ("GET", "/playground/static/nope.js", 404),
                                 ("PUT", "/playground/static/app.js", 405),
                                 ("GET", "/v1/realtime", 400), ("POST", "/v1/realtime", 405),
                                 ("POST", "/health", 405), ("POST", "/metrics", 405),
                                 ("TRACE", "/v1/models", 405)]:
        resp = httpx.request(method, stack.url(path))
        assert resp.status_code == status, (method, path, resp.status_code, resp.text[:200])
        expect_envelope(resp)


def test_every_405_names_the_allowed_methods(client: httpx.Client) -> None:
    for path, allowed in ROUTE_METHODS.items():
        resp = client.request("PATCH" if "PATCH" not in allowed else "TRACE", path)
        expect_envelope(resp)
        assert set(resp.headers["allow"].split(", ")) == allowed, (path, resp.headers["allow"])


def test_messages_are_the_apis_own_words(client: httpx.Client) -> None:
    """No pydantic phrasing ("Value error, ...", "Speaker_labels: unknown field")."""
    for body in ({"audio_url": "ftp://a.example/x.wav"}, {"audio_url": "http://a/x", "speed": 2},
                 {"audio_url": "http://a/x", "speaker_labels": True}, {"audio_url": 5}, {}):
        err = expect_envelope(client.post("/v1/transcripts", json=body))
        assert "Value error" not in err["message"] and "unknown field" not in err["message"]
        assert not re.match(r"[A-Z][a-z]+_[a-z_]+:", err["message"]), err["message"]


FUZZ_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"]
FUZZ_PATHS = [*ROUTE_METHODS, "/v1/audio/transcriptions", "/v1/audio/translations", "/",
              "/playground", "/playground/live", "/playground/static/app.js", "/metrics",
              "/v1/realtime", "/v1", "/v2/transcripts", "/v1/transcripts/x/y/z", "/%ff", "/a b"]


def test_fuzz_every_error_has_the_envelope(stack: Stack, key: str) -> None:
    """Random method, path, key, content type and body size (oversized ones too): every error
    status the server sends, 400 to 504, has the envelope and the request id; 405 has Allow."""
    from hypothesis import HealthCheck, given, note, settings
    from hypothesis import strategies as st

    seen: set[int] = set()
    with httpx.Client(base_url=stack.url(""), timeout=30) as http:
        @given(method=st.sampled_from(FUZZ_METHODS), path=st.sampled_from(FUZZ_PATHS),
               auth=st.booleans(), size=st.sampled_from([0, 7, 70_000, (1 << 20) + 1, 2_000_000]),
               ctype=st.sampled_from(["application/json", "multipart", "audio/wav", None]),
               query=st.sampled_from(["", "?limit=0", "?bogus=1", "?days=1000"]))
        @settings(max_examples=150, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(method: str, path: str, auth: bool, size: int, ctype: str | None,
                  query: str) -> None:
            headers = {"Authorization": f"Bearer {key}"} if auth else {}
            body = b"{" + b" " * max(size - 2, 0) + b"}" if size else b""
            if ctype == "multipart":
                body, ctype = _multipart(size)
            if ctype:
                headers["Content-Type"] = ctype
            resp = http.request(method, path + query, headers=headers,
                                content=body if method not in ("GET", "HEAD") else None)
            if resp.status_code >= 400:
                seen.add(resp.status_code)
                note(f"{method} {path}{query} {ctype} {len(body)} bytes -> {resp.status_code}")
                expect_envelope(resp)

        check()
    assert {400, 401, 404, 405, 413} <= seen, seen
