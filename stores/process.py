"""The life of one service process around its :class:`Context`, whatever roles it serves.

The order is: logging, clients and schema, topics, then serving (the caller's part);
on the way out the clients close and the pidfile goes. The roles themselves live with
their packages (:mod:`gateway.serve`, :mod:`pipeline.worker`); ``ops.service`` puts both
in one process for the embedded default, where chdb allows one process per data directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator
from typing import NoReturn

from schemas.settings import Settings

from .context import Context
from .kafka import ensure_topics, pace_empty_fetches

__all__ = ["STOP_SIGNALS", "configure_logging", "service_process", "single_threaded_blas",
           "exit_now"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # httpx logs every request URL at INFO: audio_url and webhook_url are client data
    # (presigned URLs carry credentials) and must not outlive their transcript in logs.
    quiet = logging.INFO if settings.log_level == "DEBUG" else logging.WARNING
    for noisy in ("aiokafka", "faust", "mode", "kafka", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(quiet)


def single_threaded_blas() -> None:
    """One OpenBLAS thread for numpy and scipy in this process (an operator's own
    ``OPENBLAS_NUM_THREADS`` stands).

    Their matrix products here are small (Whisper's mel filters, clustering), and with a
    thread per core OpenBLAS's worker spins after each one: with 10 live sessions on 2
    cores that thread took 37% of a core from the decodes. The models run on their own
    runtimes' threads (CTranslate2, ONNX Runtime, torch), which this leaves alone.
    OpenBLAS reads the variable when it loads; one already loaded is limited in place.
    """
    wanted = os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if wanted.isdigit() and ("numpy" in sys.modules or "scipy" in sys.modules):
        from threadpoolctl import ThreadpoolController
        ThreadpoolController().limit(limits=int(wanted), user_api="blas")


@contextlib.contextmanager
def service_process(settings: Settings, pidfile: str
                    ) -> Iterator[tuple[Context, asyncio.AbstractEventLoop]]:
    """A started :class:`Context` on a fresh event loop, with ``run/<pidfile>`` written.

    Worker pidfiles carry the pid: several workers may share a data directory, and the
    supervisor of ``a5s up`` spots one that died without leaving its group.
    """
    configure_logging(settings)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    single_threaded_blas()
    if settings.embedded_kafka:
        pace_empty_fetches()
    settings.data_path.mkdir(parents=True, exist_ok=True)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    ctx = Context.build(settings)
    loop.run_until_complete(ensure_topics(settings))
    loop.run_until_complete(ctx.start())
    path = settings.data_path / "run" / pidfile
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(os.getpid()))
    try:
        yield ctx, loop
    finally:
        if loop.is_closed():  # the Faust worker closes the loop it ran on
            ctx.ch.close_now()
        else:
            with contextlib.suppress(Exception):
                loop.run_until_complete(ctx.close())
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def exit_now(code: int) -> NoReturn:
    """Ends a service process that has stopped in order (offsets committed, ClickHouse's
    files flushed, the pidfile removed) without the interpreter's teardown: freeing the
    models' and chdb's objects and a last collection of their heap took 2 s of every stop
    and restart."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
