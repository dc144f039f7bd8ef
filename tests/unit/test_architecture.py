"""The layering and the absence of import cycles hold (import-linter, contracts in pyproject.toml), every
top-level module of the package has its place in the layers, and ruff's rules (the line length among them)
hold over the tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "cudaperf"


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers" and "containers" not in c]
    return contract["layers"]


def test_every_top_level_module_has_a_layer():
    named = {m.strip("() ") for layer in _layers() for m in layer.split("|")}
    found = {f"cudaperf.{p.stem}" for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert found - named == set(), "add these to a layer in pyproject.toml [tool.importlinter]"


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter is in the dev extra")
def test_import_contracts_are_kept():
    proc = subprocess.run(["lint-imports", "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False, env={"PYTHONPATH": str(ROOT / "src"), "PATH": _path()})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def _path() -> str:
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is in the dev extra")
def test_ruff_rules_and_line_length_hold():
    proc = subprocess.run(["ruff", "check", "src", "tests", "scripts", "benchmarks", "dev"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
