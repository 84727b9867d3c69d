"""``python -m pipeline [--data-dir DIR]``: one pipeline worker alone.

What ``a5s worker`` runs, for deployments that start each role as its own process
(settings from ``A5S_*`` variables and ``$A5S_CONFIG``, as everywhere). The engine
settings are checked before anything starts.
"""

from __future__ import annotations

import argparse

from schemas.settings import SettingsError, load_settings
from stores.process import exit_now

from .worker import run, startup_check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="data directory (default $A5S_DATA_DIR or ./a5s-data)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.data_dir)
        startup_check(settings)
    except (SettingsError, FileNotFoundError) as exc:
        parser.exit(1, f"{parser.prog}: {exc}\n")
    return run(settings)


if __name__ == "__main__":
    exit_now(main())
