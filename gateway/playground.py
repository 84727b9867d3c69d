"""The web playground: ``/playground`` (batch) and ``/playground/live`` (streaming).

Static pages from ``gateway/static``; everything they do goes through the public API
with the key the user pastes (kept in ``sessionStorage``, never sent to the page's own
server except as the bearer key of API calls). The live page opens ``/v1/realtime``
with the subprotocols ``["a5s.v1", "a5s.key.<key>"]``, since browsers cannot set an
``Authorization`` header on a WebSocket handshake (see ``docs/playground.md``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import tornado.web

from .base import ErrorEnvelope

__all__ = ["playground_routes", "PlaygroundPage", "StaticAsset", "STATIC_DIR", "FAVICON_ROUTE"]

STATIC_DIR = Path(str(resources.files("gateway").joinpath("static")))
# The pages load only their own script and style; audio may come from any URL the user
# gives (or a local blob), and the API and WebSocket are on this origin.
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "media-src * blob: data:; connect-src 'self' ws: wss: blob:; worker-src 'self' blob:; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


class PlaygroundPage(ErrorEnvelope):
    """One HTML page from the static directory, with a strict content security policy."""

    def initialize(self, page: str) -> None:
        self.page = page

    def set_default_headers(self) -> None:
        self.set_header("Content-Security-Policy", _CSP)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "no-referrer")
        self.set_header("Cache-Control", "no-cache")

    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish((STATIC_DIR / self.page).read_bytes())


class StaticAsset(ErrorEnvelope, tornado.web.StaticFileHandler):
    def set_default_headers(self) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Cache-Control", "no-cache")


class _Redirect(ErrorEnvelope, tornado.web.RedirectHandler):
    pass


FAVICON_ROUTE: tuple[str, type, dict[str, Any]] = (r"/(favicon\.ico)", StaticAsset,
                                                   {"path": str(STATIC_DIR)})
"""The icon browsers ask every origin for (the playground's and the ops dashboard's)."""


def playground_routes() -> list[tuple[str, type, dict[str, Any]]]:
    return [
        (r"/", _Redirect, {"url": "/playground"}),
        FAVICON_ROUTE,
        (r"/playground", PlaygroundPage, {"page": "playground.html"}),
        (r"/playground/live", PlaygroundPage, {"page": "live.html"}),
        (r"/playground/static/(.*)", StaticAsset, {"path": str(STATIC_DIR)}),
    ]
