"""The base every REST handler shares: request ids, the one error renderer, auth, JSON bodies."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, TypeVar

import tornado.web
from pydantic import BaseModel, ValidationError

from schemas import ids
from schemas.errors import (A5sError, AccountDisabled, AccountSuspended, FileTooLarge,
                            InternalError, InvalidRequest, MethodNotAllowed, NotFound,
                            ShuttingDown, Unauthorized)
from schemas.rows import AccountRow, ApiKeyRow
from security.tokens import bearer_token
from stores.context import Context
from topologies.graph import node
from topologies.topics import TopicSpec

__all__ = ["publish", "BaseHandler", "Principal", "principal_for", "NotFoundHandler", "parse_body",
           "validation_param", "ErrorEnvelope", "Application", "Admission", "admission", "JSON_BODY_LIMIT", "allowed_methods",
           "WrongMethodHandler", "BodyTooLargeHandler"]

log = logging.getLogger("a5s.gateway")
M = TypeVar("M", bound=BaseModel)
GATEWAY = node("gateway")


async def publish(ctx: Context, spec: TopicSpec[Any], key: str, value: Any) -> int:
    """The gateway's one way to the broker: refuses a topic ``topologies.GRAPH`` does not
    list among the gateway's writes, so the graph stays the whole truth about who writes
    what. Returns the record's offset."""
    GATEWAY.check_write(spec)
    return await ctx.producer.send(spec, key, value)


async def publish_nowait(ctx: Context, spec: TopicSpec[Any], key: str,
                         value: Any) -> asyncio.Future[int]:
    """:func:`publish` without waiting for the acknowledgement: the future gives the
    offset. Records of one key keep their order."""
    GATEWAY.check_write(spec)
    return await ctx.producer.enqueue(spec, key, value)


JSON_BODY_LIMIT = 1 << 20
"""The largest body of a request that is not an upload (JSON bodies; metadata is 16 KB)."""


class Admission:
    """Whether the gateway takes new requests, and how many it is still answering.

    Stopping begins with :meth:`drain`: from then on every request is refused with
    :class:`~schemas.errors.ShuttingDown` (503, the envelope) and new WebSockets close
    with 1013, while the requests already admitted finish.
    """

    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self.sessions: dict[object, Callable[[], None]] = {}
        """Live WebSocket sessions: each one's way to end itself (error, then 1013)."""

    async def drain(self, timeout_s: float) -> int:
        """Stop admitting; end live sessions; wait for the admitted requests and the sessions'
        closes. Returns how many requests and sessions were left."""
        self.draining = True
        for end in list(self.sessions.values()):
            end()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while (self.in_flight or self.sessions) and \
                asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        return self.in_flight + len(self.sessions)


def admission(ctx: Context) -> Admission:
    """The process's one :class:`Admission` (kept in ``ctx.extras``)."""
    found = ctx.extras.get("admission")
    if not isinstance(found, Admission):
        found = ctx.extras["admission"] = Admission()
    return found


@dataclass(frozen=True)
class Principal:
    account: AccountRow
    key: ApiKeyRow


def validation_param(exc: ValidationError) -> tuple[str | None, str]:
    """The offending parameter and a message in the API's words (not pydantic's)."""
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err.get("loc", ()) if not isinstance(p, int)]
    param = ".".join(loc) or None
    kind = err.get("type", "")
    msg = str(err.get("msg", "invalid value"))
    if kind == "extra_forbidden":
        return param, f"Unknown field {param!r}." if param else "Unknown field."
    if kind == "value_error":  # our own validators: their message is already the API's
        msg = str((err.get("ctx") or {}).get("error", msg.removeprefix("Value error, ")))
    elif kind == "missing":
        msg = "required"
    msg = msg.rstrip(".")
    return param, f"Invalid {param}: {msg}." if param else msg[:1].upper() + msg[1:] + "."


def parse_body(model: type[M], raw: bytes) -> M:
    """Validate a JSON body into ``model``; every failure is a 400 naming the parameter."""
    try:
        data = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: "[[[..."
        raise InvalidRequest(f"The body is not valid JSON: {exc}.") from exc
    if not isinstance(data, dict):
        raise InvalidRequest("The body must be a JSON object.")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        param, msg = validation_param(exc)
        raise InvalidRequest(msg, param=param) from exc


async def principal_for(ctx: Context, token: str | None) -> Principal:
    """The account and key behind an API key, refused by the spec's codes (REST and WebSocket)."""
    found = await ctx.accounts.authenticate(token) if token else None
    if found is None:
        raise Unauthorized()
    account, key = found
    if account.status == "disabled":
        raise AccountDisabled()
    if account.status == "suspended":
        raise AccountSuspended()
    return Principal(account, key)


class ErrorEnvelope(tornado.web.RequestHandler):
    """The one error renderer: the spec's envelope, ``x-request-id``, ``Allow`` on 405.

    Mixed into handlers that do not derive from :class:`BaseHandler` (static pages, the
    WebSocket) so that every error the server sends has the same shape.
    """

    request_id: str | None = None

    def allowed_methods(self) -> list[str]:
        return allowed_methods(type(self))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        error = self._as_api_error(exc, status_code)
        if not self.request_id:
            self.request_id = ids.request_id()
        if error.http_status >= 500 and not isinstance(error, ShuttingDown):
            log.error("request %s failed: %s", self.request_id, error.log or error.message,
                      exc_info=kwargs.get("exc_info") if isinstance(error, InternalError) and
                      error.log is None else None)
        self.set_status(error.http_status)
        self.set_header("Content-Type", "application/json")
        self.set_header("x-request-id", self.request_id)
        if error.http_status == 405:  # RFC 9110: a 405 names the methods the resource has
            self.set_header("Allow", ", ".join(self.allowed_methods()))
        if error.retry_after is not None:
            self.set_header("Retry-After", str(int(error.retry_after)))
        self.finish(self.error_body(error))

    def error_body(self, error: A5sError) -> str:
        """The body of an error answer: the spec's envelope (compatibility routes override it)."""
        return error.body(self.request_id).model_dump_json()

    @staticmethod
    def _as_api_error(exc: BaseException | None, status_code: int) -> A5sError:
        if isinstance(exc, A5sError):
            return exc
        if status_code == 405:
            return MethodNotAllowed("This resource does not take that method.")
        if status_code == 404:
            return NotFound()
        if 400 <= status_code < 500:  # tornado's own refusals (static files, malformed requests)
            return InvalidRequest(getattr(exc, "log_message", None)
                                  or "The request is malformed.")
        return InternalError(log=repr(exc) if exc else None)

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, A5sError) and (value.http_status < 500
                                            or isinstance(value, ShuttingDown)):
            return
        if isinstance(value, tornado.web.HTTPError) and value.status_code < 500:
            return
        super().log_exception(typ, value, tb)


class BaseHandler(ErrorEnvelope):
    """Handlers get the process ``Context`` through ``initialize``, never from globals."""

    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "DELETE", "PATCH", "PUT", "OPTIONS")
    QUERY: dict[str, tuple[str, ...]] = {}
    """Query parameters per method; any other one is refused with 400 naming it. A method
    not listed here is not checked."""

    def initialize(self, ctx: Context) -> None:
        self.ctx = ctx
        self.request_id = ids.request_id()
        self.principal: Principal | None = None

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json")

    def prepare(self) -> None:
        self.set_header("x-request-id", self.request_id)
        gate = admission(self.ctx)
        if gate.draining:
            raise ShuttingDown(retry_after=5)
        gate.in_flight += 1
        self._admitted = True
        allowed = self.QUERY.get(self.request.method or "")
        if allowed is not None:
            for name in self.request.query_arguments:
                if name not in allowed:
                    raise InvalidRequest(f"Unknown query parameter {name!r}.", param=name)

    # --- responses ----------------------------------------------------------------------------

    def send(self, model: BaseModel, status: int = 200) -> None:
        self.set_status(status)
        self.finish(model.model_dump_json(by_alias=True))

    def on_finish(self) -> None:
        if getattr(self, "_admitted", False):
            self._admitted = False
            admission(self.ctx).in_flight -= 1
        # One place counts every REST answer, labelled by route pattern (bounded), not path.
        route = self.ctx.metrics.route_of(self.application, type(self))
        self.ctx.metrics.observe_request(route, self.request.method or "", self.get_status(),
                                         self.request.request_time())

    # --- auth ---------------------------------------------------------------------------------

    async def authenticate(self) -> Principal:
        token = bearer_token(self.request.headers.get("Authorization"))
        if token is None:
            raise Unauthorized()
        self.principal = await principal_for(self.ctx, token)
        return self.principal

    def body_as(self, model: type[M]) -> M:
        return parse_body(model, self.request.body)


def allowed_methods(handler: type[tornado.web.RequestHandler]) -> list[str]:
    """The methods a handler class implements (for ``Allow``)."""
    base = tornado.web.RequestHandler
    return [m for m in handler.SUPPORTED_METHODS
            if getattr(handler, m.lower(), None) is not getattr(base, m.lower(), None)]


DRAIN_LIMIT = 64 << 20
"""A refused body up to this size is read (and dropped) before the answer is sent."""


@tornado.web.stream_request_body
class _Refusal(BaseHandler):
    """Refuses a request whatever its body, with the envelope.

    Tornado answers a body over the server's limit with a bare ``400`` of its own; a
    handler that streams the body raises that limit for its request first. The answer
    waits for the body (dropped as it comes): a server that answers and closes while the
    client still sends makes the client's kernel see a reset, not the answer. A body
    declared over :data:`DRAIN_LIMIT` is answered at once and the connection closed.
    """

    def prepare(self) -> None:
        super().prepare()
        self.request.connection.set_max_body_size(DRAIN_LIMIT)  # type: ignore[union-attr]
        length = self.request.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > DRAIN_LIMIT:
            if length or "chunked" in self.request.headers.get("Transfer-Encoding", ""):
                self.set_header("Connection", "close")
                raise self.answer()

    def answer(self) -> A5sError:
        raise NotImplementedError

    def data_received(self, chunk: bytes) -> None:
        pass  # refused; the body is dropped

    def _refuse(self, *_: Any) -> None:
        raise self.answer()

    SUPPORTED_METHODS = (*BaseHandler.SUPPORTED_METHODS, "TRACE", "CONNECT")
    get = head = post = put = patch = delete = options = trace = connect = _refuse


class NotFoundHandler(_Refusal):
    """Unknown paths: the envelope with ``not_found`` for every method and any body."""

    def answer(self) -> A5sError:
        return NotFound(f"No route for {self.request.path}.")


class BodyTooLargeHandler(_Refusal):
    """A declared body over :data:`JSON_BODY_LIMIT` on a route that takes JSON."""

    def answer(self) -> A5sError:
        return FileTooLarge(
            f"The request body is over {JSON_BODY_LIMIT // (1 << 20)} MiB, the limit for "
            "requests that are not uploads (metadata takes at most 16 KB); upload audio with "
            "POST /v1/files or POST /v1/files/upload-url.")


class WrongMethodHandler(_Refusal):
    """A method the route does not have: 405 with the route's ``Allow``, whatever the body."""

    def initialize(self, ctx: Context, allow: list[str]) -> None:  # type: ignore[override]
        super().initialize(ctx)
        self.allow = allow

    def allowed_methods(self) -> list[str]:
        return self.allow

    def answer(self) -> A5sError:
        return MethodNotAllowed(f"{self.request.path} does not take {self.request.method}; "
                                f"it takes {', '.join(self.allow)}.")


class Application(tornado.web.Application):
    """Refusals that do not depend on the body are answered without reading it into memory.

    A method the route lacks goes to :class:`WrongMethodHandler`, a declared body over
    :data:`JSON_BODY_LIMIT` on a route that buffers its body (every route but the uploads)
    to :class:`BodyTooLargeHandler`: the envelope, not tornado's bare 400. A handler class
    may name its own refusers (``wrong_method_handler``, ``body_too_large_handler``) so that
    a compatibility route answers in its own error shape.
    """

    def find_handler(self, request: Any, **kwargs: Any) -> Any:
        delegate = super().find_handler(request, **kwargs)
        target = getattr(delegate, "handler_class", None)
        args = self.settings.get("default_handler_args", {})
        if (target is not None and issubclass(target, ErrorEnvelope)
                and not issubclass(target, _Refusal)):
            allow = allowed_methods(target)
            if request.method not in allow:
                return self.get_handler_delegate(
                    request, getattr(target, "wrong_method_handler", WrongMethodHandler),
                    {**args, "allow": allow})
        length = request.headers.get("Content-Length", "")
        if (not getattr(delegate, "stream_request_body", True) and length.isdigit()
                and int(length) > JSON_BODY_LIMIT):
            return self.get_handler_delegate(
                request, getattr(target, "body_too_large_handler", BodyTooLargeHandler), args)
        return delegate
