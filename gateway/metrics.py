"""``GET /metrics``: this process's Prometheus registry, in the format the scraper accepts.

The Prometheus text format 0.0.4, or OpenMetrics 1.0.0 when the ``Accept`` header
prefers ``application/openmetrics-text`` (``stores.metrics.negotiate``); ``Vary: Accept``.

No bearer key: Prometheus scrapes without one, and the gateway binds loopback unless
told otherwise. Where the API listener is public, keep ``/metrics`` off the public
proxy (see ``docs/client.md``, "Metrics").

The queue depth is an honest approximation: Kafka consumer lag per topic would need
the broker's group offsets, so ``a5s_jobs_in_state{state}`` counts the jobs that are
``queued`` (waiting for one of the account's slots) and ``processing`` (in the stages),
read at scrape time from ClickHouse's waiting rows and the read model's live ones
(``Transcripts.in_state``).
"""

from __future__ import annotations

import logging

from schemas.errors import A5sError
from stores.metrics import negotiate
from stores.transcripts import Transcripts

from .base import BaseHandler

__all__ = ["MetricsHandler"]

log = logging.getLogger("a5s.gateway")


class MetricsHandler(BaseHandler):
    QUERY = {"GET": ()}

    async def get(self) -> None:
        metrics = self.ctx.metrics
        try:
            counts = await Transcripts(self.ctx.ch, self.ctx.redis).in_state()
        except A5sError as exc:  # the rest of the registry is still worth serving
            log.warning("metrics: jobs in state unavailable: %s", exc.log or exc)
        else:
            for state in ("queued", "processing"):
                metrics.jobs_in_state.labels(state).set(counts.get(state, 0))
        content_type = negotiate(self.request.headers.get("Accept"))
        self.set_header("Content-Type", content_type)
        self.set_header("Vary", "Accept")
        self.finish(metrics.exposition(content_type))
