"""A typed Python client for the a5s REST API (httpx), sync and async.

::

    from a5s import Client

    client = Client("a5s_sk_...", base_url="http://127.0.0.1:8000")
    transcript = client.transcribe("meeting.mp3")        # upload, create, wait
    for word in transcript.words:
        print(word.start, word.speaker, word.text)
    print(client.subtitles(transcript.id, "vtt"))

Every answer is parsed into the service's own models (``schemas.api``). Errors are
typed (``a5s.errors``) and carry ``code``, ``param`` and ``request_id``. Requests that
fail with 429, 500, 502, 503, 504 or a connection error are retried with exponential
backoff, waiting at least ``Retry-After`` when the service sends one; creates carry an
``Idempotency-Key`` so a retried create never makes a second transcript.

The key and base URL default to ``A5S_API_KEY`` and ``A5S_URL`` (else
``http://127.0.0.1:8000``). ``AsyncClient`` has the same methods, awaited.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal, TypeVar

import httpx
from pydantic import BaseModel

from schemas.api import (Account, DeletedTranscript, FileObject, ModelList, Transcript,
                         TranscriptList, TranscriptSummary, UploadUrl, Usage)

from .errors import (APIConnectionError, APIStatusError, TranscriptFailed, WaitTimeout,
                     from_response, map_httpx_errors)

__all__ = ["Client", "AsyncClient", "DEFAULT_URL", "DIRECT_UPLOAD_LIMIT", "Progress",
           "FileInput"]

DEFAULT_URL = "http://127.0.0.1:8000"
DIRECT_UPLOAD_LIMIT = 1 << 30
"""Files up to 1 GB go to ``POST /v1/files``; larger ones through a presigned URL."""
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
M = TypeVar("M", bound=BaseModel)
FileInput = str | Path | bytes | IO[bytes]
Progress = Callable[[str, Transcript | None], None]
"""``on_progress(stage, transcript)``: stage is ``uploading``, ``uploaded``, then the
transcript's status each time it changes (``queued``, ``processing``, ``completed``,
``error``)."""


def _deduped(on_progress: Progress | None) -> Progress | None:
    """``on_progress`` that skips a stage equal to the one reported just before."""
    if on_progress is None:
        return None
    last: list[str] = []

    def report(stage: str, transcript: Transcript | None) -> None:
        if last[-1:] != [stage]:
            last[:] = [stage]
            on_progress(stage, transcript)
    return report


def _is_url(value: object) -> bool:
    return isinstance(value, str) and value.startswith(("http://", "https://"))


class _Source:
    """A file to upload: its size and a way to (re)open its bytes for each attempt."""

    def __init__(self, file: FileInput) -> None:
        self.file = file
        if isinstance(file, bytes):
            self.size: int | None = len(file)
        elif isinstance(file, (str, Path)):
            self.size = Path(file).stat().st_size
        else:
            try:
                here = file.tell()
                self.size = file.seek(0, os.SEEK_END) - here
                file.seek(here)
                self.start = here
            except (OSError, AttributeError, ValueError):
                self.size = None

    def open(self) -> Any:
        """The bytes, or a file object at the start of the data (paths: a fresh handle)."""
        if isinstance(self.file, bytes):
            return self.file
        if isinstance(self.file, (str, Path)):
            self.close()
            self._handle = open(self.file, "rb")  # noqa: SIM115 - closed by close()
            return self._handle
        if self.size is not None:
            self.file.seek(self.start)
        return self.file

    def close(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            handle.close()


class Poll:
    """One ``wait``: each status reported once, the caller's deadline, and a backoff from
    the poll interval up to ten times it (the blocking and the async client share it; the
    caller owns the clock and the sleeping)."""

    def __init__(self, interval: float, timeout: float | None, now: float,
                 on_progress: Progress | None = None, raise_on_error: bool = True) -> None:
        self.interval = self.delay = interval
        self.timeout = timeout
        self.deadline = None if timeout is None else now + timeout
        self.on_progress = _deduped(on_progress)
        self.raise_on_error = raise_on_error

    def after(self, transcript: Transcript, now: float) -> float | None:
        """Seconds to sleep before the next poll, or None once the job has ended.

        Raises:
            TranscriptFailed: it ended in ``error`` (unless ``raise_on_error`` is false).
            WaitTimeout: the next poll would come after the deadline.
        """
        if self.on_progress is not None:
            self.on_progress(transcript.status, transcript)
        if transcript.status in ("completed", "error"):
            if transcript.status == "error" and self.raise_on_error:
                raise TranscriptFailed(transcript)
            return None
        if self.deadline is not None and now + self.delay > self.deadline:
            raise WaitTimeout(transcript, self.timeout or 0.0)
        delay, self.delay = self.delay, min(self.delay * 1.5, self.interval * 10)
        return delay


class _Base:
    def __init__(self, api_key: str | None, base_url: str | None, max_retries: int,
                 poll_interval: float) -> None:
        key = api_key or os.environ.get("A5S_API_KEY")
        if not key:
            raise ValueError("an API key is needed: pass api_key or set A5S_API_KEY")
        self.api_key = key
        self.base_url = (base_url or os.environ.get("A5S_URL") or DEFAULT_URL).rstrip("/")
        self.max_retries = max_retries
        self.poll_interval = poll_interval

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}", "User-Agent": "a5s-python"}

    @property
    def realtime_url(self) -> str:
        return "ws" + self.base_url.removeprefix("http") + "/v1/realtime"

    def _delay(self, attempt: int, error: Exception | None) -> float:
        """Exponential backoff with jitter; never less than the service's Retry-After."""
        backoff = min(30.0, 0.5 * 2 ** attempt) * (0.5 + random.random() / 2)
        after = getattr(error, "retry_after", None)
        return max(backoff, min(float(after), 120.0)) if after else backoff

    @staticmethod
    def _retryable(error: Exception) -> bool:
        if isinstance(error, APIStatusError):
            return error.status_code in RETRY_STATUSES
        return isinstance(error, APIConnectionError)

    @staticmethod
    def _check(response: httpx.Response) -> httpx.Response:
        if response.status_code >= 400:
            raise from_response(response)
        return response

    @staticmethod
    def _create_body(audio_url: str | None, file_id: str | None,
                     fields: dict[str, Any]) -> dict[str, Any]:
        body = {"audio_url": audio_url, "file_id": file_id, **fields}
        return {k: v for k, v in body.items() if v is not None}

    @staticmethod
    def _file_object(upload: UploadUrl, response: httpx.Response, size: int | None) -> FileObject:
        try:  # the embedded store answers a File; S3 answers its own (non-JSON) body
            return FileObject.model_validate(response.json())
        except ValueError:
            return FileObject(id=upload.id, bytes=size, created_at=datetime.now(UTC),
                              expires_at=upload.file_expires_at)

    @staticmethod
    def _subtitle_params(fmt: str, chars: int | None) -> dict[str, Any]:
        params: dict[str, Any] = {"format": fmt}
        if chars is not None:
            params["chars_per_caption"] = chars
        return params

    @staticmethod
    def _usage_params(days: int | None, timezone: str | None) -> dict[str, Any]:
        return {k: v for k, v in (("days", days), ("timezone", timezone)) if v is not None}


class Client(_Base):
    """Synchronous client. Use as a context manager, or call ``close()``.

    Args:
        api_key: ``a5s_sk_...``; default ``A5S_API_KEY``.
        base_url: the service, e.g. ``http://127.0.0.1:8000``; default ``A5S_URL``.
        timeout: seconds per HTTP request (uploads get ten times this for their body).
        max_retries: attempts after the first for retryable failures.
        poll_interval: first wait between polls in ``wait``/``transcribe`` (seconds); it
            grows by half each poll up to ten times this.
        transport: an ``httpx`` transport (tests: ``httpx.MockTransport``).
    """

    def __init__(self, api_key: str | None = None, *, base_url: str | None = None,
                 timeout: float = 60.0, max_retries: int = 4, poll_interval: float = 1.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(api_key, base_url, max_retries, poll_interval)
        self.timeout = timeout
        self._http = httpx.Client(base_url=self.base_url, headers=self.headers,
                                  timeout=timeout, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- transport ------------------------------------------------------------------------------

    def _request(self, method: str, url: str, *, content: Callable[[], Any] | None = None,
                 auth: bool = True, **kwargs: Any) -> httpx.Response:
        """One request with retries; ``content`` makes a fresh body for each attempt."""
        attempt = 0
        while True:
            try:
                with map_httpx_errors():
                    request = self._http.build_request(
                        method, url, content=content() if content else None, **kwargs)
                    if not auth:  # presigned URLs carry their own authorisation
                        del request.headers["Authorization"]
                    response = self._http.send(request)
                return self._check(response)
            except (APIStatusError, APIConnectionError) as exc:
                if attempt >= self.max_retries or not self._retryable(exc):
                    raise
                time.sleep(self._delay(attempt, exc))
                attempt += 1

    def _get(self, model: type[M], url: str, **kwargs: Any) -> M:
        return model.model_validate(self._request("GET", url, **kwargs).json())

    # --- uploads --------------------------------------------------------------------------------

    def upload(self, file: FileInput) -> FileObject:
        """Upload a file (path, bytes or binary file object) and return its ``file_id`` holder.

        Up to 1 GB goes in one ``POST /v1/files``; larger files (or file objects of unknown
        size) go through ``POST /v1/files/upload-url`` and a ``PUT`` of up to 5 GB.
        """
        source = _Source(file)
        timeout = httpx.Timeout(self.timeout, write=self.timeout * 10, read=self.timeout * 10)
        headers = {"Content-Type": "application/octet-stream"}
        try:
            if source.size is not None and source.size <= DIRECT_UPLOAD_LIMIT:
                response = self._request("POST", "/v1/files", content=source.open,
                                         timeout=timeout, headers=headers)
                return FileObject.model_validate(response.json())
            upload = UploadUrl.model_validate(self._request("POST", "/v1/files/upload-url").json())
            response = self._request("PUT", upload.upload_url, content=source.open, auth=False,
                                     timeout=timeout, headers=headers)
            return self._file_object(upload, response, source.size)
        finally:
            source.close()

    # --- transcripts ----------------------------------------------------------------------------

    def create_transcript(self, *, audio_url: str | None = None, file_id: str | None = None,
                          idempotency_key: str | None = None, **fields: Any) -> Transcript:
        """``POST /v1/transcripts``. ``fields``: ``language_code``, ``webhook_url``,
        ``webhook_auth_header_name``, ``webhook_auth_header_value``, ``metadata``.

        A fresh ``Idempotency-Key`` is sent unless one is given, so retries are safe.
        """
        key = idempotency_key or f"a5s-python-{uuid.uuid4()}"
        body = self._create_body(audio_url, file_id, fields)
        response = self._request("POST", "/v1/transcripts", json=body,
                                 headers={"Idempotency-Key": key})
        return Transcript.model_validate(response.json())

    def get_transcript(self, transcript_id: str) -> Transcript:
        return self._get(Transcript, f"/v1/transcripts/{transcript_id}")

    def list_transcripts(self, *, status: str | None = None,
                         limit: int = 20) -> Iterator[TranscriptSummary]:
        """Every transcript, newest first; pages of ``limit`` are fetched lazily."""
        before: str | None = None
        while True:
            params = {k: v for k, v in (("limit", limit), ("status", status),
                                        ("before", before)) if v is not None}
            page = self._get(TranscriptList, "/v1/transcripts", params=params)
            yield from page.data
            if not page.has_more or not page.next_before:
                return
            before = page.next_before

    def delete_transcript(self, transcript_id: str) -> DeletedTranscript:
        response = self._request("DELETE", f"/v1/transcripts/{transcript_id}")
        return DeletedTranscript.model_validate(response.json())

    def wait(self, transcript_id: str, *, timeout: float | None = None,
             poll_interval: float | None = None, on_progress: Progress | None = None,
             raise_on_error: bool = True) -> Transcript:
        """Poll until the transcript is ``completed`` or ``error``.

        Raises:
            TranscriptFailed: it ended in ``error`` (unless ``raise_on_error`` is false).
            WaitTimeout: ``timeout`` seconds passed first; the job keeps running.
        """
        poll = Poll(poll_interval or self.poll_interval, timeout, time.monotonic(),
                    on_progress, raise_on_error)
        while True:
            transcript = self.get_transcript(transcript_id)
            delay = poll.after(transcript, time.monotonic())
            if delay is None:
                return transcript
            time.sleep(delay)

    def transcribe(self, file_or_url: FileInput, *, wait: bool = True,
                   poll_interval: float | None = None, timeout: float | None = None,
                   on_progress: Progress | None = None, **fields: Any) -> Transcript:
        """Upload a file (or take an http(s) URL), create a transcript, and wait for it.

        Args:
            file_or_url: a path, bytes, a binary file object, or an ``http(s)://`` URL.
            wait: poll until the job finishes; with ``False`` the queued transcript returns.
            poll_interval: first wait between polls (seconds); grows to ten times this.
            timeout: seconds to wait in total before ``WaitTimeout``; ``None`` waits on.
            on_progress: called with ``uploading``, ``uploaded`` and each status.
            fields: more ``create_transcript`` fields (``metadata``, ``webhook_url``, ...).
        """
        on_progress = _deduped(on_progress)
        if _is_url(file_or_url):
            transcript = self.create_transcript(audio_url=str(file_or_url), **fields)
        else:
            if on_progress:
                on_progress("uploading", None)
            uploaded = self.upload(file_or_url)
            if on_progress:
                on_progress("uploaded", None)
            transcript = self.create_transcript(file_id=uploaded.id, **fields)
        if on_progress:
            on_progress(transcript.status, transcript)
        if not wait:
            return transcript
        return self.wait(transcript.id, timeout=timeout, poll_interval=poll_interval,
                         on_progress=on_progress)

    def subtitles(self, transcript_id: str, format: Literal["srt", "vtt"] = "srt",
                  chars_per_caption: int | None = None) -> str:
        response = self._request("GET", f"/v1/transcripts/{transcript_id}/subtitles",
                                 params=self._subtitle_params(format, chars_per_caption))
        return response.text

    # --- account --------------------------------------------------------------------------------

    def account(self) -> Account:
        return self._get(Account, "/v1/account")

    def usage(self, *, days: int | None = None, timezone: str | None = None) -> Usage:
        return self._get(Usage, "/v1/usage", params=self._usage_params(days, timezone))

    def models(self) -> ModelList:
        return self._get(ModelList, "/v1/models")

    # --- realtime -------------------------------------------------------------------------------

    def stream(self, source: Any, **options: Any) -> Iterator[Any]:
        """Stream audio over ``/v1/realtime``; see :func:`a5s.realtime.stream`."""
        from .realtime import stream
        return stream(source, url=self.realtime_url, api_key=self.api_key, **options)


class AsyncClient(_Base):
    """The asynchronous twin of :class:`Client` (``async with AsyncClient() as c: ...``)."""

    def __init__(self, api_key: str | None = None, *, base_url: str | None = None,
                 timeout: float = 60.0, max_retries: int = 4, poll_interval: float = 1.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(api_key, base_url, max_retries, poll_interval)
        self.timeout = timeout
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self.headers,
                                       timeout=timeout, transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, url: str, *, content: Callable[[], Any] | None = None,
                       auth: bool = True, **kwargs: Any) -> httpx.Response:
        attempt = 0
        while True:
            try:
                with map_httpx_errors():
                    request = self._http.build_request(
                        method, url, content=content() if content else None, **kwargs)
                    if not auth:
                        del request.headers["Authorization"]
                    response = await self._http.send(request)
                return self._check(response)
            except (APIStatusError, APIConnectionError) as exc:
                if attempt >= self.max_retries or not self._retryable(exc):
                    raise
                await asyncio.sleep(self._delay(attempt, exc))
                attempt += 1

    async def _get(self, model: type[M], url: str, **kwargs: Any) -> M:
        return model.model_validate((await self._request("GET", url, **kwargs)).json())

    async def upload(self, file: str | Path | bytes) -> FileObject:
        """As :meth:`Client.upload`, for a path or bytes (read in a worker thread)."""
        data = file if isinstance(file, bytes) else await asyncio.to_thread(Path(file).read_bytes)
        timeout = httpx.Timeout(self.timeout, write=self.timeout * 10, read=self.timeout * 10)
        headers = {"Content-Type": "application/octet-stream"}
        if len(data) <= DIRECT_UPLOAD_LIMIT:
            response = await self._request("POST", "/v1/files", content=lambda: data,
                                           timeout=timeout, headers=headers)
            return FileObject.model_validate(response.json())
        upload = UploadUrl.model_validate(
            (await self._request("POST", "/v1/files/upload-url")).json())
        response = await self._request("PUT", upload.upload_url, content=lambda: data,
                                       auth=False, timeout=timeout, headers=headers)
        return self._file_object(upload, response, len(data))

    async def create_transcript(self, *, audio_url: str | None = None,
                                file_id: str | None = None, idempotency_key: str | None = None,
                                **fields: Any) -> Transcript:
        key = idempotency_key or f"a5s-python-{uuid.uuid4()}"
        response = await self._request("POST", "/v1/transcripts",
                                       json=self._create_body(audio_url, file_id, fields),
                                       headers={"Idempotency-Key": key})
        return Transcript.model_validate(response.json())

    async def get_transcript(self, transcript_id: str) -> Transcript:
        return await self._get(Transcript, f"/v1/transcripts/{transcript_id}")

    async def list_transcripts(self, *, status: str | None = None,
                               limit: int = 20) -> AsyncIterator[TranscriptSummary]:
        before: str | None = None
        while True:
            params = {k: v for k, v in (("limit", limit), ("status", status),
                                        ("before", before)) if v is not None}
            page = await self._get(TranscriptList, "/v1/transcripts", params=params)
            for item in page.data:
                yield item
            if not page.has_more or not page.next_before:
                return
            before = page.next_before

    async def delete_transcript(self, transcript_id: str) -> DeletedTranscript:
        response = await self._request("DELETE", f"/v1/transcripts/{transcript_id}")
        return DeletedTranscript.model_validate(response.json())

    async def wait(self, transcript_id: str, *, timeout: float | None = None,
                   poll_interval: float | None = None, on_progress: Progress | None = None,
                   raise_on_error: bool = True) -> Transcript:
        loop = asyncio.get_running_loop()
        poll = Poll(poll_interval or self.poll_interval, timeout, loop.time(), on_progress,
                    raise_on_error)
        while True:
            transcript = await self.get_transcript(transcript_id)
            delay = poll.after(transcript, loop.time())
            if delay is None:
                return transcript
            await asyncio.sleep(delay)

    async def transcribe(self, file_or_url: str | Path | bytes, *, wait: bool = True,
                         poll_interval: float | None = None, timeout: float | None = None,
                         on_progress: Progress | None = None, **fields: Any) -> Transcript:
        on_progress = _deduped(on_progress)
        if _is_url(file_or_url):
            transcript = await self.create_transcript(audio_url=str(file_or_url), **fields)
        else:
            if on_progress:
                on_progress("uploading", None)
            uploaded = await self.upload(file_or_url)
            if on_progress:
                on_progress("uploaded", None)
            transcript = await self.create_transcript(file_id=uploaded.id, **fields)
        if on_progress:
            on_progress(transcript.status, transcript)
        if not wait:
            return transcript
        return await self.wait(transcript.id, timeout=timeout, poll_interval=poll_interval,
                               on_progress=on_progress)

    async def subtitles(self, transcript_id: str, format: Literal["srt", "vtt"] = "srt",
                        chars_per_caption: int | None = None) -> str:
        response = await self._request("GET", f"/v1/transcripts/{transcript_id}/subtitles",
                                       params=self._subtitle_params(format, chars_per_caption))
        return response.text

    async def account(self) -> Account:
        return await self._get(Account, "/v1/account")

    async def usage(self, *, days: int | None = None, timezone: str | None = None) -> Usage:
        return await self._get(Usage, "/v1/usage", params=self._usage_params(days, timezone))

    async def models(self) -> ModelList:
        return await self._get(ModelList, "/v1/models")

    def stream(self, source: Any, **options: Any) -> AsyncIterator[Any]:
        """Stream audio over ``/v1/realtime``; see :func:`a5s.realtime.astream`."""
        from .realtime import astream
        return astream(source, url=self.realtime_url, api_key=self.api_key, **options)

