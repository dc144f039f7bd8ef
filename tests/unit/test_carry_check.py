"""`check_carry_folders` (scripts/carry.sh): the bytes a device call would carry beside the working tree,
for one folder and for several carried together in one call (real bash, a real git repository; the
headroom raised so that megabytes stand for the 64-MiB limit)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

CARRY_SH = Path(__file__).resolve().parents[2] / "scripts" / "carry.sh"
HEADROOM_MIB = 64 - 3  # a limit of 3 MiB: one 2-MiB folder fits, two together do not


def check(repo: Path, *carries: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f'source "{CARRY_SH}"; check_carry_folders "$@"', "check", *carries],
                          cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "CARRY_HEADROOM_MIB": str(HEADROOM_MIB)})


def repo_with_folders(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/a/\n/b/\n")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "part").write_bytes(b"\0" * (2 << 20))
    return tmp_path


def test_one_folder_that_fits_beside_the_tree_passes(tmp_path):
    assert check(repo_with_folders(tmp_path), "a").returncode == 0


def test_folders_carried_together_are_counted_together(tmp_path):
    result = check(repo_with_folders(tmp_path), "a b")
    assert result.returncode == 1 and "too large for one call" in result.stderr
