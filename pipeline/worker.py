"""The pipeline worker role: the Faust worker with every agent, models warmed in the background.

Stopping (SIGINT, SIGTERM or SIGHUP) runs ``before_stop`` first (in one process with the
gateway: stop admitting requests), then stops the pipeline with offsets committed, so
what it had not finished is taken up on the next start.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Awaitable, Callable

from schemas.settings import Settings
from stores.context import Context
from stores.process import STOP_SIGNALS, service_process

from .models import check_engines

__all__ = ["run", "run_worker", "startup_check"]

SHUTDOWN_WAIT_S = 0.05
SHUTDOWN_WAITS = 4


def startup_check(settings: Settings) -> dict[str, str]:
    """Validate the engine settings before anything starts.

    Returns:
        model id -> engine description.

    Raises:
        FileNotFoundError: one line naming the setting and what is missing.
    """
    m = settings.models
    return check_engines(m.batch_engine, m.batch_model_dir, m.streaming_engine,
                         m.streaming_model_dir)


def run_worker(settings: Settings, ctx: Context, loop: asyncio.AbstractEventLoop, *,
               before_stop: Callable[[], Awaitable[None]] | None = None) -> int:
    """Serve every agent on ``loop`` until a stop signal; the worker closes the loop."""
    import faust

    from .app import Pipeline, create_app
    from .engines import Engines

    app = create_app(settings)
    engines = Engines(settings, ctx.metrics.registry)
    pipeline = Pipeline(app, ctx, engines)
    pipeline.register()  # every worker node of topologies.GRAPH, by its handler
    threading.Thread(target=engines.warm, name="models-warm", daemon=True).start()

    @app.task
    async def announce() -> None:
        print("a5s: ready", flush=True)

    class Worker(faust.Worker):  # type: ignore[misc]
        """Faust's worker, stopped after ``before_stop`` has run."""

        stopping: asyncio.Task[None] | None = None

        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            # Faust's start-up spinner hides and shows the cursor with terminal codes even
            # when the output is a log file; a5s reports its own start-up.
            self.spinner = None

        def _install_signal_handlers_unix(self) -> None:
            super()._install_signal_handlers_unix()
            for sig in STOP_SIGNALS:
                self.loop.add_signal_handler(sig, self._stop_in_order)

        def _stop_in_order(self) -> None:
            if self.stopping is None:
                self.stopping = asyncio.ensure_future(self._drain_then_stop())

        async def _drain_then_stop(self) -> None:
            if before_stop is not None:
                await before_stop()
            self._schedule_shutdown(signal.SIGTERM)

        # Once the app has stopped (offsets committed, the gateway drained), mode waits up
        # to 1 s for the tasks left, then 1 s more before it closes the loop: 2 s of every
        # stop and restart. The tasks left are clients' idle loops; they are cancelled
        # after a short wait instead.

        def _gather_all(self) -> None:
            for _ in range(SHUTDOWN_WAITS):
                if not asyncio.all_tasks(self.loop):
                    break
                self.loop.run_until_complete(asyncio.sleep(SHUTDOWN_WAIT_S))
            for task in asyncio.all_tasks(self.loop):
                task.cancel()

        async def _sentinel_task(self) -> None:
            await asyncio.sleep(SHUTDOWN_WAIT_S)

    worker = Worker(app, loop=loop, loglevel=settings.log_level, quiet=True,
                    redirect_stdouts=False, override_logging=False)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        engines.close()
    return 0


def run(settings: Settings) -> int:
    """A worker alone (``python -m pipeline``, ``a5s worker``)."""
    with service_process(settings, f"worker-{os.getpid()}.pid") as (ctx, loop):
        return run_worker(settings, ctx, loop)
