"""The base every REST handler shares: request ids, the one error renderer, auth, JSON bodies."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, TypeVar

import tornado.web
from pydantic import BaseModel, ValidationError

from schemas import ids
from schemas.errors import (A5sError, AccountDisabled, AccountSuspended, InternalError,
                            InvalidRequest, MethodNotAllowed, NotFound, Unauthorized)
from schemas.rows import AccountRow, ApiKeyRow
from stores.context import Context

__all__ = ["BaseHandler", "Principal", "principal_for", "NotFoundHandler", "parse_body",
           "validation_param"]

log = logging.getLogger("a5s.gateway")
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Principal:
    account: AccountRow
    key: ApiKeyRow


def validation_param(exc: ValidationError) -> tuple[str | None, str]:
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err.get("loc", ()) if not isinstance(p, int)]
    param = ".".join(loc) or None
    msg = err.get("msg", "invalid value")
    if err.get("type") == "extra_forbidden":
        msg = "unknown field"
    return param, f"{param}: {msg}" if param else msg


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
        raise InvalidRequest(msg[0].upper() + msg[1:] + ".", param=param) from exc


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


class BaseHandler(tornado.web.RequestHandler):
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
        allowed = self.QUERY.get(self.request.method or "")
        if allowed is not None:
            for name in self.request.query_arguments:
                if name not in allowed:
                    raise InvalidRequest(f"Unknown query parameter {name!r}.", param=name)

    # --- responses ----------------------------------------------------------------------------

    def send(self, model: BaseModel, status: int = 200) -> None:
        self.set_status(status)
        self.finish(model.model_dump_json(by_alias=True))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        error = self._as_api_error(exc, status_code)
        if error.http_status >= 500:
            log.error("request %s failed: %s", self.request_id, error.log or error.message,
                      exc_info=kwargs.get("exc_info") if isinstance(error, InternalError) and
                      error.log is None else None)
        self.set_status(error.http_status)
        self.set_header("Content-Type", "application/json")
        self.set_header("x-request-id", self.request_id)
        if error.retry_after is not None:
            self.set_header("Retry-After", str(int(error.retry_after)))
        self.finish(error.body(self.request_id).model_dump_json())

    @staticmethod
    def _as_api_error(exc: BaseException | None, status_code: int) -> A5sError:
        if isinstance(exc, A5sError):
            return exc
        if status_code == 405:
            return MethodNotAllowed()
        if status_code == 404:
            return NotFound()
        if isinstance(exc, tornado.web.HTTPError) and exc.status_code == 400:
            return InvalidRequest(exc.log_message or "The request is malformed.")
        return InternalError(log=repr(exc) if exc else None)

    def on_finish(self) -> None:
        # One place counts every REST answer, labelled by route pattern (bounded), not path.
        route = self.ctx.metrics.route_of(self.application, type(self))
        self.ctx.metrics.observe_request(route, self.request.method or "", self.get_status(),
                                         self.request.request_time())

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, A5sError) and value.http_status < 500:
            return
        if isinstance(value, tornado.web.HTTPError) and value.status_code < 500:
            return
        super().log_exception(typ, value, tb)

    # --- auth ---------------------------------------------------------------------------------

    async def authenticate(self) -> Principal:
        header = self.request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer":
            raise Unauthorized()
        self.principal = await principal_for(self.ctx, token.strip())
        return self.principal

    def body_as(self, model: type[M]) -> M:
        return parse_body(model, self.request.body)


class NotFoundHandler(BaseHandler):
    """Unknown paths: the envelope with ``not_found`` for every method."""

    def prepare(self) -> None:
        super().prepare()
        raise NotFound(f"No route for {self.request.path}.")
