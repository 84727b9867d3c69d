"""Application factories: the public API (``make_app``) and the console (``make_console_app``)."""

from __future__ import annotations

from typing import Any

import tornado.web

from stores.context import Context
from stores.sql_readonly import ReadOnlySql

from .account import AccountHandler, HealthHandler, ModelsHandler
from .assemblyai_compat import aai_routes
from .assemblyai_streaming import V3Socket
from .base import Application, NotFoundHandler
from .clickhouse_proxy import clickhouse_proxy_routes
from .console import console_routes
from .ops_dashboard import ops_routes
from .sql_http import sql_routes
from .files import FilesHandler, PresignedUploadHandler, UploadUrlHandler
from .jobs import JobService
from .metrics import MetricsHandler
from .openai_compat import OpenAITranscriptionsHandler
from .openapi import OpenApiHandler
from .realtime import StreamSocket
from .realtime_admission import StreamAdmission
from .realtime_hub import hub_for
from .playground import playground_routes
from .subtitles_handler import SubtitlesHandler
from .transcripts import TranscriptHandler, TranscriptsHandler
from .usage import UsageHandler

__all__ = ["make_app", "make_console_app", "api_routes", "extra_routes"]


def api_routes(ctx: Context) -> list[tuple[str, type, dict[str, Any]]]:
    deps: dict[str, Any] = {"ctx": ctx}
    jobs = {"ctx": ctx, "jobs": JobService(ctx)}
    return [
        (r"/v1/models", ModelsHandler, deps),
        (r"/v1/account", AccountHandler, deps),
        (r"/v1/transcripts", TranscriptsHandler, jobs),
        (r"/v1/transcripts/([^/]+)", TranscriptHandler, jobs),
        (r"/v1/transcripts/([^/]+)/subtitles", SubtitlesHandler, jobs),
        (r"/v1/files", FilesHandler, deps),
        (r"/v1/files/upload-url", UploadUrlHandler, deps),
        (r"/v1/uploads/([^/]+)", PresignedUploadHandler, deps),
        (r"/v1/usage", UsageHandler, deps),
        (r"/v1/realtime", StreamSocket, {"ctx": ctx, "hub": hub_for(ctx),
                                         "admission": StreamAdmission(ctx)}),
        (r"/v1/openapi\.json", OpenApiHandler, deps),
    ]


def extra_routes(ctx: Context) -> list[tuple[str, type, dict[str, Any]]]:
    """Served beside the API but not part of its OpenAPI document: the OpenAI-compatible
    route (OpenAI's contract, docs/client.md), AssemblyAI's batch API under ``/v2`` and its
    streaming API at ``/v3/ws`` (docs/compat.md), the operators' ``/health`` and Prometheus
    metrics (outside ``/v1``, spec section 9; docs/operations.md) and the playground."""
    return [
        (r"/health", HealthHandler, {"ctx": ctx}),
        (r"/v1/audio/transcriptions", OpenAITranscriptionsHandler,
         {"ctx": ctx, "jobs": JobService(ctx)}),
        *aai_routes(ctx),
        (r"/v3/ws", V3Socket, {"ctx": ctx, "hub": hub_for(ctx),
                               "admission": StreamAdmission(ctx)}),
        (r"/metrics", MetricsHandler, {"ctx": ctx}),
        *playground_routes(),
    ]


def make_app(ctx: Context, **settings: Any) -> tornado.web.Application:
    return Application(
        api_routes(ctx) + extra_routes(ctx), default_handler_class=NotFoundHandler,
        default_handler_args={"ctx": ctx}, xheaders=False, compress_response=True,
        **settings)


def make_console_app(ctx: Context, token: str) -> tornado.web.Application:
    """Loopback only: accounts and keys, the ops dashboard and, where this process owns an
    embedded ClickHouse (chdb), its engine for extra workers and read-only SQL for operators
    (ClickHouse's HTTP interface on ``/``; with a ClickHouse server, query that instead)."""
    embedded = []
    if getattr(ctx.ch, "embedded", False):
        sql = ReadOnlySql.for_dsn(ctx.ch.dsn, ctx.ch.database, before=ctx.ch.flush)
        embedded = [*clickhouse_proxy_routes(ctx, token), *sql_routes(sql, token)]
    return tornado.web.Application([*console_routes(ctx, token), *ops_routes(ctx, token),
                                    *embedded],
                                   default_handler_class=NotFoundHandler,
                                   default_handler_args={"ctx": ctx})
