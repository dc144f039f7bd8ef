"""AST extraction of CUDA units and format detection: aliases, constant resolution, what stays unresolved."""

from __future__ import annotations

import textwrap

from cudaperf.toolchain.extract import INLINE, NVRTC, detect_format, extract_units
from cudaperf.types import SolutionFormat

ADD = 'extern "C" __global__ void add(const float* a, float* o, int n) { o[0] = a[0]; }'


def _units(src: str):
    return extract_units(textwrap.dedent(src))


def _one(src: str):
    (unit,) = _units(src)
    return unit


def test_from_cudaperf_import_cuda_call_is_found():
    u = _one(f"""
        from cudaperf import cuda
        k = cuda.compile('{ADD}', "add")
    """)
    assert (u.kind, u.resolved, u.source, u.names) == (NVRTC, True, ADD, ("add",))


def test_module_alias_is_followed():
    u = _one(f"""
        import cudaperf.cuda as cc
        k = cc.compile('{ADD}', "add")
    """)
    assert u.resolved and u.source == ADD


def test_dotted_module_path_is_followed():
    u = _one(f"""
        import cudaperf.cuda
        k = cudaperf.cuda.load('{ADD}')
    """)
    assert u.resolved and u.names is None


def test_imported_function_alias_is_followed():
    u = _one(f"""
        from cudaperf.cuda import compile as build_kernel
        k = build_kernel('{ADD}', "add")
    """)
    assert u.resolved and u.names == ("add",)


def test_unrelated_compile_call_is_ignored():
    assert _units("""
        import re
        pattern = re.compile("x+")
        code = compile("1", "f", "eval")
    """) == []


def test_module_constant_with_implicit_concatenation_and_plus_resolves():
    u = _one("""
        from cudaperf import cuda
        HEAD = '#define N 4\\n'
        SRC = HEAD + 'extern "C" __global__ ' 'void k(float* x) { x[0] = N; }'
        k = cuda.compile(SRC, "k")
    """)
    assert u.source == '#define N 4\nextern "C" __global__ void k(float* x) { x[0] = N; }'


def test_f_string_without_placeholders_resolves():
    u = _one("""
        from cudaperf import cuda
        k = cuda.compile(f'extern "C" __global__ void k(float* x) {{ x[0] = 1; }}', "k")
    """)
    assert u.source == 'extern "C" __global__ void k(float* x) { x[0] = 1; }'


def test_f_string_over_module_constants_resolves():
    u = _one("""
        from cudaperf import cuda
        BLOCK = 128
        SRC = f'#define BLOCK {BLOCK}\\n'
        k = cuda.compile(SRC, "k")
    """)
    assert u.source == "#define BLOCK 128\n"


def test_augmented_assignment_of_constants_resolves():
    u = _one("""
        from cudaperf import cuda
        SRC = 'a'
        SRC += 'b'
        k = cuda.compile(SRC, "k")
    """)
    assert u.source == "ab"


def test_join_and_dedent_of_constants_resolve():
    u = _one("""
        import textwrap
        from cudaperf import cuda
        PARTS = ['x', 'y']
        k = cuda.compile(textwrap.dedent("\\n".join(PARTS)), "k")
    """)
    assert u.source == "x\ny"


def test_local_constant_in_method_resolves():
    u = _one(f"""
        from cudaperf import cuda
        class ModelNew:
            def __init__(self):
                src = '{ADD}'
                self.k = cuda.compile(src, "add")
    """)
    assert u.resolved and u.source == ADD


def test_options_list_and_arch_are_captured():
    u = _one(f"""
        from cudaperf import cuda
        OPTS = ['-use_fast_math', '-DTILE=16']
        k = cuda.compile('{ADD}', "add", options=OPTS, arch="sm_90a")
    """)
    assert (u.options, u.arch) == (("-use_fast_math", "-DTILE=16"), "sm_90a")


def test_single_string_option_is_one_option():
    u = _one(f"""
        from cudaperf import cuda
        k = cuda.compile('{ADD}', "add", options="-use_fast_math")
    """)
    assert u.options == ("-use_fast_math",)


def test_template_name_becomes_a_name_expression():
    u = _one("""
        from cudaperf import cuda
        SRC = 'template <typename T> __global__ void scale(T* x, T a) {}'
        k = cuda.compile(SRC, "scale<float>")
    """)
    assert u.name_expressions == ("scale<float>",)


def test_cpp_linkage_kernel_in_load_becomes_a_name_expression():
    u = _one("""
        from cudaperf import cuda
        m = cuda.load('__global__ void k(float* x) {}  extern "C" __global__ void c(float* x) {}')
    """)
    assert u.name_expressions == ("k",)


def test_function_parameter_is_unresolved_with_reason():
    u = _one("""
        from cudaperf import cuda
        SRC = 'module level'
        def make(SRC):
            return cuda.compile(SRC, "k")
    """)
    assert not u.resolved and "parameter" in u.message


def test_name_assigned_in_a_loop_is_unresolved():
    u = _one("""
        from cudaperf import cuda
        for i in range(2):
            SRC = 'x'
        k = cuda.compile(SRC, "k")
    """)
    assert not u.resolved and "for" in u.message


def test_name_assigned_in_a_branch_is_unresolved():
    u = _one("""
        from cudaperf import cuda
        SRC = 'a'
        if FLAG:
            SRC = 'b'
        k = cuda.compile(SRC, "k")
    """)
    assert not u.resolved


def test_local_assigned_after_the_call_is_unresolved_even_if_module_has_it():
    u = _one("""
        from cudaperf import cuda
        SRC = 'module'
        def f():
            k = cuda.compile(SRC, "k")
            SRC = 'local'
    """)
    assert not u.resolved


def test_runtime_value_is_unresolved():
    u = _one("""
        from cudaperf import cuda
        import os
        k = cuda.compile(open('k.cu').read(), "k")
    """)
    assert not u.resolved and "call" in u.message


def test_star_kwargs_are_unresolved():
    u = _one("""
        from cudaperf import cuda
        KW = {}
        k = cuda.compile('x', "k", **KW)
    """)
    assert not u.resolved


def test_comprehension_variable_shadows_module_constant():
    (u,) = _units("""
        from cudaperf import cuda
        s = 'module'
        ks = [cuda.compile(s, "k") for s in ['a', 'b']]
    """)
    assert not u.resolved


def test_growth_bomb_is_refused_not_evaluated():
    u = _one("""
        from cudaperf import cuda
        S = 'a' * 1
        S = 'aaaa'
        S = S.replace('a', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')
        S = S.replace('a', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')
        S = S.replace('a', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')
        S = S.replace('a', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')
        S = S.replace('a', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')
        k = cuda.compile(S, "k")
    """)
    assert not u.resolved


def test_load_inline_keyword_call_is_resolved_with_its_arguments():
    u = _one("""
        from torch.utils.cpp_extension import load_inline
        cuda_src = '__global__ void k() {}'
        cpp_src = 'void f();'
        ext = load_inline(name="ext", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["f"],
                          extra_cuda_cflags=["-O3"], verbose=False)
    """)
    assert (u.kind, u.resolved, u.kwargs["functions"], u.kwargs["extra_cuda_cflags"]) == \
        (INLINE, True, ["f"], ["-O3"])


def test_load_inline_positional_arguments_are_kept_positional():
    u = _one("""
        import torch.utils.cpp_extension
        ext = torch.utils.cpp_extension.load_inline("ext", "void f();", "__global__ void k() {}")
    """)
    assert (u.args == ("ext", "void f();", "__global__ void k() {}")
            and u.cuda_source == "__global__ void k() {}")


def test_load_inline_through_module_alias_is_found():
    u = _one("""
        from torch.utils import cpp_extension as ce
        ext = ce.load_inline(name="e", cpp_sources=["a", "b"])
    """)
    assert u.kind == INLINE and u.kwargs["cpp_sources"] == ["a", "b"]


def test_units_are_in_source_order():
    lines = [u.line for u in _units(f"""
        from cudaperf import cuda
        class ModelNew:
            def __init__(self):
                self.a = cuda.compile('{ADD}', "add")
        B = cuda.compile('{ADD}', "add")
    """)]
    assert lines == sorted(lines)


def test_syntax_error_gives_no_units():
    assert extract_units("def f(:\n") == []


def test_detect_format_fast():
    assert detect_format("from cudaperf import cuda\n") is SolutionFormat.FAST


def test_detect_format_inline():
    assert detect_format("from torch.utils.cpp_extension import load_inline\n") is SolutionFormat.INLINE


def test_detect_format_pytorch():
    assert detect_format("import torch\nclass ModelNew(torch.nn.Module): pass\n") is SolutionFormat.PYTORCH


def test_detect_format_plain_cuda_file():
    assert detect_format(ADD + "\nint main() { return 0; }\n") is SolutionFormat.CUDA_C


def test_deeply_nested_expression_is_unresolved_not_a_crash():
    import sys

    terms = " + ".join(['"a"'] * 900)
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default: a library used by an earlier test may have raised it
    try:
        (u,) = extract_units(f"from cudaperf import cuda\nk = cuda.compile({terms}, 'k')\n")
    finally:
        sys.setrecursionlimit(before)
    assert not u.resolved and "deeply" in u.message
