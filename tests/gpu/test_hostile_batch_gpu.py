"""A hostile batch on the GPU through the real command line (benchmarks/hostile_batch.py, marker `gpu`):
kernels writing NaN, infinities, 1e38 and denormals, one writing through a NULL pointer (its worker is
replaced), one raising, among the honest example solutions. Run:
    python3 -m pytest -q -s tests/gpu/test_hostile_batch_gpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from hostile_batch import run

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    return run(tmp_path_factory.mktemp("hostile"), device="cuda", baselines="eager")


@pytest.mark.parametrize("check", ["batch exits 0", "every candidate has a stored row",
                                   "no HARNESS_ERROR row", "honest ones CORRECT", "hostile ones not CORRECT",
                                   "report reads the file"])
def test_the_hostile_batch_holds(summary, check):
    assert summary["checks"][check], (summary["outcomes"], summary["batch_stderr_tail"])


def test_the_null_pointer_write_is_a_cuda_error(summary):
    assert summary["outcomes"]["relu__null_write"] == "cuda_error", summary["outcomes"]
