"""build_solution outcomes and BuildPool behaviour, including recovery from a build process that dies."""

from __future__ import annotations

import os
import textwrap

import pytest

from cudaperf.toolchain import pool as pool_module
from cudaperf.toolchain.pool import BuildPool, build_solution
from cudaperf.types import BuildResult, Outcome, Solution, SolutionFormat

FAST_OK = textwrap.dedent('''
    from cudaperf import cuda
    SRC = """extern "C" __global__ void add(const float* a, float* o, int n) {
        int i = threadIdx.x; if (i < n) o[i] = a[i]; }"""
    class ModelNew:
        def __init__(self):
            self.k = cuda.compile(SRC, "add")
''')
FAST_BROKEN = textwrap.dedent('''
    from cudaperf import cuda
    k = cuda.compile('extern "C" __global__ void add(float* o) { o[0] = missing_symbol; }', "add")
''')
FAST_UNRESOLVED = textwrap.dedent('''
    from cudaperf import cuda
    def make(src):
        return cuda.compile(src, "add")
''')
INLINE = textwrap.dedent('''
    from torch.utils.cpp_extension import load_inline
    ext = load_inline(name="ext", cpp_sources="int f();", cuda_sources="int f() { return 1; }",
                      functions=["f"])
''')


def _solution(source: str, fmt: SolutionFormat = SolutionFormat.FAST, sid: str = "s") -> Solution:
    return Solution(solution_id=sid, source=source, format=fmt)


def test_fast_solution_builds_with_resources(tmp_path):
    r = build_solution(_solution(FAST_OK), arch="sm_90", cache_dir=str(tmp_path))
    assert (r.ok, r.outcome, r.units) == (True, Outcome.CORRECT, 1) and r.resources[0].kernel == "add"


def test_second_build_hits_the_cache(tmp_path):
    build_solution(_solution(FAST_OK), cache_dir=str(tmp_path))
    assert build_solution(_solution(FAST_OK), cache_dir=str(tmp_path)).cache_hits == 1


def test_compile_failure_is_compile_error_with_log(tmp_path):
    r = build_solution(_solution(FAST_BROKEN), cache_dir=str(tmp_path))
    assert (r.ok, r.outcome) == (False, Outcome.COMPILE_ERROR) and "missing_symbol" in r.log


def test_syntax_error_is_reported_with_line(tmp_path):
    r = build_solution(_solution("x = (\n"), cache_dir=str(tmp_path))
    assert r.outcome is Outcome.SYNTAX_ERROR and r.message.startswith("line ")


def test_unresolvable_unit_still_builds_ok_with_a_message(tmp_path):
    r = build_solution(_solution(FAST_UNRESOLVED), cache_dir=str(tmp_path))
    assert (r.ok, r.units) == (True, 0) and "not prebuilt" in r.message and "parameter" in r.message


def test_pure_pytorch_solution_builds_nothing(tmp_path):
    r = build_solution(_solution("import torch\n", SolutionFormat.PYTORCH), cache_dir=str(tmp_path))
    assert (r.ok, r.units, r.format) == (True, 0, SolutionFormat.PYTORCH)


def test_inline_on_cpu_torch_is_skipped_with_reason(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None:
        pytest.skip("this torch has CUDA: the inline build really runs (tests/gpu)")
    r = build_solution(_solution(INLINE, SolutionFormat.INLINE), cache_dir=str(tmp_path))
    assert r.outcome is Outcome.SKIPPED and "no CUDA" in r.message


def test_plain_cuda_c_is_skipped_with_reason(tmp_path):
    r = build_solution(_solution("__global__ void k() {}", SolutionFormat.CUDA_C), cache_dir=str(tmp_path))
    assert r.outcome is Outcome.SKIPPED and "C-task runner" in r.message


def test_internal_error_is_a_harness_error_value(tmp_path, monkeypatch):
    def explode(source):
        raise RuntimeError("boom")

    monkeypatch.setattr(pool_module, "extract_units", explode)
    r = build_solution(_solution(FAST_OK), cache_dir=str(tmp_path))
    assert r.outcome is Outcome.HARNESS_ERROR and "boom" in r.log


# ---- the pool ---------------------------------------------------------------------------------


def crash_on_request(solution: Solution, *, arch: str, cache_dir: str | None) -> BuildResult:
    """Test-only build function (module level so spawned workers can import it): a solution whose id
    starts with "crash" kills its build process, as a segfault in a compiler library would."""
    if solution.solution_id.startswith("crash"):
        os._exit(139)
    return build_solution(solution, arch=arch, cache_dir=cache_dir)


def test_pool_futures_resolve_to_build_results(tmp_path):
    with BuildPool(2) as pool:
        results = list(pool.map([_solution(FAST_OK, sid="a"), _solution(FAST_BROKEN, sid="b")],
                                arch="sm_90", cache_dir=str(tmp_path)))
    assert [r.outcome for r in results] == [Outcome.CORRECT, Outcome.COMPILE_ERROR]


def test_crashing_build_is_compile_error_and_the_others_still_build(tmp_path):
    solutions = [_solution(FAST_OK, sid="ok-1"), _solution(FAST_OK, sid="crash"),
                 _solution(FAST_OK, sid="ok-2")]
    with BuildPool(2, build_fn=crash_on_request) as pool:
        results = {s.solution_id: pool.submit(s, cache_dir=str(tmp_path)).result(timeout=120)
                   for s in solutions}
    assert results["crash"].outcome is Outcome.COMPILE_ERROR and "died" in results["crash"].message
    assert results["ok-1"].outcome is results["ok-2"].outcome is Outcome.CORRECT


def test_pool_keeps_working_after_a_crash(tmp_path):
    with BuildPool(1, build_fn=crash_on_request) as pool:
        pool.submit(_solution(FAST_OK, sid="crash"), cache_dir=str(tmp_path)).result(timeout=120)
        after = pool.submit(_solution(FAST_OK, sid="fine"), cache_dir=str(tmp_path)).result(timeout=120)
    assert after.outcome is Outcome.CORRECT


def test_submit_after_close_is_refused():
    pool = BuildPool(1)
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(_solution(FAST_OK))


@pytest.mark.parametrize("call", ['cuda.compile(SRC, "add")', 'cuda.load(SRC)',
                                  'cuda.compile(TPL, "scale<float>")',
                                  'cuda.compile(SRC, "add", options=("-use_fast_math",))'])
def test_pool_build_fills_the_entry_the_helper_looks_up(tmp_path, monkeypatch, call):
    src = (f'extern "C" __global__ void add(float* o) {{ o[0] = {len(call)}.f; }}  '
           '__global__ void cpp(float* o) {}')
    tpl = "template <typename T> __global__ void scale(T* x, T a) { x[0] *= a; }"
    solution = f"from cudaperf import cuda\nSRC = '{src}'\nTPL = '{tpl}'\nk = {call}\n"
    assert build_solution(_solution(solution), arch="sm_90", cache_dir=str(tmp_path)).ok
    monkeypatch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path))
    from cudaperf import cuda

    helper = eval(call, {"cuda": cuda, "SRC": src, "TPL": tpl}, {})  # the same call the solution makes
    assert helper.output.cache_hit


def test_submit_call_runs_another_function_in_a_pool_process():
    with BuildPool(1) as pool:
        child_pid = pool.submit_call(os.getpid).result(timeout=120)
    assert child_pid != os.getpid()
