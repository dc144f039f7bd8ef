"""scripts/kept_adapters.sh: an adapter kept in the repository's history comes back byte for byte from a
later checkout whose tree no longer holds it (real bash and git, in a scratch repository with a copy of
the script)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kept_adapters.sh"
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/kept_adapters.sh", *args], cwd=repo, capture_output=True,
                          text=True, env=GIT_ENV)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "scripts")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "start"], cwd=root, check=True, env=GIT_ENV)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 16}')
    (adapter / "adapter_model.safetensors").write_bytes(os.urandom(4096))
    return root, adapter


def test_a_kept_adapter_leaves_the_tree_and_comes_back_from_a_fresh_clone(repo, tmp_path):
    root, adapter = repo
    assert run(root, "keep", "sft@x", str(adapter), "a test adapter").returncode == 0
    assert not list((root / "benchmarks" / "kept-adapters").glob("*.tgz"))
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    result = run(clone, "restore", "sft@x", str(tmp_path / "back"))
    assert result.returncode == 0, result.stderr
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (tmp_path / "back" / name).read_bytes() == (adapter / name).read_bytes()


def test_a_name_kept_twice_is_refused(repo):
    root, adapter = repo
    run(root, "keep", "a", str(adapter))
    result = run(root, "keep", "a", str(adapter))
    assert result.returncode == 2 and "kept already" in result.stderr


def test_a_folder_without_an_adapter_is_refused(repo, tmp_path):
    root, _ = repo
    result = run(root, "keep", "a", str(tmp_path))
    assert result.returncode == 2 and "no adapter_config.json" in result.stderr
