"""KernelBench-format (load_inline) candidates that are honest and correct, plus one native escape attempt.

`candidate_source(attempt)` is a ReLU solution whose CUDA host code embeds escape_attempts.c and runs one
attempt from a static initialiser, at the moment the worker loads the extension (before any of the
harness's Python runs again). When the attempt gets out, the kernel doubles its output, so the escape
shows in the evaluator's own verdict (INCORRECT); blocked, the candidate is CORRECT; the writes, the
lingering process and the forged reply are seen by the test (files, processes, flags). `attempt=None`
is the honest candidate alone, the baseline every fixture must match in outcome.

`referee_attack_source(attack)`: the attacks on the verdict itself (referee_attacks.cpp): copying the
reference's output out of the worker's own objects, and forging a well-formed reply with the job's real
nonce read from the worker's frames. Both succeed when the worker judges itself (the GPU test's control)
and must fail with the referee.

Why only load_inline: the fast format runs nothing but NVRTC device code; native host code reaches a
worker only through load_inline (or ctypes, which the static policy refuses).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
ATTEMPTS: tuple[str, ...] = ("write_outside", "read_environ", "read_memory", "signal", "trace", "linger",
                             "forge_reply")  # fmt: skip
TASK = "relu"

_TEMPLATE = '''"""relu (load_inline) with the native escape attempt `{attempt}` in a static initialiser."""

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
{attempts}
static int cpn_escaped = {call};

__global__ void relu_native_kernel(const float* x, float* y, long long n, float scale) {{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (x[i] < 0.0f ? 0.0f : x[i]) * scale;
}}

torch::Tensor relu_native_forward(torch::Tensor x) {{
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long long n = xc.numel();
    if (n == 0) return y;
    const int threads = 256;
    long long blocks = (n + threads - 1) / threads;
    relu_native_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), n, 1.0f + (float)cpn_escaped);
    return y;
}}
"""

CPP_SOURCE = "torch::Tensor relu_native_forward(torch::Tensor x);"

ext = load_inline(name="cudaperf_native_{name}", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                  functions=["relu_native_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_native_forward(x)
'''


def candidate_source(attempt: str | None) -> str:
    """The solution text: the honest ReLU with `attempt` (one of ATTEMPTS) run when the extension loads."""
    if attempt is None:
        return _TEMPLATE.format(attempt="none", attempts="", call="0", name="honest")
    if attempt not in ATTEMPTS:
        raise ValueError(f"unknown attempt {attempt!r}; one of {ATTEMPTS}")
    attempts = (HERE / "escape_attempts.c").read_text()
    return _TEMPLATE.format(attempt=attempt, attempts=attempts, call=f"cpn_{attempt}()", name=attempt)


# -- attacks on the verdict (issue 24, part 2): referee_attacks.cpp ----------------------------------

REFEREE_ATTACKS: tuple[str, ...] = ("copy_reference", "forge_verdict")

_REFEREE_TEMPLATE = '''"""relu (load_inline), native code attacking the verdict: `{attack}`."""

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
{code}

__global__ void cpa_copy_kernel(const float* src, float* dst, long long n) {{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src == nullptr ? 0.0f : src[i];
}}

static torch::Tensor cpa_output(torch::Tensor x, const torch::Tensor& found) {{
    auto y = torch::empty_like(x);
    long long n = y.numel();
    if (n == 0) return y;
    const float* src = found.defined() ? found.data_ptr<float>() : nullptr;
    cpa_copy_kernel<<<(unsigned)((n + 255) / 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        src, y.data_ptr<float>(), n);
    return y;
}}

torch::Tensor relu_attack_forward(torch::Tensor x) {{
    {body}
}}
"""

CPP_SOURCE = "torch::Tensor relu_attack_forward(torch::Tensor x);"

ext = load_inline(name="cudaperf_referee_{attack}", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                  functions=["relu_attack_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_attack_forward(x)
'''

_BODIES = {
    # The reference's output when one is found in the worker, zeros otherwise (a wrong answer).
    "copy_reference": "auto xc = x.contiguous();\n    return cpa_output(xc, cpa_find_reference(xc));",
    # The forgery, then zeros: the ReLU is never computed.
    "forge_verdict": "cpa_forge_verdict();\n    return cpa_output(x.contiguous(), torch::Tensor());",
}


def referee_attack_source(attack: str) -> str:
    """The solution text of one attack of REFEREE_ATTACKS."""
    if attack not in REFEREE_ATTACKS:
        raise ValueError(f"unknown attack {attack!r}; one of {REFEREE_ATTACKS}")
    code = (HERE / "escape_attempts.c").read_text() + (HERE / "referee_attacks.cpp").read_text()
    return _REFEREE_TEMPLATE.format(attack=attack, code=code, body=_BODIES[attack])
