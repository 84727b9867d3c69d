"""A service process runs numpy's and scipy's OpenBLAS on one thread (stores.process).

Each case runs in a fresh interpreter: OpenBLAS reads its thread count when it loads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ops.stack import REPO

CHECK = """
import json
{before}
from stores.process import single_threaded_blas
single_threaded_blas()
import numpy, scipy.linalg
from threadpoolctl import threadpool_info
print(json.dumps([i["num_threads"] for i in threadpool_info() if i["internal_api"] == "openblas"]))
"""


def _openblas_threads(before: str, **env: str) -> list[int]:
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", CHECK.format(before=before)], cwd=REPO,
                         env={**clean, **env}, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("before", ["", "import numpy, scipy.linalg"],
                         ids=["set before numpy loads", "limited after numpy loaded"])
def test_openblas_runs_one_thread(before: str) -> None:
    threads = _openblas_threads(before)
    assert len(threads) >= 2  # numpy's OpenBLAS and scipy's
    assert set(threads) == {1}


def test_the_operators_setting_stands() -> None:
    two = min(2, os.cpu_count() or 1)  # OpenBLAS takes no more threads than cores
    assert set(_openblas_threads("import numpy", OPENBLAS_NUM_THREADS="2")) == {two}
    assert set(_openblas_threads("", OPENBLAS_NUM_THREADS="2")) == {two}
