"""Streamed uploads in-process: the size limit holds while streaming, and nothing is left behind.

The handler runs in a real Tornado server over a real file store with a 64 KiB limit;
only the key lookup is replaced (it lives in ClickHouse and Redis, covered by the
integration suite).
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import tornado.gen
import tornado.testing
import tornado.web

from gateway.files import FilesHandler
from schemas.settings import Settings
from stores.objects import FileStore

LIMIT = 64 * 1024


class _KeyedFiles(FilesHandler):
    async def authenticate(self) -> Any:
        self.principal = SimpleNamespace(account=SimpleNamespace(id="acct_test"))
        return self.principal


class StreamedUploadTest(tornado.testing.AsyncHTTPTestCase):
    def get_app(self) -> tornado.web.Application:
        self.tmp = Path(tempfile.mkdtemp(prefix="a5s-files-"))
        settings = Settings(data_dir=self.tmp, max_upload_bytes=LIMIT,
                            create_default_account=False)
        self.store = FileStore(self.tmp / "objects")
        ctx = SimpleNamespace(settings=settings, objects=self.store, extras={})
        return tornado.web.Application([(r"/v1/files", _KeyedFiles, {"ctx": ctx})])

    def tearDown(self) -> None:
        super().tearDown()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def leftovers(self) -> list[str]:
        return [str(p.relative_to(self.store.root)) for p in self.store.root.rglob("*")
                if p.is_file()]

    def test_declared_length_over_the_limit_is_refused_before_the_body(self) -> None:
        resp = self.fetch("/v1/files", method="POST", body=b"x" * (LIMIT + 1),
                          raise_error=False)
        assert resp.code == 413
        err = json.loads(resp.body)["error"]
        assert err["code"] == "file_too_large" and err["request_id"].startswith("req_")
        assert resp.headers["Connection"] == "close"
        assert self.leftovers() == []

    def test_chunked_body_over_the_limit_is_cut_off_while_streaming(self) -> None:
        chunks = [b"y" * 16_384] * 8  # 128 KiB, no Content-Length

        async def producer(write: Any) -> None:
            for chunk in chunks:
                await write(chunk)

        resp = self.fetch("/v1/files", method="POST", body_producer=producer,
                          raise_error=False)
        assert resp.code == 413, resp.body
        assert json.loads(resp.body)["error"]["code"] == "file_too_large"
        self.io_loop.run_sync(lambda: tornado.gen.sleep(0.05))  # let the writer discard
        assert self.leftovers() == []

    def test_dropped_connection_leaves_no_object(self) -> None:
        port = self.get_http_port()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: 50000\r\n\r\n"
                         + b"z" * 10_000)
            self.io_loop.run_sync(lambda: tornado.gen.sleep(0.1))
        self.io_loop.run_sync(lambda: tornado.gen.sleep(0.1))
        assert self.leftovers() == []

    def test_empty_body_is_invalid(self) -> None:
        resp = self.fetch("/v1/files", method="POST", body=b"", raise_error=False)
        assert resp.code == 400
        assert json.loads(resp.body)["error"]["code"] == "invalid_request"
        assert self.leftovers() == []
