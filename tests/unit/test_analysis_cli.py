"""Smoke test of `cudaperf analyze`: the real entry point on a small .cu file."""

from __future__ import annotations

import json

from cudaperf.cli import main

SRC = 'extern "C" __global__ void k(const float* a, float* out, int n) {\n' \
      '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i * n] = a[i];\n}\n'


def test_analyze_prints_feedback_text(tmp_path, capsys):
    path = tmp_path / "k.cu"
    path.write_text(SRC)
    assert main(["analyze", str(path), "--format", "text", "--no-compile", "--size", "n=1<<10"]) == 0
    assert "line 3: store to out strided by n along threadIdx.x — uncoalesced" in capsys.readouterr().out


def test_analyze_prints_features_as_json(tmp_path, capsys):
    path = tmp_path / "k.cu"
    path.write_text(SRC)
    assert main(["analyze", str(path), "--no-compile", "--block", "128"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kernels"][0]["kernel"] == "k" and data["details"][0]["launch"]["block"] == [128, 1, 1]


def test_missing_file_is_exit_code_two(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "absent.cu")]) == 2
