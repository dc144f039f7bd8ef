"""load_inline prebuild plumbing that runs without a CUDA torch: directories, environment, capture."""

from __future__ import annotations

import os

import pytest

from cudaperf.toolchain import inline
from cudaperf.toolchain.extract import extract_units
from cudaperf.types import Outcome, Solution, SolutionFormat

SOURCE = (
    "from torch.utils.cpp_extension import load_inline\n"
    "ext = load_inline(name='e', cpp_sources='int f();', cuda_sources='int f() { return 1; }', "
    "functions=['f'])\n"
)


def _solution(source: str = SOURCE) -> Solution:
    return Solution(solution_id="s", source=source, format=SolutionFormat.INLINE)


def test_extensions_dir_is_content_addressed_under_the_cache(tmp_path):
    a, b = inline.extensions_dir_for(_solution(), tmp_path), inline.extensions_dir_for(_solution(), tmp_path)
    assert a == b and a.parent == tmp_path / "torch_extensions"


def test_extensions_dir_differs_per_solution_text(tmp_path):
    assert (inline.extensions_dir_for(_solution(), tmp_path)
            != inline.extensions_dir_for(_solution(SOURCE + "#"), tmp_path))


@pytest.mark.parametrize(("arch", "expected"), [("sm_90", "9.0+PTX"), ("sm_90a", "9.0a"),
                                                ("sm_80", "8.0+PTX"), ("sm_100", "10.0+PTX"),
                                                ("sm_120a", "12.0a")])
def test_torch_arch_list_from_sm_name(arch, expected):
    assert inline.torch_arch_list(arch) == expected


def test_worker_env_reads_back_what_the_build_used(tmp_path):
    (tmp_path / inline.ENV_FILE).write_text('{"TORCH_CUDA_ARCH_LIST": "9.0+PTX"}')
    assert inline.worker_env(tmp_path) == {"TORCH_CUDA_ARCH_LIST": "9.0+PTX",
                                           "TORCH_EXTENSIONS_DIR": str(tmp_path)}


def test_worker_env_without_a_build_names_only_the_directory(tmp_path):
    assert inline.worker_env(tmp_path) == {"TORCH_EXTENSIONS_DIR": str(tmp_path)}


def test_no_inline_units_is_ok_without_building(tmp_path):
    r = inline.build_inline([], solution=_solution(), arch="sm_90", cache_dir=tmp_path)
    assert r.ok and "no load_inline" in r.message


def test_cpu_torch_gives_skipped_with_reason(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None:
        pytest.skip("CUDA torch: the real build is tested in tests/gpu")
    r = inline.build_inline(extract_units(SOURCE), solution=_solution(), arch="sm_90", cache_dir=tmp_path)
    assert (r.ok, r.outcome) == (False, Outcome.SKIPPED) and torch.__version__ in r.message


def test_output_of_subprocesses_is_captured_at_fd_level():
    with inline._captured_output() as captured:
        os.system("echo from-a-child-process")
    assert captured.text == "from-a-child-process"


def test_environment_is_restored_after_the_build():
    before = os.environ.get("TORCH_CUDA_ARCH_LIST")
    with inline._environ({"TORCH_CUDA_ARCH_LIST": "1.0"}):
        inside = os.environ["TORCH_CUDA_ARCH_LIST"]
    assert (inside, os.environ.get("TORCH_CUDA_ARCH_LIST")) == ("1.0", before)


def test_torch_internals_the_build_relies_on_still_exist():
    cpp_extension = pytest.importorskip("torch.utils.cpp_extension")
    assert isinstance(cpp_extension.JIT_EXTENSION_VERSIONER.entries, dict)
    assert callable(cpp_extension._import_module_from_library)


def test_versioner_reset_forgets_earlier_builds_of_the_same_name():
    cpp_extension = pytest.importorskip("torch.utils.cpp_extension")
    cpp_extension.JIT_EXTENSION_VERSIONER.entries["elementwise_add"] = object()
    inline._reset_versioner(cpp_extension)
    assert "elementwise_add" not in cpp_extension.JIT_EXTENSION_VERSIONER.entries
