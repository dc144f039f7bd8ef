"""The static anti-cheat policy: each rule fires on the pattern it targets and stays silent on honest code."""

from __future__ import annotations

import textwrap

import pytest

from cudaperf.anticheat.policy import Policy
from cudaperf.anticheat.static import check_source, scan_cuda_text
from cudaperf.types import Severity

HEADER = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from cudaperf import cuda

SRC = r'''
extern "C" __global__ void relu(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
'''
_relu = cuda.compile(SRC, "relu")
"""


def solution(forward_body: str, *, init_body: str = "", prelude: str = "", header: str = HEADER) -> str:
    init = textwrap.indent(textwrap.dedent(init_body), " " * 8)
    body = textwrap.indent(textwrap.dedent(forward_body), " " * 8)
    return (f"{header}\n{textwrap.dedent(prelude)}\n\nclass ModelNew(nn.Module):\n"
            f"    def __init__(self):\n        super().__init__()\n{init}\n"
            f"    def forward(self, x):\n{body}\n")


HONEST_FORWARD = """
y = torch.empty_like(x)
n = x.numel()
_relu(((n + 255) // 256,), (256,), x, y, n)
return y
"""


def errors(source: str, policy: Policy | None = None) -> set[str]:
    return {f.code for f in check_source(source, policy) if f.severity is Severity.ERROR}


def warnings(source: str, policy: Policy | None = None) -> set[str]:
    return {f.code for f in check_source(source, policy) if f.severity is Severity.WARNING}


# -- honest code --------------------------------------------------------------------------------------


def test_honest_fast_solution_has_no_flags():
    assert check_source(solution(HONEST_FORWARD)) == ()


def test_honest_views_shapes_and_allocation_are_allowed():
    body = """
    x = x.contiguous().view(-1, x.shape[-1])
    rows, cols = x.shape
    torch_like = x.new_empty((rows, cols))
    acc = torch.zeros(rows, device=x.device, dtype=x.dtype)
    assert x.is_cuda and x.dtype == torch.float32 and x.data_ptr() % 16 == 0
    stream = torch.cuda.current_stream()
    _relu(((x.numel() + 255) // 256,), (256,), x, torch_like, x.numel(), stream=torch.cuda.current_stream())
    return torch_like.view(rows, cols)
    """
    assert errors(solution(body)) == set()


def test_torch_in_init_is_allowed():
    init = "self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(8))\nself.ln = nn.LayerNorm(8)"
    assert errors(solution(HONEST_FORWARD, init_body=init)) == set()


def test_string_mentioning_torch_matmul_is_not_a_call():
    body = 'note = "torch.matmul would be slower"  # torch.matmul\n' + textwrap.dedent(HONEST_FORWARD)
    assert errors(solution(body)) == set()


def test_copied_reference_model_and_get_inputs_are_not_flagged():
    prelude = """
    class Model(nn.Module):
        def __init__(self):
            super(Model, self).__init__()
        def forward(self, x):
            return torch.relu(x)

    def get_inputs():
        return [torch.randn(10)]

    if __name__ == "__main__":
        print(Model()(torch.randn(4)))
    """
    assert errors(solution(HONEST_FORWARD, prelude=prelude)) == set()


def test_parameter_named_input_is_not_the_builtin():
    src = solution(HONEST_FORWARD).replace("def forward(self, x):",
                                           "def forward(self, input):\n        x = input")
    assert errors(src) == set()


def test_syntax_error_is_one_error_flag():
    flags = check_source("def broken(:\n")
    assert [(f.code, f.severity) for f in flags] == [("syntax_error", Severity.ERROR)]
    assert flags[0].line == 1


def test_flags_carry_source_lines():
    src = solution("return torch.matmul(x, x)")
    (flag,) = [f for f in check_source(src) if f.code == "torch_compute_op"]
    assert src.splitlines()[flag.line - 1].strip() == "return torch.matmul(x, x)"


# -- imports ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["os", "sys", "subprocess", "socket", "ctypes", "gc", "inspect",
                                    "importlib", "builtins", "pickle", "signal", "time", "random",
                                    "cuda.core", "triton", "cudaperf.evaluate",
                                    "torch.utils._python_dispatch"])
def test_forbidden_import(module):
    assert "forbidden_import" in errors(f"import {module}\n")


@pytest.mark.parametrize("line", ["from cudaperf import cuda", "import numpy as np", "import math",
                                  "from torch.utils.cpp_extension import load_inline",
                                  "from typing import Any", "import torch.nn.functional as F",
                                  "from functools import lru_cache"])
def test_allowed_import(line):
    assert errors(line + "\n") == set()


def test_from_import_of_forbidden_module():
    assert "forbidden_import" in errors("from os import environ\n")
    assert "forbidden_import" in errors("from cudaperf import correctness\n")


def test_threading_import_is_thread_created():
    assert "thread_created" in errors("import threading\n")
    assert "thread_created" in errors("from concurrent.futures import ThreadPoolExecutor\n")


def test_star_import():
    assert "star_import" in errors("from torch import *\n")


def test_relative_import():
    assert "forbidden_import" in errors("from . import helper\n")


# -- dynamic code and attributes ----------------------------------------------------------------------


@pytest.mark.parametrize("expr", ["eval('1')", "exec('x = 1')", "compile('1', 'f', 'eval')",
                                  "__import__('os')", "globals()", "locals()", "vars(torch)",
                                  "type('T', (object,), {})"])
def test_dynamic_code(expr):
    assert "dynamic_code" in errors(f"import torch\nvalue = {expr}\n")


def test_cuda_compile_is_not_the_builtin_compile():
    assert "dynamic_code" not in errors(solution(HONEST_FORWARD))


def test_getattr_with_computed_name():
    assert "dynamic_attribute" in errors(solution('return getattr(torch, "mat" + "mul")(x, x)'))


def test_getattr_on_module_with_constant_name():
    assert "dynamic_attribute" in errors(solution('return getattr(torch, "relu")(x)'))


def test_getattr_on_self_with_constant_name_is_fine():
    assert errors(solution('k = getattr(self, "k", None)\n' + textwrap.dedent(HONEST_FORWARD))) == set()


def test_dunder_attribute_access():
    assert "dunder_access" in errors(solution("cls = x.__class__\nreturn x"))
    assert "dunder_access" in errors("import torch\nd = torch.__dict__\n")


def test_dunder_builtins_name():
    assert "dunder_access" in errors("b = __builtins__\n")


def test_super_init_is_fine():
    assert "dunder_access" not in errors(solution(HONEST_FORWARD))


def test_traceback_frame_walk_is_dunder_access():
    body = """
    try:
        raise RuntimeError
    except RuntimeError as e:
        frame = e.__traceback__.tb_frame.f_back
        raise
    """
    assert "dunder_access" in errors(solution(body))


@pytest.mark.parametrize("hook", ["__del__", "__getattr__", "__eq__", "__bool__", "__init_subclass__"])
def test_dunder_hook_definitions(hook):
    src = f"class Out:\n    def {hook}(self, *a):\n        return True\n"
    assert "dunder_definition" in errors(src)


def test_open_is_file_io():
    assert "file_io" in errors(solution("data = open('/tmp/ref.pt', 'rb').read()\nreturn x"))


def test_a_global_module_hook_is_global_torch_state():
    source = ("from torch.nn.modules.module import register_module_forward_pre_hook\n"
              "register_module_forward_pre_hook(lambda m, a: None)\n")
    assert "global_torch_state" in errors(source)


@pytest.mark.parametrize("path", ["numpy.rec.fromfile", "numpy.fromregex", "numpy.lib.npyio.DataSource",
                                  "torch.UntypedStorage.from_file", "torch.package.PackageImporter"])
def test_file_readers_below_a_namespace_are_file_io(path):
    module, _, name = path.rpartition(".")
    assert "file_io" in errors(f"import {module.split('.')[0]}\nx = {path}('/tmp/x')\n")


@pytest.mark.parametrize("call", ["torch.cuda.set_per_process_memory_fraction(0.001)",
                                  "torch.cuda.memory.set_per_process_memory_fraction(0.1)",
                                  "torch.cuda.set_sync_debug_mode('error')",
                                  "torch.cuda.tunable.enable(True)",
                                  "torch.backends.cuda.preferred_linalg_library('magma')",
                                  "torch.backends.cuda.preferred_blas_library('cublaslt')"])
def test_process_wide_cuda_settings_are_global_torch_state(call):
    assert "global_torch_state" in errors(f"import torch\n{call}\n")


def test_reading_the_device_is_not_global_torch_state():
    assert "global_torch_state" not in errors("import torch\np = torch.cuda.get_device_properties(0)\n")


def test_exit_is_process_control():
    assert "process_control" in errors("exit(0)\n")


# -- torch compute in the forward path ----------------------------------------------------------------


@pytest.mark.parametrize("body", ["return torch.matmul(x, x)", "return F.relu(x)", "return x.sum(-1)",
                                  "return torch.nn.functional.softmax(x, -1)", "return x.relu()",
                                  "return torch.Tensor.add(x, x)", "return torch.linalg.norm(x)",
                                  "return x.clone()", "return torch.where(x > 0, x, 0.0)"])
def test_torch_compute_in_forward(body):
    assert "torch_compute_op" in errors(solution(body))


@pytest.mark.parametrize("body", ["return x + 1", "return x @ x", "return -x", "y = x\ny *= 2\nreturn y",
                                  "y = torch.empty_like(x)\nreturn y * 0", "return x[0] > 0"])
def test_operators_on_tensors(body):
    assert "torch_operator" in errors(solution(body))


def test_scalar_arithmetic_is_not_an_operator_on_tensors():
    body = """
    n = x.numel()
    rows, cols = x.shape
    blocks = (n + 255) // 256 * 2 - rows % 3
    last = x.size(-1) * 4
    """
    body = textwrap.dedent(body) + textwrap.dedent(HONEST_FORWARD)
    assert errors(solution(body)) == set()


def test_alias_of_compute_op_at_module_level():
    src = solution("return mm(x, x)", prelude="mm = torch.matmul")
    assert "torch_compute_op" in errors(src)


def test_from_import_alias_of_compute_op():
    src = solution("return matmul(x, x)", prelude="from torch import matmul")
    assert "torch_compute_op" in errors(src)


def test_import_as_alias():
    src = solution("return t.softmax(x, -1)", prelude="import torch as t")
    assert "torch_compute_op" in errors(src)


def test_helper_function_called_from_forward():
    src = solution("return _fallback(x)", prelude="def _fallback(v):\n    return v * 2.0")
    assert "torch_operator" in errors(src)


def test_helper_method_called_from_forward():
    src = solution("return self._slow(x)")
    src += "\n    def _slow(self, v):\n        return v.exp()\n"
    assert "torch_compute_op" in errors(src)


def test_unreached_helper_is_not_checked():
    src = solution(HONEST_FORWARD) + "\n    def reset_parameters(self):\n        nn.init.zeros_(self.w)\n"
    assert errors(src) == set()


def test_torch_module_call_in_forward():
    src = solution("return self.lin(x)", init_body="self.lin = nn.Linear(4, 4)")
    assert "torch_module_call" in errors(src)


def test_torch_module_weight_use_is_fine():
    init = "self.lin = nn.Linear(4, 4)"
    body = "w = self.lin.weight\nb = self.lin.bias.contiguous()\n" + textwrap.dedent(HONEST_FORWARD)
    assert errors(solution(body, init_body=init)) == set()


def test_model_new_inheriting_a_torch_module():
    assert "torch_module_call" in errors("import torch.nn as nn\nclass ModelNew(nn.LayerNorm):\n    pass\n")


def test_reference_model_subclass():
    src = "import torch.nn as nn\nclass Model(nn.Module):\n    pass\nclass ModelNew(Model):\n    pass\n"
    assert "reference_reuse" in errors(src)


def test_reference_model_instantiated_in_forward():
    assert "reference_reuse" in errors(solution("return Model()(x)"))


def test_host_transfer():
    assert "host_transfer" in errors(solution("return torch.from_numpy(x.cpu().numpy())"))
    assert "host_transfer" in errors(solution("return x.to('cpu')"))
    assert "host_transfer" in errors(solution("s = float(x)\nreturn x"))


def test_exception_fallback():
    body = """
    try:
        return self._launch(x)
    except Exception:
        return torch.relu(x)
    """
    assert "exception_fallback" in errors(solution(body))


def test_reraising_except_is_fine():
    body = """
    try:
        y = torch.empty_like(x)
    except RuntimeError as e:
        raise ValueError("bad input") from e
    n = x.numel()
    _relu(((n + 255) // 256,), (256,), x, y, n)
    return y
    """
    assert errors(solution(body)) == set()


def test_allow_torch_ops_turns_off_the_torch_rules():
    src = solution("return torch.relu(x) + 1")
    assert errors(src, Policy(allow_torch_ops=True)) == set()


def test_disabled_rule_is_dropped():
    assert errors(solution("return x + 1"), Policy(disabled_rules=("torch_operator",))) == set()


# -- state, caching, streams, graphs, threads ---------------------------------------------------------


def test_data_ptr_keyed_cache():
    body = """
    key = (x.data_ptr(), x.shape)
    if key in self.cache:
        return self.cache[key]
    """
    body = textwrap.dedent(body) + textwrap.dedent(HONEST_FORWARD)
    assert "identity_cache" in errors(solution(body, init_body="self.cache = {}"))


def test_pointer_alignment_check_is_not_a_cache():
    assert "identity_cache" not in errors(solution("assert x.data_ptr() % 16 == 0\nreturn x"))


def test_forward_state_is_a_warning():
    body = "self.calls = 1\n" + textwrap.dedent(HONEST_FORWARD)
    assert "forward_state" in warnings(solution(body))


def test_stream_creation():
    body = "s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    return x"
    assert "stream_created" in errors(solution(body))


def test_launch_on_explicit_stream():
    body = "y = torch.empty_like(x)\n_relu((1,), (256,), x, y, 1, stream=0)\nreturn y"
    assert "stream_created" in errors(solution(body))


def test_cuda_graph():
    assert "cuda_graph" in errors(solution("g = torch.cuda.CUDAGraph()\nreturn x"))


def test_torch_compile():
    assert "torch_compile" in errors(solution(HONEST_FORWARD,
                                              init_body="self.f = torch.compile(self.forward)"))


# -- monkey patching, reseeding, precision ------------------------------------------------------------


@pytest.mark.parametrize("stmt", ["torch.allclose = lambda *a, **k: True",
                                  "torch.cuda.synchronize = lambda: None",
                                  "torch.cuda.Event.elapsed_time = lambda self, end: 0.001",
                                  "F.relu = lambda x: x", "setattr(torch, 'allclose', min)"])
def test_monkey_patch(stmt):
    assert "monkey_patch" in errors(f"import torch\nimport torch.nn.functional as F\n{stmt}\n")


@pytest.mark.parametrize("stmt", ["warnings.filters.append(('kept', None, int, {}, 0))",
                                  "warnings.filters[0:0] = [None]", "del warnings.filters[0]",
                                  "f = warnings.filters", "warnings.filters += []",
                                  "torch.nn.modules.module._global_forward_hooks.update({})"])
def test_changing_a_container_of_an_imported_module_is_monkey_patching(stmt):
    assert "monkey_patch" in errors(f"import torch\nimport warnings\n{stmt}\n")


@pytest.mark.parametrize("stmt", ["warnings.filterwarnings('ignore')", "kept = []\nkept.append(1)",
                                  "d = dict()\nd.update(a=1)", "n = len(warnings.filters)"])
def test_own_containers_and_module_functions_are_not_monkey_patching(stmt):
    assert "monkey_patch" not in errors(f"import torch\nimport warnings\n{stmt}\n")


def test_reading_a_tensor_s_write_counter_is_identity_cache():
    assert "identity_cache" in errors(solution("v = x._version\n" + HONEST_FORWARD))


def test_torch_serialization_is_file_io():
    assert "file_io" in errors("import torch\ntorch.serialization.add_safe_globals([int])\n")


def test_self_attribute_assignment_is_not_monkey_patching():
    assert "monkey_patch" not in errors(solution(HONEST_FORWARD, init_body="self.block = 256"))


@pytest.mark.parametrize("stmt", ["torch.manual_seed(0)", "torch.cuda.manual_seed_all(0)",
                                  "np.random.seed(0)", "g = torch.Generator().manual_seed(1)",
                                  "state = torch.get_rng_state()"])
def test_reseed(stmt):
    assert "reseed" in errors(f"import torch\nimport numpy as np\n{stmt}\n")


@pytest.mark.parametrize("stmt", ["torch.backends.cuda.matmul.allow_tf32 = True",
                                  "torch.backends.cudnn.allow_tf32 = True",
                                  "torch.set_float32_matmul_precision('high')"])
def test_precision_flags(stmt):
    assert "precision_flags_changed" in errors(f"import torch\n{stmt}\n")


def test_precision_downcast_is_a_warning():
    src = solution("h = x.half()\nreturn h")
    assert "precision_downcast" in warnings(src)
    assert "precision_downcast" in warnings(solution("y = torch.empty_like(x, dtype=torch.float16)\n"
                                                     "return y"))


def test_tensor_subclass():
    src = "import torch\nclass Lazy(torch.Tensor):\n    pass\n"
    assert "tensor_subclass" in errors(src)
    hook = ("class H:\n    @classmethod\n    def __torch_function__(cls, f, t, a=(), k=None):\n"
            "        return 0\n")
    assert "tensor_subclass" in errors(hook)


def test_private_torch_api():
    assert "private_api" in errors("import torch\nx = torch._C._get_tracing_state()\n")
    assert "private_api" in errors("import torch\nop = torch.ops.aten.mm\n")


# -- the embedded C++/CUDA ----------------------------------------------------------------------------


def test_cuda_scan_finds_cublas():
    assert [c for c, _, _ in scan_cuda_text("#include <cublas_v2.h>\ncublasSgemm(h, ...);")] == [
        "cuda_library_call", "cuda_library_call"]


def test_cuda_scan_ignores_comments():
    assert scan_cuda_text("// faster than cuBLAS\n__global__ void k() {}\n") == []


def test_cuda_scan_torch_cpp_compute():
    found = {c for c, _, _ in scan_cuda_text("torch::Tensor f(torch::Tensor a) "
                                             "{ return torch::matmul(a, a); }")}
    assert found == {"torch_compute_op"}


def test_cuda_scan_allows_allocation_and_current_stream():
    text = ("#include <torch/extension.h>\n"
            "torch::Tensor f(torch::Tensor x) { auto y = torch::empty_like(x);\n"
            "auto s = at::cuda::getCurrentCUDAStream(); int n = x.numel(); auto p = x.data_ptr<float>();\n"
            "return y; }")
    assert scan_cuda_text(text) == []


@pytest.mark.parametrize("text, code", [("cudaStream_t s; cudaStreamCreate(&s);", "stream_created"),
                                        ("std::thread t(work);", "thread_created"),
                                        ("cudaGraphLaunch(g, s);", "cuda_graph"),
                                        ("system(\"pip install x\");", "process_control")])
def test_cuda_scan_rules(text, code):
    assert code in {c for c, _, _ in scan_cuda_text("__global__ void k() {}\n" + text)}


def test_cuda_finding_line_points_into_the_string():
    src = 'SRC = """\n__global__ void k() {}\n// ok\ncublasSgemm(h);\n"""\n'
    (flag,) = check_source(src)
    assert (flag.code, flag.line) == ("cuda_library_call", 4)


def test_half_precision_cuda_is_a_warning():
    src = 'SRC = """\n#include <cuda_fp16.h>\n__global__ void k(__half* x) {}\n"""\n'
    assert warnings(src) == {"reduced_precision_cuda"}


def test_checker_fails_closed_on_pathological_input():
    deep = "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n"
    flags = check_source(deep)
    assert flags and all(f.severity is Severity.ERROR for f in flags)


def test_pointer_compared_with_remembered_state_is_a_cache():
    body = "if x.data_ptr() == self.last_ptr:\n    return self.last\n" + textwrap.dedent(HONEST_FORWARD)
    assert "identity_cache" in errors(solution(body))


def test_aliasing_check_between_fresh_pointers_is_not_a_cache():
    body = "y = torch.empty_like(x)\nassert y.data_ptr() != x.data_ptr()\nreturn y"
    assert "identity_cache" not in errors(solution(body))


@pytest.mark.parametrize("text", ["", "\x00", "import", "class ModelNew(:\n", "x = 1\n" * 3])
def test_check_source_never_raises_on_odd_text(text):
    assert isinstance(check_source(text), tuple)


def test_check_source_never_raises_on_random_python():
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    fragments = st.sampled_from(["torch.", "x", "(", ")", "self", ".sum()", " + ", "getattr", "def f(a):\n ",
                                 "return ", "import os\n", "'s'", "[", "]", ":", "\n", "@", "lambda q: q"])

    @hypothesis.settings(max_examples=200, deadline=None)
    @hypothesis.given(st.lists(fragments, max_size=30).map("".join))
    def run(text):
        assert isinstance(check_source(text), tuple)

    run()
