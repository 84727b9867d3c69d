"""``python -m gateway [--data-dir DIR]``: the REST and WebSocket gateway alone.

What ``a5s gateway`` runs, for deployments that start each role as its own process
(settings from ``A5S_*`` variables and ``$A5S_CONFIG``, as everywhere).
"""

from __future__ import annotations

import argparse

from schemas.settings import SettingsError, load_settings
from stores.process import exit_now

from .serve import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="data directory (default $A5S_DATA_DIR or ./a5s-data)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.data_dir)
    except SettingsError as exc:
        parser.exit(1, f"{parser.prog}: {exc}\n")
    return run(settings)


if __name__ == "__main__":
    exit_now(main())
