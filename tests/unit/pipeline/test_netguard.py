"""Outbound HTTP guard: address rules (pure) and real fetches against a server on 127.0.0.1."""

from __future__ import annotations

import io
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from pipeline.downloads import download
from security.addresses import (AddressPolicy, UnsafeURL, check_url, classify_address,
                                parse_host)
from security.netguard import DeliveryError, guarded_client, post_json
from schemas.errors import JobErrorCode, JobFailed

STRICT = AddressPolicy()
LOOPBACK = AddressPolicy(allow_loopback=True)
PRIVATE = AddressPolicy(allow_private=True)
OPEN = AddressPolicy(allow_loopback=True, allow_private=True)


# --- pure address rules ----------------------------------------------------------------------

@pytest.mark.parametrize(("address", "kind"), [
    ("8.8.8.8", "public"), ("1.1.1.1", "public"), ("2606:4700:4700::1111", "public"),
    ("127.0.0.1", "loopback"), ("127.255.255.254", "loopback"), ("::1", "loopback"),
    ("10.0.0.1", "private"), ("172.16.0.1", "private"), ("172.31.255.255", "private"),
    ("192.168.1.1", "private"), ("100.64.0.1", "private"), ("fd00::1", "private"),
    ("fc00::1", "private"),
    ("169.254.169.254", "forbidden"), ("169.254.0.1", "forbidden"), ("fe80::1", "forbidden"),
    ("fe80::1%eth0", "forbidden"),
    ("0.0.0.0", "forbidden"), ("0.1.2.3", "forbidden"), ("::", "forbidden"),
    ("224.0.0.1", "forbidden"), ("239.255.255.250", "forbidden"), ("ff02::1", "forbidden"),
    ("255.255.255.255", "forbidden"), ("240.0.0.1", "forbidden"),
    ("192.0.2.1", "forbidden"), ("198.51.100.1", "forbidden"), ("203.0.113.1", "forbidden"),
    ("2001:db8::1", "forbidden"), ("198.18.0.1", "forbidden"), ("192.0.0.8", "forbidden"),
    ("192.88.99.1", "forbidden"), ("100::1", "forbidden"), ("fec0::1", "forbidden"),
    # IPv4 inside IPv6
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:10.0.0.1", "private"),
    ("::ffff:169.254.169.254", "forbidden"), ("::ffff:8.8.8.8", "public"),
    ("::127.0.0.1", "forbidden"), ("::8.8.8.8", "forbidden"),
    ("64:ff9b::8.8.8.8", "public"), ("64:ff9b::127.0.0.1", "forbidden"),
    ("64:ff9b::a9fe:a9fe", "forbidden"), ("64:ff9b:1::1", "forbidden"),
    ("2002:0808:0808::1", "public"), ("2002:7f00:0001::1", "forbidden"),
    ("2002:0a00:0001::1", "forbidden"), ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "forbidden"),
    ("3fff::1", "forbidden"), ("5f00::1", "forbidden"), ("4000::1", "forbidden"),
])
def test_classify(address: str, kind: str) -> None:
    assert classify_address(address)[0] == kind


@pytest.mark.parametrize(("address", "strict", "loopback", "private"), [
    ("8.8.8.8", True, True, True),
    ("127.0.0.1", False, True, False),
    ("::ffff:127.0.0.1", False, True, False),
    ("10.0.0.1", False, False, True),
    ("169.254.169.254", False, False, False),
    ("64:ff9b::127.0.0.1", False, False, False),
])
def test_policy(address: str, strict: bool, loopback: bool, private: bool) -> None:
    assert STRICT.allows(address) is strict
    assert LOOPBACK.allows(address) is loopback
    assert PRIVATE.allows(address) is private
    assert (STRICT.refusal(address) is None) is strict
    assert OPEN.allows(address) is (classify_address(address)[0] != "forbidden")


def test_policy_is_frozen() -> None:
    with pytest.raises(Exception):
        STRICT.allow_loopback = True  # type: ignore[misc]


@pytest.mark.parametrize(("host", "address"), [
    ("2130706433", "127.0.0.1"), ("0177.0.0.1", "127.0.0.1"), ("0x7f.1", "127.0.0.1"),
    ("0x7f000001", "127.0.0.1"), ("127.1", "127.0.0.1"), ("127.0.1", "127.0.0.1"),
    ("0x7F.0.0.1", "127.0.0.1"), ("017700000001", "127.0.0.1"), ("127.0.0.1.", "127.0.0.1"),
    ("10.1", "10.0.0.1"), ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"), ("0", "0.0.0.0"),
    ("3232235777", "192.168.1.1"), ("8.8.8.8", "8.8.8.8"), ("[::1]", "::1"),
    ("::ffff:127.0.0.1", "::ffff:127.0.0.1"),
    ("example.com", None), ("0x7f.example", None), ("1.2.3.example", None), ("xn--mnchen-3ya.de",
                                                                            None),
])
def test_parse_host(host: str, address: str | None) -> None:
    parsed = parse_host(host)
    assert parsed == (None if address is None else
                      (IPv6Address(address) if ":" in address else IPv4Address(address)))


@pytest.mark.parametrize("host", ["256.0.0.1", "1.2.3.4.5", "08.0.0.1", "1.2.3.256",
                                  "4294967296", "example.123", "1..2.3", "0xg.1"])
def test_parse_host_invalid(host: str) -> None:
    with pytest.raises(ValueError):
        parse_host(host)


@pytest.mark.parametrize("url", [
    "ftp://example.com/a.wav", "file:///etc/passwd", "gopher://example.com/",
    "http://user:pass@example.com/a.wav", "http://user@example.com/a.wav",
    "http://127.0.0.1/", "http://2130706433/", "http://0x7f.1/", "http://127.1/",
    "http://[::1]/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/",
    "http://169.254.169.254/latest/meta-data/", "http://0xa9fea9fe/", "http://10.0.0.1/",
    "http://[fd00::1]/", "http://[fe80::1%25eth0]/", "http://0.0.0.0:8080/",
    "http://localhost/", "http://LOCALHOST./", "http://api.localhost/", "http://intranet/",
    "http://metadata.google.internal/", "http://printer.local/", "http://256.1.1.1/",
    "http:///nohost", "not a url", "http://[64:ff9b::7f00:1]/", "http://[2002:7f00:1::1]/",
])
def test_check_url_refuses(url: str) -> None:
    with pytest.raises(UnsafeURL):
        check_url(url, STRICT)


@pytest.mark.parametrize("url", [
    "https://example.com/audio.wav", "http://8.8.8.8/a", "https://[2606:4700::1]/a",
    "https://bucket.s3.amazonaws.com/key?X-Amz-Signature=abc&X-Amz-Credential=x%40y",
    "https://münchen.de/a.mp3", "HTTPS://EXAMPLE.COM./a",
])
def test_check_url_allows(url: str) -> None:
    check_url(url, STRICT)


def test_check_url_policy() -> None:
    check_url("http://localhost:8000/", LOOPBACK)
    check_url("http://0x7f.1/", LOOPBACK)
    check_url("http://10.1/", PRIVATE)
    check_url("http://minio:9000/bucket/a.wav", PRIVATE)
    with pytest.raises(UnsafeURL, match="link-local"):
        check_url("http://169.254.169.254/", OPEN)
    with pytest.raises(UnsafeURL):
        check_url("http://10.0.0.1/", LOOPBACK)


# --- a real server ---------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.hits.append(self.path)
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        query = parse_qs(url.query)
        if parts[0] == "audio":
            self._send(200, b"A" * int(parts[1]), {"Content-Type": "audio/wav"})
        elif parts[0] == "unsized":  # no Content-Length: the body ends when the socket closes
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for _ in range(int(parts[1])):
                    self.wfile.write(b"B" * 1024)
            except OSError:
                pass
            self.close_connection = True
        elif parts[0] == "redirect":
            left = int(parts[1])
            target = "/audio/10" if left == 0 else f"/redirect/{left - 1}"
            self._send(302, headers={"Location": target})
        elif parts[0] == "to":
            self._send(int(query.get("status", ["302"])[0]), headers={"Location": query["url"][0]})
        elif parts[0] == "status":
            self._send(int(parts[1]), b"nope")
        elif parts[0] == "host":
            self._send(200, self.headers["Host"].encode())
        elif parts[0] == "slow":
            self.send_response(200)
            self.send_header("Content-Length", "10")
            self.end_headers()
            self.wfile.write(b"x")
            self.wfile.flush()
            self.server.release.wait(10)
        else:
            self._send(404)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.posts.append((self.path, dict(self.headers), body))
        parts = urlsplit(self.path).path.strip("/").split("/")
        if parts[0] == "hook":
            self._send(int(parts[1]) if len(parts) > 1 else 204)
        elif parts[0] == "to":
            self._send(int(parts[1]), headers={"Location": parse_qs(urlsplit(self.path).query)
                                               ["url"][0]})
        elif parts[0] == "slow":
            self.server.release.wait(10)
            self._send(204)
        else:
            self._send(404)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hits: list[str] = []
        self.posts: list[tuple[str, dict[str, str], bytes]] = []
        self.release = threading.Event()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    thread = threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()


def _resolver(table: dict[str, list[str]], calls: list[str] | None = None):
    async def resolve(host: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(host)
        return table[host]
    return resolve


async def _fails(coro, code: JobErrorCode = JobErrorCode.download_failed) -> str:
    with pytest.raises(JobFailed) as info:
        await coro
    assert info.value.code == code
    return info.value.message


async def test_download_with_loopback_allowed(server: _Server) -> None:
    dst = io.BytesIO()
    assert await download(f"{server.base}/audio/12345", dst, policy=LOOPBACK) == 12345
    assert dst.getvalue() == b"A" * 12345


async def test_download_refused_by_default(server: _Server) -> None:
    message = await _fails(download(f"{server.base}/audio/10", io.BytesIO(), policy=STRICT))
    assert "loopback" in message and "public" in message
    assert server.hits == []


async def test_localhost_refused_by_default_at_connect(server: _Server) -> None:
    # Bypass the early name check: the system resolver's answers are vetted at connect time.
    port = server.server_address[1]
    async with guarded_client(STRICT) as client:
        with pytest.raises(UnsafeURL, match="resolves to"):
            await client.get(f"http://localhost:{port}/audio/1")
    async with guarded_client(LOOPBACK) as client:
        assert (await client.get(f"http://localhost:{port}/audio/3")).content == b"AAA"
    assert server.hits == ["/audio/3"]


async def test_name_resolving_to_loopback_refused(server: _Server) -> None:
    resolve = _resolver({"audio.example": ["127.0.0.1"]})
    url = f"http://audio.example:{server.server_address[1]}/audio/10"
    message = await _fails(download(url, io.BytesIO(), policy=STRICT, resolver=resolve))
    assert "resolves to 127.0.0.1" in message
    assert server.hits == []


async def test_every_resolved_address_is_checked(server: _Server) -> None:
    resolve = _resolver({"audio.example": ["127.0.0.1", "10.0.0.7"]})
    url = f"http://audio.example:{server.server_address[1]}/audio/10"
    message = await _fails(download(url, io.BytesIO(), policy=LOOPBACK, resolver=resolve))
    assert "10.0.0.7" in message
    assert server.hits == []


async def test_connection_pinned_to_vetted_address(server: _Server) -> None:
    # A rebinding resolver: the first answer passes, any later one would not.
    answers = iter([["127.0.0.1"]])
    calls: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return next(answers, ["169.254.169.254"])

    port = server.server_address[1]
    dst = io.BytesIO()
    await download(f"http://audio.example:{port}/host", dst, policy=LOOPBACK, resolver=rebinding)
    assert dst.getvalue() == f"audio.example:{port}".encode()  # Host header kept
    assert calls == ["audio.example"]  # resolved once, connected to that answer


async def test_redirects_followed_up_to_five(server: _Server) -> None:
    # /redirect/n answers n + 1 redirects before the audio.
    dst = io.BytesIO()
    assert await download(f"{server.base}/redirect/4", dst, policy=LOOPBACK) == 10
    assert len(server.hits) == 6
    message = await _fails(download(f"{server.base}/redirect/5", io.BytesIO(), policy=LOOPBACK))
    assert "redirects" in message


@pytest.mark.parametrize(("target", "why"), [
    ("http://10.0.0.1/a.wav", "private"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://0xa9fea9fe/", "link-local"),
    ("http://[::ffff:a9fe:a9fe]/", "link-local"),
    ("file:///etc/passwd", "http"),
    ("http://user:pw@example.com/", "credentials"),
])
async def test_redirect_to_forbidden_target_refused_before_connecting(
        server: _Server, target: str, why: str) -> None:
    started = time.monotonic()
    url = str(httpx.URL(f"{server.base}/to", params={"url": target}))
    message = await _fails(download(url, io.BytesIO(), policy=LOOPBACK, timeout_s=20))
    assert why in message
    assert time.monotonic() - started < 5  # no connection attempt to an unroutable address
    assert len(server.hits) == 1


async def test_redirect_to_name_resolving_private_refused(server: _Server) -> None:
    calls: list[str] = []
    resolve = _resolver({"files.example": ["10.9.8.7"]}, calls)
    url = str(httpx.URL(f"{server.base}/to", params={"url": "http://files.example/a.wav"}))
    message = await _fails(download(url, io.BytesIO(), policy=LOOPBACK, resolver=resolve))
    assert "10.9.8.7" in message and calls == ["files.example"]


async def test_redirect_from_public_name_to_loopback(server: _Server) -> None:
    port = server.server_address[1]
    resolve = _resolver({"cdn.example": ["127.0.0.1"]})
    target = f"http://127.0.0.1:{port}/audio/10"
    url = str(httpx.URL(f"http://cdn.example:{port}/to", params={"url": target}))
    # Allowed end to end only when loopback is; the strict policy stops at the first hop.
    assert await download(url, io.BytesIO(), policy=LOOPBACK, resolver=resolve) == 10
    await _fails(download(url, io.BytesIO(), policy=STRICT, resolver=resolve))


async def test_size_limit_from_content_length(server: _Server) -> None:
    dst = io.BytesIO()
    await _fails(download(f"{server.base}/audio/5000", dst, policy=LOOPBACK, max_bytes=4999),
                 JobErrorCode.file_too_large)
    assert dst.getvalue() == b""
    assert await download(f"{server.base}/audio/5000", io.BytesIO(), policy=LOOPBACK,
                          max_bytes=5000) == 5000


async def test_size_limit_while_streaming(server: _Server) -> None:
    dst = io.BytesIO()
    await _fails(download(f"{server.base}/unsized/4096", dst, policy=LOOPBACK,
                          max_bytes=100_000), JobErrorCode.file_too_large)
    assert len(dst.getvalue()) <= 100_000
    dst = io.BytesIO()
    assert await download(f"{server.base}/unsized/8", dst, policy=LOOPBACK) == 8192


@pytest.mark.parametrize("status", [400, 403, 404, 410, 500, 503])
async def test_http_error(server: _Server, status: int) -> None:
    message = await _fails(download(f"{server.base}/status/{status}", io.BytesIO(),
                                    policy=LOOPBACK))
    assert f"HTTP {status}" in message


async def test_timeout(server: _Server) -> None:
    started = time.monotonic()
    message = await _fails(download(f"{server.base}/slow", io.BytesIO(), policy=LOOPBACK,
                                    timeout_s=0.5))
    assert "0.5 seconds" in message
    assert time.monotonic() - started < 3


async def test_connection_refused() -> None:
    srv = _Server()  # bound, then closed: nothing listens on the port
    base = srv.base
    srv.server_close()
    message = await _fails(download(f"{base}/audio/1", io.BytesIO(), policy=LOOPBACK))
    assert "connect" in message


# --- webhooks --------------------------------------------------------------------------------

async def test_post_json(server: _Server) -> None:
    sent = {"webhook-id": "msg_1", "content-type": "application/json", "X-Auth": "secret"}
    assert await post_json(f"{server.base}/hook", b'{"a":1}', sent, policy=LOOPBACK) == 204
    path, headers, body = server.posts[0]
    assert body == b'{"a":1}' and headers["webhook-id"] == "msg_1"
    assert headers["X-Auth"] == "secret"
    assert [k.lower() for k in headers].count("content-type") == 1


async def test_post_json_returns_error_statuses(server: _Server) -> None:
    for status in (400, 408, 429, 500):
        assert await post_json(f"{server.base}/hook/{status}", b"{}", {}, policy=LOOPBACK) == status


async def test_post_json_refused_and_failures(server: _Server) -> None:
    with pytest.raises(DeliveryError) as info:
        await post_json(f"{server.base}/hook", b"{}", {}, policy=STRICT)
    assert info.value.status is None and "not allowed" in str(info.value)
    with pytest.raises(DeliveryError, match="within"):
        await post_json(f"{server.base}/slow", b"{}", {}, policy=LOOPBACK, timeout_s=0.3)
    with pytest.raises(DeliveryError):
        await post_json("http://169.254.169.254/hook", b"{}", {}, policy=OPEN)
    assert len(server.posts) == 1  # only the slow one reached the server


async def test_post_json_redirects(server: _Server) -> None:
    port = server.server_address[1]
    resolve = _resolver({"hooks.example": ["127.0.0.1"]})
    target = f"http://hooks.example:{port}/hook"
    url = str(httpx.URL(f"{server.base}/to/307", params={"url": target}))
    headers = {"webhook-id": "msg_1", "X-Auth": "secret"}
    # Not followed by default: the receiver's status is the answer.
    assert await post_json(url, b"{}", headers, policy=LOOPBACK, resolver=resolve) == 307
    assert await post_json(url, b"{}", headers, policy=LOOPBACK, resolver=resolve,
                           max_redirects=1) == 204
    path, received, body = server.posts[-1]
    assert path == "/hook" and body == b"{}"
    assert received["webhook-id"] == "msg_1" and "X-Auth" not in received  # other origin
    assert received["Host"] == f"hooks.example:{port}"
    # 302 would turn the POST into a GET: returned, not followed.
    url302 = str(httpx.URL(f"{server.base}/to/302", params={"url": target}))
    assert await post_json(url302, b"{}", {}, policy=LOOPBACK, max_redirects=3) == 302
    forbidden = str(httpx.URL(f"{server.base}/to/307", params={"url": "http://10.0.0.1/"}))
    with pytest.raises(DeliveryError, match="private"):
        await post_json(forbidden, b"{}", {}, policy=LOOPBACK, max_redirects=1)


# --- TLS: pinned address, hostname verified --------------------------------------------------

@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[_Server, ssl.SSLContext]]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=audio.example",
                    "-addext", "subjectAltName=DNS:audio.example"],
                   check=True, capture_output=True)
    srv = _Server()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    srv.socket = context.wrap_socket(srv.socket, server_side=True)
    thread = threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield srv, ssl.create_default_context(cafile=str(cert))
    srv.release.set()
    srv.shutdown()
    srv.server_close()


async def test_tls_uses_hostname_for_sni_and_verification(tls_server) -> None:
    srv, trust = tls_server
    port = srv.server_address[1]
    resolve = _resolver({"audio.example": ["127.0.0.1"], "other.example": ["127.0.0.1"]})
    async with guarded_client(LOOPBACK, resolver=resolve, verify=trust) as client:
        response = await client.get(f"https://audio.example:{port}/host")
        assert response.text == f"audio.example:{port}"
        # Same address, a name the certificate does not cover: verification fails.
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED|match"):
            await client.get(f"https://other.example:{port}/host")
