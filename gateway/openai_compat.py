"""``POST /v1/audio/transcriptions``: the OpenAI audio transcription shape over the batch model.

A drop-in for clients written against OpenAI's API (``openai`` SDK, ``curl -F``):
the multipart upload is stored like ``POST /v1/files``, a transcript is created through
the same ``JobService`` (rate limit, quota, queue, usage ledger), and the handler waits
for it without blocking the event loop, up to ``wait_s``. The answer is rendered in
OpenAI's shapes:

* ``json`` -> ``{"text"}``; ``text`` -> the text itself;
* ``verbose_json`` -> ``{task, language, duration, text, segments?, words?}``; segments are
  our utterances (with an extra ``speaker``), words appear when
  ``timestamp_granularities[]`` includes ``word``, segments when it is absent or includes
  ``segment``;
* ``srt`` / ``vtt`` -> captions from ``gateway/subtitles.py``.

Errors use our envelope, whose ``error.message``, ``type``, ``code`` and ``param`` are
the fields OpenAI's clients read. A job that ends in ``error`` answers with its job
error code (400 for bad audio, 403 ``usage_limit_reached``, 500 otherwise). A job still
running after ``wait_s`` answers 504 ``upstream_timeout`` naming the transcript id,
which the client can keep polling at ``GET /v1/transcripts/{id}``.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import tornado.httputil
import tornado.web

from schemas import ids
from schemas.api import ASYNC_MODEL, CreateTranscript, Transcript, normalise_language
from schemas.errors import (A5sError, FileTooLarge, InternalError, InvalidRequest, NotFound,
                            UnsupportedModel, UpstreamTimeout, UsageLimitReached)
from schemas.records import TranscriptResult
from stores.context import Context
from topologies.objects import upload_key

from .base import BaseHandler
from .files import UploadRecords
from .jobs import JobService
from .subtitles import render_srt, render_vtt

__all__ = ["OpenAITranscriptionsHandler", "render_openai", "MODELS", "FORMATS", "MAX_BYTES"]

MODELS = ("whisper-1", ASYNC_MODEL)
FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
GRANULARITIES = ("word", "segment")
MAX_BYTES = 25 * 1024 * 1024
"""OpenAI's own upload limit; larger files go through ``POST /v1/files``."""
FIELDS = {"file", "model", "response_format", "timestamp_granularities[]",
          "timestamp_granularities", "language", "prompt", "temperature", "stream"}
_BAD_AUDIO = {"invalid_audio", "audio_too_long", "file_too_large", "file_not_found"}
_TYPES = {"srt": "application/x-subrip", "vtt": "text/vtt",
          "text": "text/plain; charset=utf-8"}


def _segment(n: int, utt: Any) -> dict[str, Any]:
    return {"id": n, "seek": 0, "start": utt.start, "end": utt.end, "text": utt.text,
            "tokens": [], "temperature": 0.0, "avg_logprob": 0.0, "compression_ratio": 1.0,
            "no_speech_prob": 0.0, "speaker": utt.speaker}


def render_openai(transcript: Transcript, fmt: str, granularities: list[str],
                  stored: TranscriptResult | None = None) -> str:
    """The body OpenAI would send for ``fmt``; ``transcript`` is completed and ``stored``
    is its stored result. The text is punctuated and cased as the recogniser wrote it
    (``schemas.word_forms``), as OpenAI's is; without ``stored``, the transcript's own
    verbatim words."""
    if stored is None:
        stored = TranscriptResult(text=transcript.text or "", speakers=transcript.speakers or [],
                                  utterances=transcript.utterances or [],
                                  words=transcript.words or [])
    result = stored.in_form(punctuate=True, format_text=True)
    if fmt == "text":
        return result.text + "\n"
    if fmt == "srt":
        return render_srt(result)
    if fmt == "vtt":
        return render_vtt(result)
    if fmt == "json":
        return json.dumps({"text": result.text})
    body: dict[str, Any] = {"task": "transcribe", "language": "english",
                            "duration": transcript.audio_duration or 0.0, "text": result.text}
    if not granularities or "segment" in granularities:
        body["segments"] = [_segment(n, u) for n, u in enumerate(result.utterances)]
    if "word" in granularities:
        body["words"] = [{"word": w.text, "start": w.start, "end": w.end, "speaker": w.speaker}
                         for w in result.words]
    return json.dumps(body)


def _job_error(transcript: Transcript) -> A5sError:
    code = transcript.error.code if transcript.error else "internal_error"
    message = transcript.error.message if transcript.error else "The job failed."
    exc: A5sError
    if code == "usage_limit_reached":
        exc = UsageLimitReached(message)
    elif code in _BAD_AUDIO:
        exc = InvalidRequest(message, param="file")
    else:
        exc = InternalError(message)
    exc.code = code  # the job's own code (spec section 7), on the usual HTTP status
    return exc


class _Form:
    """The parsed multipart form: single values by name, and the one file."""

    def __init__(self, content_type: str, body: bytes) -> None:
        if not content_type.lower().startswith("multipart/form-data"):
            raise InvalidRequest("Send multipart/form-data with the audio in 'file'.",
                                 param="file")
        args: dict[str, list[bytes]] = {}
        files: dict[str, list[tornado.httputil.HTTPFile]] = {}
        try:
            tornado.httputil.parse_body_arguments(content_type, body, args, files)
        except tornado.httputil.HTTPInputError as exc:
            raise InvalidRequest(f"The multipart body is malformed: {exc}.") from exc
        for name in [*args, *files]:
            if name not in FIELDS:
                raise InvalidRequest(f"Unknown field {name!r}.", param=name)
        self.args = {k: [v.decode("utf-8", "replace") for v in vs] for k, vs in args.items()}
        self.file = (files.get("file") or [None])[0]
        if self.file is None or not self.file.body:
            raise InvalidRequest("The 'file' field with the audio is required.", param="file")

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self.args.get(name)
        return values[-1] if values else default

    def all(self, *names: str) -> list[str]:
        return [v for name in names for v in self.args.get(name, [])]


@tornado.web.stream_request_body
class OpenAITranscriptionsHandler(BaseHandler):
    """``POST /v1/audio/transcriptions`` (multipart, up to ``MAX_BYTES``)."""

    QUERY = {"POST": ()}

    def initialize(self, ctx: Context, jobs: JobService,  # type: ignore[override]
                   wait_s: float = 900.0) -> None:
        super().initialize(ctx)
        self.jobs = jobs
        self.wait_s = wait_s
        self.body = bytearray()
        self.too_large = False
        self.body_complete = False
        self.gone = False

    async def prepare(self) -> None:
        super().prepare()
        if self.request.method != "POST":
            return  # tornado answers 405 after this
        self.who = await self.authenticate()
        length = self.request.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > MAX_BYTES + (1 << 16):
            raise self._too_large()
        self.request.connection.set_max_body_size(2 * MAX_BYTES)

    def _too_large(self) -> FileTooLarge:
        return FileTooLarge(f"This endpoint takes files up to {MAX_BYTES} bytes; upload larger "
                            "ones with POST /v1/files and create a transcript.", param="file")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if not self.body_complete:  # answered before the body was read: the server closes
            self.set_header("Connection", "close")
        super().write_error(status_code, **kwargs)

    def on_connection_close(self) -> None:
        super().on_connection_close()
        self.gone = True

    def data_received(self, chunk: bytes) -> None:
        if self._finished or self.too_large:
            return
        if len(self.body) + len(chunk) > MAX_BYTES + (1 << 16):
            self.too_large = True
            self.body = bytearray()
            return
        self.body += chunk

    async def post(self) -> None:
        self.body_complete = True
        if self._finished:
            return
        if self.too_large:
            raise self._too_large()
        form = _Form(self.request.headers.get("Content-Type", ""), bytes(self.body))
        self.body = bytearray()
        fmt, granularities = self._options(form)
        transcript = await self._wait(await self._create(form))
        if transcript.status == "error":
            raise _job_error(transcript)
        stored = await self.jobs.transcripts.result(transcript.id, self.who.account.id)
        self.set_header("Content-Type", _TYPES.get(fmt, "application/json"))
        self.finish(render_openai(transcript, fmt, granularities, stored).encode())

    def _options(self, form: _Form) -> tuple[str, list[str]]:
        model = form.get("model")
        if model is None:
            raise InvalidRequest("model is required: whisper-1 or a5s-async-v1.", param="model")
        if model not in MODELS:
            raise UnsupportedModel(f"Model {model!r} is not served here; use whisper-1 or "
                                   f"{ASYNC_MODEL}.", param="model")
        fmt = form.get("response_format", "json") or "json"
        if fmt not in FORMATS:
            raise InvalidRequest(f"response_format must be one of {', '.join(FORMATS)}.",
                                 param="response_format")
        granularities = form.all("timestamp_granularities[]", "timestamp_granularities")
        for g in granularities:
            if g not in GRANULARITIES:
                raise InvalidRequest("timestamp_granularities[] takes word and segment.",
                                     param="timestamp_granularities[]")
        language = form.get("language")
        if language:
            try:
                normalise_language(language)
            except A5sError as exc:
                exc.param = "language"
                raise
        if (form.get("stream") or "false").lower() == "true":
            raise InvalidRequest("stream is not supported here; use the realtime WebSocket.",
                                 param="stream")
        return fmt, granularities

    async def _create(self, form: _Form) -> str:
        file_id = ids.file_id()
        data = form.file.body if form.file is not None else b""
        await self.ctx.objects.put_bytes(upload_key(file_id), data)
        await UploadRecords(self.ctx).save(self.who.account.id, file_id, len(data),
                                           datetime.now(UTC))
        body = json.dumps({"model": ASYNC_MODEL, "file_id": file_id}).encode()
        transcript, _ = await self.jobs.create(self.who, body, None, CreateTranscript)
        return transcript.id

    async def _wait(self, transcript_id: str) -> Transcript:
        """Poll the transcript (0.25 s, growing to 1 s) until it finishes or ``wait_s`` passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        delay = 0.25
        while True:
            transcript = await self.jobs.get(self.who.account.id, transcript_id)
            if transcript is None:  # deleted meanwhile
                raise NotFound(f"Transcript {transcript_id} was deleted before it finished.")
            if transcript.status in ("completed", "error"):
                return transcript
            if loop.time() >= deadline or self.gone:
                raise UpstreamTimeout(f"Transcript {transcript_id} is still {transcript.status}; "
                                      f"poll GET /v1/transcripts/{transcript_id}.")
            await asyncio.sleep(delay)
            delay = min(1.0, delay * 1.5)
