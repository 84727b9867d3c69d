"""The OpenAPI 3.1 document of the public API, served at ``GET /v1/openapi.json``.

Schemas come from the pydantic models in ``schemas.api`` (validation mode, so a field
with a default is optional, as a client may omit it); error responses list the codes
of ``schemas.errors.HTTP_ERRORS`` per status; the streaming close codes come from
``STREAM_CLOSE_CODES``. Only the operation table below is written here: paths,
parameters, and which statuses each handler can answer.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from schemas.api import (ENGLISH_VARIANTS, METADATA_MAX_BYTES, Account,
                         CreateTranscript, DeletedTranscript, FileObject, ModelList,
                         Transcript, TranscriptList, UploadUrl, Usage, WebhookEvent)
from schemas.errors import HTTP_ERRORS, STREAM_CLOSE_CODES, ErrorEnvelope
from schemas.realtime import ClientMessage, ServerMessage

from .base import BaseHandler
from .subtitles_handler import DEFAULT_CHARS, MAX_CHARS, MIN_CHARS, SUBTITLE_TYPES
from .usage import DEFAULT_DAYS, MAX_DAYS

__all__ = ["openapi_document", "OpenApiHandler", "API_VERSION"]

API_VERSION = "1.0.0"
REF = "#/components/schemas/{model}"
_MODELS: tuple[type[BaseModel], ...] = (
    Transcript, DeletedTranscript, TranscriptList, CreateTranscript, FileObject, UploadUrl,
    ModelList, Account, Usage, WebhookEvent, ErrorEnvelope)
_CLIENT_FRAMES = typing.get_args(typing.get_args(ClientMessage)[0])
_SERVER_FRAMES = typing.get_args(ServerMessage)
_STORE_ERRORS = (500, 502, 504)  # any handler that reaches ClickHouse, Redis or the store
_AUTH_ERRORS = (401, 403)
_TRANSCRIPT_ID = {"type": "string", "pattern": "^tr_[0-9a-z]{26}$"}


def _ref(model: type[BaseModel] | str) -> dict[str, str]:
    return {"$ref": REF.format(model=model if isinstance(model, str) else model.__name__)}


def _param(name: str, where: str, schema: dict[str, Any], description: str,
           required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required or where == "path",
            "description": description, "schema": schema}


@dataclass
class Op:
    method: str
    path: str
    operation_id: str
    summary: str
    ok: dict[int, dict[str, Any]]
    errors: tuple[int, ...] = ()
    params: list[dict[str, Any]] = field(default_factory=list)
    body: dict[str, Any] | None = None
    auth: bool = True
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _json(model: type[BaseModel], description: str,
          headers: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, "headers": headers or {},
            "content": {"application/json": {"schema": _ref(model)}}}


_BINARY = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
_ID_PATH = _param("id", "path", _TRANSCRIPT_ID, "Transcript id, `tr_<id>`.")


def _operations() -> list[Op]:
    auth_err = _AUTH_ERRORS + _STORE_ERRORS
    location = {"Location": {"required": True, "description": "URL of the new transcript.",
                             "schema": {"type": "string", "format": "uri"}}}
    return [
        Op("get", "/v1/models", "listModels", "List models",
           {200: _json(ModelList, "Both models.")}, auth=False),
        Op("get", "/v1/account", "getAccount", "Account and limits",
           {200: _json(Account, "The account of the key, with live figures.")}, auth_err),
        Op("post", "/v1/transcripts", "createTranscript", "Create a transcript",
           {201: _json(Transcript, "Created, status `queued`.", location),
            200: _json(Transcript, "Idempotent replay: the original transcript.")},
           (400, 404, 409, 413, 429) + auth_err,
           params=[_param("Idempotency-Key", "header", {"type": "string", "minLength": 1,
                                                        "maxLength": 255},
                          "A retry with the same key and body returns the original "
                          "transcript (200); a different body gives 409.")],
           body={"required": True, "content": {"application/json": {
               "schema": _ref(CreateTranscript)}}},
           description="Exactly one of `audio_url` or `file_id`. A `file_id` serves one "
                       "transcript; an unknown, expired or used one gives 404 "
                       f"`file_not_found`. `metadata` is at most {METADATA_MAX_BYTES} bytes "
                       "as compact JSON. Webhook header fields need `webhook_url`."),
        Op("get", "/v1/transcripts", "listTranscripts", "List transcripts, newest first",
           {200: _json(TranscriptList, "One page.")}, (400,) + auth_err,
           params=[_param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 100,
                                             "default": 20}, "Page size."),
                   _param("status", "query", {"type": "string", "enum": [
                       "queued", "processing", "completed", "error"]}, "Only this status."),
                   _param("before", "query", _TRANSCRIPT_ID,
                          "Cursor: `next_before` of the previous page.")]),
        Op("get", "/v1/transcripts/{id}", "getTranscript", "Get a transcript",
           {200: _json(Transcript, "Result fields present once `completed`.")},
           (404,) + auth_err, params=[_ID_PATH]),
        Op("delete", "/v1/transcripts/{id}", "deleteTranscript", "Cancel or delete",
           {200: _json(DeletedTranscript, "The transcript as it was, `deleted: true`; a "
                                          "canceled job shows `error.code` `canceled`.")},
           (404,) + auth_err, params=[_ID_PATH]),
        Op("get", "/v1/transcripts/{id}/subtitles", "getSubtitles", "Captions",
           {200: {"description": "SRT or WebVTT text; each cue `[speaker_<n>] <text>`.",
                  "headers": {},
                  "content": {t: {"schema": {"type": "string"}}
                              for t in SUBTITLE_TYPES.values()}}},
           (400, 404, 409) + auth_err,
           params=[_ID_PATH,
                   _param("format", "query", {"type": "string", "enum": list(SUBTITLE_TYPES),
                                              "default": "srt"}, "Caption format."),
                   _param("chars_per_caption", "query",
                          {"type": "integer", "minimum": MIN_CHARS, "maximum": MAX_CHARS,
                           "default": DEFAULT_CHARS},
                          "Maximum characters of cue text (speaker label excluded).")]),
        Op("post", "/v1/files", "uploadFile", "Direct upload (up to 1 GB)",
           {201: _json(FileObject, "Stored; use `id` as `file_id`.")},
           (400, 413) + auth_err, body={"required": True, "content": _BINARY},
           description="The raw request body is the file, any content type. Larger than "
                       "1 GB (judged from Content-Length, and while streaming) gives 413 "
                       "`file_too_large`; use the presigned route instead."),
        Op("post", "/v1/files/upload-url", "createUploadUrl", "Presigned upload (up to 5 GB)",
           {201: _json(UploadUrl, "PUT the raw bytes to `upload_url` before `expires_at`, "
                                  "then use `id` as `file_id`.")}, auth_err,
           description="No request body. With S3 storage `upload_url` is an S3 presigned "
                       "PUT; otherwise it points at `PUT /v1/uploads/{file_id}`."),
        Op("put", "/v1/uploads/{file_id}", "putUpload", "Target of a gateway presigned URL",
           {200: _json(FileObject, "Stored; use `id` as `file_id`.")},
           (400, 403, 404, 413) + _STORE_ERRORS, auth=False,
           body={"required": True, "content": _BINARY},
           params=[_param("file_id", "path", {"type": "string", "pattern": "^file_[0-9a-z]{26}$"},
                          "The `id` of the upload URL."),
                   _param("expires", "query", {"type": "string", "pattern": "^[0-9]+$"},
                          "Expiry, Unix seconds (part of the signed URL).", required=True),
                   _param("signature", "query", {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                          "HMAC-SHA256 (hex) of the URL.", required=True)],
           description="Needs no bearer key: the signed URL is the credential. Expired or "
                       "altered URLs give 403 `upload_url_invalid`."),
        Op("get", "/v1/usage", "getUsage", "Daily usage of both models",
           {200: _json(Usage, "One row per date and model, zeros included.")},
           (400,) + auth_err,
           params=[_param("days", "query", {"type": "integer", "minimum": 1,
                                            "maximum": MAX_DAYS, "default": DEFAULT_DAYS},
                          "Calendar days including today."),
                   _param("timezone", "query", {"type": "string", "default": "UTC"},
                          "IANA time zone for day boundaries, e.g. `Europe/Berlin`.")]),
        Op("get", "/v1/openapi.json", "getOpenApi", "This document",
           {200: {"description": "OpenAPI 3.1.", "headers": {},
                  "content": {"application/json": {"schema": {"type": "object"}}}}},
           auth=False),
        _realtime(),
    ]


def _realtime() -> Op:
    closes = ", ".join(f"`{c.value}` {n}" for c, n in STREAM_CLOSE_CODES.items())
    return Op(
        "get", "/v1/realtime", "realtime", "Live streaming (WebSocket)",
        {101: {"description": "Switching Protocols: the WebSocket session begins.",
               "headers": {}}},
        (400,) + _AUTH_ERRORS,
        params=[_param("Upgrade", "header", {"type": "string", "const": "websocket"},
                       "WebSocket handshake.", required=True),
                _param("Connection", "header", {"type": "string"}, "`Upgrade`.",
                       required=True),
                _param("Sec-WebSocket-Version", "header", {"type": "string", "const": "13"},
                       "WebSocket version.", required=True),
                _param("Sec-WebSocket-Key", "header", {"type": "string"},
                       "WebSocket handshake key.", required=True)],
        description=(
            "A WebSocket, not a REST call. Model `a5s-v2-streaming`. The client sends a "
            "`start` JSON message within 45 s, waits for `ready`, streams binary PCM "
            "(pcm_s16le, 16 kHz, mono; frames of at most 64 KB, real time), and sends "
            "`finish`; the server answers `transcript` messages, then `finished`, and closes "
            "with 1000. Authentication and account errors arrive as an `error` message with "
            f"the same `code`, then a close. Error codes and close codes: {closes}."),
        extra={"x-websocket": {
            "client-messages": {"oneOf": [_ref(m) for m in _CLIENT_FRAMES],
                                "discriminator": {"propertyName": "type"}},
            "client-audio": "binary frames: raw pcm_s16le, 16 kHz, mono; non-empty, even "
                            "length, at most 64 KB",
            "server-messages": {"oneOf": [_ref(m) for m in _SERVER_FRAMES],
                                "discriminator": {"propertyName": "type"}}}})


def _error_response(status: int) -> dict[str, Any]:
    codes = [e.code for e in HTTP_ERRORS if e.http_status == status]
    headers: dict[str, Any] = {}
    if status == 429:
        headers["Retry-After"] = {"required": True, "description": "Seconds to wait.",
                                  "schema": {"type": "integer", "minimum": 1}}
    note = " `request_id` is null." if status in (502, 504) else ""
    return {"description": f"Error envelope; `error.code` one of {', '.join(codes)}.{note}",
            "headers": headers, "content": {"application/json": {"schema": _ref(ErrorEnvelope)}}}


def _with_request_id(response: dict[str, Any]) -> dict[str, Any]:
    response = dict(response)
    response["headers"] = {"x-request-id": {"$ref": "#/components/headers/RequestId"},
                           **response.get("headers", {})}
    return response


def _operation(op: Op) -> dict[str, Any]:
    responses: dict[str, Any] = {str(s): r for s, r in op.ok.items()}
    errors = set(op.errors) | ({401, 403} if op.auth else set())
    for status in sorted(errors):
        responses[str(status)] = {"$ref": f"#/components/responses/Error{status}"}
    out: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary,
                           "responses": {s: r if "$ref" in r else _with_request_id(r)
                                         for s, r in responses.items()}}
    if op.description:
        out["description"] = op.description
    if op.params:
        out["parameters"] = op.params
    if op.body is not None:
        out["requestBody"] = op.body
    out["security"] = [{"bearer": []}] if op.auth else []
    return out | op.extra


def _language_pattern() -> str:
    def ci(text: str) -> str:
        return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in text)
    regions = "|".join(ci(v[3:]) for v in ENGLISH_VARIANTS if "-" in v)
    return rf"^\s*{ci('en')}([-_]({regions}))?\s*$"


def _refine(schemas: dict[str, Any]) -> None:
    """Constraints the validators enforce in code, made visible to clients."""
    body = schemas["CreateTranscript"]["properties"]
    body["model"]["enum"] = [CreateTranscript.model_fields["model"].default]
    body["language_code"]["pattern"] = _language_pattern()
    for name in ("audio_url", "webhook_url"):
        body[name]["anyOf"][0] |= {"format": "uri", "pattern": "^[hH][tT][tT][pP][sS]?://"}
    body["metadata"]["description"] = (f"Any JSON object up to {METADATA_MAX_BYTES} bytes "
                                       "as compact JSON; echoed back.")


@lru_cache(maxsize=4)
def openapi_document(base_url: str = "") -> dict[str, Any]:
    """The whole document; cached per base URL (it only depends on code)."""
    models = [(m, "validation") for m in _MODELS + _CLIENT_FRAMES + _SERVER_FRAMES]
    _, defs = models_json_schema(models, ref_template=REF)
    schemas = defs["$defs"]
    _refine(schemas)
    paths: dict[str, dict[str, Any]] = {}
    for op in _operations():
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    statuses = sorted({e.http_status for e in HTTP_ERRORS})
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "a5s speech-to-text API", "version": API_VERSION,
                 "description": "Batch (`a5s-async-v1`) and live (`a5s-v2-streaming`) English "
                                "speech-to-text. Every error uses the envelope "
                                "`ErrorEnvelope`; every response carries `x-request-id`; "
                                "an unsupported method on any path gives 405 "
                                "`method_not_allowed`, an unknown path 404 `not_found`."},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {f"Error{s}": _with_request_id(_error_response(s))
                          for s in statuses},
            "headers": {"RequestId": {"required": True, "description": "`req_<id>`.",
                                      "schema": {"type": "string",
                                                 "pattern": "^req_[0-9a-z]{26}$"}}},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "`Authorization: Bearer "
                                                          "a5s_sk_...`"}},
        },
        "security": [{"bearer": []}],
    }
    if base_url:
        doc["servers"] = [{"url": base_url}]
    return doc


@lru_cache(maxsize=4)
def _document_json(base_url: str) -> bytes:
    return json.dumps(openapi_document(base_url), separators=(",", ":")).encode()


class OpenApiHandler(BaseHandler):
    QUERY = {"GET": ()}

    async def get(self) -> None:
        self.finish(_document_json(self.ctx.settings.base_url))
