"""NVRTC compiles for real (no GPU needed) and the content-addressed cache behaves under reuse and races."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest

from cudaperf.toolchain.nvrtc import CompileError, cache_key, compile_cuda

ADD = ('extern "C" __global__ void add(const float* a, float* o, int n) '
       '{ int i = threadIdx.x; if (i < n) o[i] = a[i]; }')
TEMPLATE = "template <typename T> __global__ void scale(T* x, T a) { x[threadIdx.x] *= a; }"


def test_first_compile_misses_and_second_hits(tmp_path):
    first = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path)
    second = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path)
    assert (first.cache_hit, second.cache_hit) == (False, True)


def test_cache_hit_returns_the_same_cubin_resources_and_log(tmp_path):
    first = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path)
    second = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path)
    assert (second.cubin, second.resources, second.log) == (first.cubin, first.resources, first.log)


def test_cache_entry_is_a_cubin_and_a_json_named_by_key(tmp_path):
    out = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path)
    assert sorted(p.name for p in (tmp_path / "nvrtc").iterdir()) == [f"{out.key}.cubin", f"{out.key}.json"]


def test_lowered_names_survive_the_cache(tmp_path):
    compile_cuda(TEMPLATE, arch="sm_90", name_expressions=("scale<float>",), cache_dir=tmp_path)
    hit = compile_cuda(TEMPLATE, arch="sm_90", name_expressions=("scale<float>",), cache_dir=tmp_path)
    assert hit.cache_hit and hit.lowered_names == {"scale<float>": "_Z5scaleIfEvPT_S0_"}


def test_key_depends_on_every_input():
    base = {"arch": "sm_90", "options": (), "name_expressions": ()}
    keys = {
        cache_key(ADD, **base),
        cache_key(ADD + " ", **base),
        cache_key(ADD, **{**base, "arch": "sm_80"}),
        cache_key(ADD, **{**base, "options": ("-use_fast_math",)}),
        cache_key(ADD, **{**base, "name_expressions": ("add",)}),
    }
    assert len(keys) == 5


def test_key_ignores_name_expression_order():
    a = cache_key(ADD, arch="sm_90", options=(), name_expressions=("a", "b"))
    assert a == cache_key(ADD, arch="sm_90", options=(), name_expressions=("b", "a"))


def test_resources_are_parsed_from_the_nvrtc_log(tmp_path):
    (r,) = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path).resources
    assert (r.kernel, r.arch) == ("add", "sm_90") and r.registers > 0


def test_compile_error_has_the_log_and_is_not_cached(tmp_path):
    with pytest.raises(CompileError) as info:
        compile_cuda('extern "C" __global__ void k() { nope(); }', arch="sm_90", cache_dir=tmp_path)
    assert "nope" in info.value.log and not (tmp_path / "nvrtc").exists()


def test_compile_error_pickles_with_its_log():
    err = pickle.loads(pickle.dumps(CompileError("kernel.cu(1): error")))
    assert err.log == "kernel.cu(1): error"


def test_bad_name_expression_is_a_compile_error(tmp_path):
    with pytest.raises(CompileError, match="name expression"):
        compile_cuda(TEMPLATE, arch="sm_90", name_expressions=("missing<int>",), cache_dir=tmp_path)


def test_corrupted_cubin_reads_as_miss_and_is_rewritten(tmp_path):
    out = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path)
    (tmp_path / "nvrtc" / f"{out.key}.cubin").write_bytes(b"garbage")
    again = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path)
    assert not again.cache_hit and (tmp_path / "nvrtc" / f"{out.key}.cubin").read_bytes() == out.cubin


def _compile_in_child(cache_dir: str, barrier) -> tuple[str, int]:
    barrier.wait(timeout=60)
    out = compile_cuda(ADD, arch="sm_90", cache_dir=cache_dir)
    return out.key, len(out.cubin)


def test_two_processes_compiling_the_same_key_leave_one_valid_entry(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(2)
        with ctx.Pool(2) as pool:
            results = pool.starmap(_compile_in_child, [(str(tmp_path), barrier)] * 2)
    (key, size), = set(results)
    files = sorted(p.name for p in (tmp_path / "nvrtc").iterdir())
    hit = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path)
    assert files == [f"{key}.cubin", f"{key}.json"] and hit.cache_hit and len(hit.cubin) == size


EMPTY_LOG_CHILD = """
from cuda.bindings import nvrtc
from cudaperf.toolchain.nvrtc import _program_log
err, prog = nvrtc.nvrtcCreateProgram(b'extern "C" __global__ void k(float* a) { a[0] = 1; }', b'k.cu', 0,
                                     [], [])
nvrtc.nvrtcCompileProgram(prog, 1, [b'--gpu-architecture=sm_90'])  # no -v: the log is empty (size 1)
assert _program_log(nvrtc, prog) == ''
print(list(b' '), 'a', 'b')
"""


def test_reading_an_empty_nvrtc_log_leaves_the_interpreter_intact():
    """An empty log has size 1 (its NUL). Reading it into `b" " * 1` let NVRTC write that NUL into CPython's
    shared one-byte `b" "`, after which every printed space was a NUL. Run in a child: a regression must
    not corrupt the test process."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", EMPTY_LOG_CHILD], capture_output=True, text=True,
                          check=False, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "[32] a b\n"), proc.stderr[-2000:]


def test_resources_come_from_ptxas_when_the_nvrtc_log_has_none(tmp_path, monkeypatch):
    """Some NVRTC builds return an empty log despite `--ptxas-options=-v` (the H200 machine's): the
    report then comes from the toolkit's ptxas on NVRTC's PTX or, where that ptxas is older than NVRTC
    and refuses its PTX, from cuobjdump on the cubin; registers are known either way."""
    from cudaperf.toolchain import nvrtc as mod

    if mod.find_ptxas() is None:
        pytest.skip("no ptxas on this machine")
    real = mod._program_log
    monkeypatch.setattr(mod, "_program_log", lambda nvrtc, prog: "" if "ptxas" in real(nvrtc, prog) else "")
    out = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path, use_cache=False)
    assert [(r.kernel, r.registers > 0) for r in out.resources] == [("add", True)]


def test_ptxas_fallback_keeps_the_register_cap():
    from cudaperf.toolchain.nvrtc import _ptxas_flags

    assert _ptxas_flags(("-maxrregcount=32", "--ptxas-options=-v", "-use_fast_math")) == ["--maxrregcount=32"]


def test_an_entry_cached_without_the_fallback_is_completed_by_a_caller_that_wants_resources(tmp_path,
                                                                                           monkeypatch):
    """Candidate code compiles with `report_resources=False` (no files or child processes in a sandbox);
    the analyser's later compile of the same source still gets registers, from the same cache entry."""
    from cudaperf.toolchain import nvrtc as mod

    if mod.find_ptxas() is None:
        pytest.skip("no ptxas on this machine")
    monkeypatch.setattr(mod, "_program_log", lambda nvrtc, prog: "")
    launched = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path, report_resources=False)
    analysed = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path)
    assert (launched.resources, [r.kernel for r in analysed.resources],
            analysed.cache_hit) == ((), ["add"], True)


def test_resources_come_from_cuobjdump_when_ptxas_gives_none(tmp_path, monkeypatch):
    """ptxas older than NVRTC ("Unsupported .version"): the cubin's own resource table is read."""
    from cudaperf.toolchain import nvrtc as mod
    from cudaperf.toolchain.ptxas import find_cuobjdump

    if find_cuobjdump() is None:
        pytest.skip("no cuobjdump on this machine")
    real = mod._program_log
    monkeypatch.setattr(mod, "_program_log", lambda nvrtc, prog: "" if "ptxas" in real(nvrtc, prog) else "")
    monkeypatch.setattr(mod, "ptxas_report",
                        lambda *a: "note: no ptxas report (ptxas failed: Unsupported .version)")
    out = compile_cuda(ADD, arch="sm_90", cache_dir=tmp_path, use_cache=False)
    assert [(r.kernel, r.registers > 0) for r in out.resources] == [("add", True)]


def test_cache_entries_are_readable_by_other_users(tmp_path):
    from cudaperf.toolchain.cache import atomic_write

    atomic_write(tmp_path / "entry.cubin", b"x")
    assert (tmp_path / "entry.cubin").stat().st_mode & 0o777 == 0o644
