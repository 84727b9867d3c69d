#!/usr/bin/env bash
# Install a5s and what its tests need, on a fresh Debian machine or in CI.
# Everything goes into ./.venv; the browser tests use Debian's chromium and chromedriver.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install torch==2.13.0           # the CPU build; an unpinned torch pulls CUDA
.venv/bin/pip install -e '.[test]'
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "note: install chromium and chromium-driver for the browser tests" >&2
  fi
fi
