"""Benchmarks: accuracy, speed and memory figures of the models and the service.

Run from the repository root, e.g. ``python -m bench.pipeline --asterisk16 600 --accounts 8``.
Not part of the installed package and imported by no test; scoring they share with the
tests lives in :mod:`evaluation`.

A benchmark stopped with SIGTERM (``kill``, ``timeout``) exits as on Ctrl-C, through its
``finally`` blocks: the stacks it starts run in sessions of their own, and would otherwise
be left running, taking CPU from whatever is measured next.
"""

import os
import signal
import sys
import threading

__all__ = ["load_average"]


def load_average() -> str:
    """The host's 1, 5 and 15 minute load averages, for the figures' context."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _exit_on_sigterm(signum: int, frame: object) -> None:
    sys.exit(128 + signum)


if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
