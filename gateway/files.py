"""Uploads: ``POST /v1/files``, ``POST /v1/files/upload-url`` and ``PUT /v1/uploads/{id}``.

A direct upload streams the raw request body (up to ``max_upload_bytes``, 1 GB) into
the object store at ``uploads/<file_id>``; nothing holds the whole body in memory.
A presigned upload hands out a URL for one ``PUT`` of up to ``max_presigned_upload_bytes``
(5 GB) within ``upload_url_ttl_s`` (1 hour):

* S3 store: a boto3 presigned ``PUT`` straight to the bucket;
* file store (embedded): ``{base_url}/v1/uploads/<file_id>?expires=<unix s>&signature=<hex>``,
  served by the gateway itself. The signature is HMAC-SHA256, keyed with a secret kept in
  ``<data_dir>/upload-url.key`` (0600), over ``PUT\\n/v1/uploads/<file_id>\\n<expires>``.

Either way the upload is recorded in Redis under ``upload:<file_id>`` (``account_id``,
``bytes``, ``created_at``) for ``upload_ttl_s`` (24 hours); ``JobService`` claims it for
exactly one transcript and checks that the object exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import tornado.web

from schemas import ids
from schemas.api import FileObject, UploadUrl
from schemas.errors import A5sError, FileNotFound, FileTooLarge, InvalidRequest, UploadUrlInvalid
from schemas.settings import Settings
from security.signing import (UPLOAD_PATH, sign_upload, upload_signature_matches,
                              upload_url_key)
from stores.context import Context
from stores.objects import S3Store
from topologies.objects import upload_key

from .base import BaseHandler

__all__ = ["FilesHandler", "UploadUrlHandler", "PresignedUploadHandler", "UploadRecords",
           "upload_key", "upload_signing_key"]


def upload_signing_key(settings: Settings) -> bytes:
    """The secret of gateway-served upload URLs; created once per data directory."""
    return upload_url_key(Path(settings.data_path) / "upload-url.key")


class UploadRecords:
    """The Redis record of each upload, the one ``JobService._claim_upload`` reads."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def save(self, account_id: str, file_id: str, nbytes: int | None,
                   created_at: datetime) -> FileObject:
        ttl = self.ctx.settings.upload_ttl_s
        await self.ctx.redis.save_upload(file_id, {"account_id": account_id, "bytes": nbytes,
                                                   "created_at": created_at.isoformat()}, ttl)
        return FileObject(id=file_id, bytes=nbytes, created_at=created_at,
                          expires_at=datetime.now(UTC) + timedelta(seconds=ttl))

    async def get(self, file_id: str) -> dict[str, Any] | None:
        return await self.ctx.redis.upload(file_id)

    async def claimed(self, file_id: str) -> bool:
        return await self.ctx.redis.upload_claim(file_id) is not None


@tornado.web.stream_request_body
class _StreamedUpload(BaseHandler):
    """Streams the request body into ``uploads/<file_id>``; refuses more than ``limit`` bytes.

    The size is judged from ``Content-Length`` before any byte is read, and counted again
    while streaming (chunked bodies have no length). A failed or dropped upload leaves no
    object behind: the store's writer discards its temporary file.
    """

    file_id: str
    limit: int

    async def admit(self) -> None:
        """Authorise the upload and set ``file_id`` and ``limit``."""
        raise NotImplementedError

    def initialize(self, ctx: Context) -> None:  # type: ignore[override]
        super().initialize(ctx)
        self.received = 0
        self.body_complete = False
        self._writer: contextlib.AsyncExitStack | None = None
        self._fh: IO[bytes] | None = None

    async def prepare(self) -> None:
        super().prepare()
        verb = self.request.method.lower()  # type: ignore[union-attr]
        if getattr(type(self), verb, None) is getattr(tornado.web.RequestHandler, verb, None):
            return  # an unsupported method: tornado answers 405 after this
        await self.admit()
        length = self.request.headers.get("Content-Length")
        if length is not None:
            if not length.isdigit():
                raise InvalidRequest("Content-Length must be a number of bytes.",
                                     param="Content-Length")
            if int(length) > self.limit:
                raise self.too_large()
        # The server-wide body limit is small (JSON bodies); uploads raise it per request. It
        # stays above our own count so that a chunked body over the limit still gets the
        # 413 envelope from data_received rather than tornado's bare 400.
        self.request.connection.set_max_body_size(2 * self.limit + (1 << 20))
        self._writer = contextlib.AsyncExitStack()
        self._fh = await self._writer.enter_async_context(
            self.ctx.objects.writer(upload_key(self.file_id)))

    def too_large(self) -> FileTooLarge:
        raise NotImplementedError

    def data_received(self, chunk: bytes) -> None:
        if self._finished or self._fh is None:
            return
        self.received += len(chunk)
        if self.received > self.limit:
            self.fail(self.too_large())
            return
        self._fh.write(chunk)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if not self.body_complete:
            # Answered before the body was read: the server closes the connection after this
            # response, so say so and keep clients from reusing it.
            self.set_header("Connection", "close")
        super().write_error(status_code, **kwargs)

    def fail(self, error: A5sError) -> None:
        self._abort()
        self.send_error(error.http_status, exc_info=(type(error), error, None))

    def _abort(self) -> None:
        writer, self._writer, self._fh = self._writer, None, None
        if writer is not None:  # closing with an error makes the writer discard its temp file
            asyncio.ensure_future(writer.__aexit__(ConnectionAbortedError,
                                                   ConnectionAbortedError(), None))

    def on_connection_close(self) -> None:
        super().on_connection_close()
        self._abort()

    def on_finish(self) -> None:
        if self._writer is not None:  # an error answered before the body was complete
            self._abort()
        super().on_finish()

    async def store(self) -> int:
        """Commit the streamed object; returns its size."""
        self.body_complete = True
        if self.received == 0:
            self._abort()
            raise InvalidRequest("The request body is empty: send the file's bytes.")
        writer, self._writer, self._fh = self._writer, None, None
        assert writer is not None
        await writer.aclose()
        return self.received


class FilesHandler(_StreamedUpload):
    """``POST /v1/files``: the raw body is the file (any content type)."""

    QUERY = {"POST": ()}

    async def admit(self) -> None:
        self.who = await self.authenticate()
        self.file_id = ids.file_id()
        self.limit = self.ctx.settings.max_upload_bytes

    def too_large(self) -> FileTooLarge:
        return FileTooLarge(f"A direct upload is limited to {self.limit} bytes; use "
                            "POST /v1/files/upload-url for files up to "
                            f"{self.ctx.settings.max_presigned_upload_bytes} bytes.")

    async def post(self) -> None:
        record = await self.save()
        if record is not None:
            self.send(record, 201)

    async def save(self) -> FileObject | None:
        """The stored upload's record; None when the upload was already refused."""
        if self._finished:
            return None
        size = await self.store()
        return await UploadRecords(self.ctx).save(self.who.account.id, self.file_id, size,
                                                  datetime.now(UTC))


class PresignedUploadHandler(_StreamedUpload):
    """``PUT /v1/uploads/{file_id}?expires=&signature=``: the file store's presigned target."""

    QUERY = {"PUT": ("expires", "signature")}

    async def admit(self) -> None:
        file_id = self.path_args[0]
        expires = self.get_query_argument("expires", "")
        given = self.get_query_argument("signature", "")
        if not upload_signature_matches(upload_signing_key(self.ctx.settings), file_id,
                                        expires, given):
            raise UploadUrlInvalid("The upload URL's signature does not match.",
                                   param="signature")
        if int(expires) < time.time():
            raise UploadUrlInvalid("The upload URL has expired; request a new one.",
                                   param="expires")
        self.records = UploadRecords(self.ctx)
        self.record = await self.records.get(file_id)
        if self.record is None:
            raise FileNotFound("This upload expired; request a new upload URL.")
        if await self.records.claimed(file_id):
            raise FileNotFound("This file was already used for a transcript; request a new "
                               "upload URL.")
        self.file_id = file_id
        self.limit = self.ctx.settings.max_presigned_upload_bytes

    def too_large(self) -> FileTooLarge:
        return FileTooLarge(f"A presigned upload is limited to {self.limit} bytes.")

    async def put(self, file_id: str) -> None:
        if self._finished:
            return
        size = await self.store()  # the 24 hours of an unused upload start now
        self.send(await self.records.save(self.record["account_id"], file_id, size,
                                          datetime.now(UTC)))


class UploadUrlHandler(BaseHandler):
    """``POST /v1/files/upload-url``: no request body; answers an ``UploadUrl``."""

    QUERY = {"POST": ()}

    async def post(self) -> None:
        who = await self.authenticate()
        s = self.ctx.settings
        file_id = ids.file_id()
        now = datetime.now(UTC)
        expires = int(now.timestamp()) + s.upload_url_ttl_s
        if isinstance(self.ctx.objects, S3Store):
            url = self.ctx.objects.presign_put(upload_key(file_id), s.upload_url_ttl_s)
        else:
            signature = sign_upload(upload_signing_key(s), file_id, expires)
            url = f"{s.base_url}{UPLOAD_PATH}{file_id}?expires={expires}&signature={signature}"
        record = await UploadRecords(self.ctx).save(who.account.id, file_id, None, now)
        self.send(UploadUrl(id=file_id, upload_url=url, max_bytes=s.max_presigned_upload_bytes,
                            expires_at=datetime.fromtimestamp(expires, UTC),
                            file_expires_at=record.expires_at), 201)
