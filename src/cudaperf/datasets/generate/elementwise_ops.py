"""The elementwise ops the PyTorch families chain: each op's torch expression (task modules) and CUDA
float expression (implementations), and how a chain of them is written in both.

Not covered: the families that use them (torch_families.py, torch_impls/).
"""

from __future__ import annotations

# op name -> (torch expression of `x`, CUDA float expression of `v`); `{c}` is the op's constant
EW_OPS: dict[str, tuple[str, str]] = {
    "relu": ("torch.relu({x})", "fmaxf({v}, 0.0f)"),
    "gelu": ("torch.nn.functional.gelu({x})", "0.5f * {v} * (1.0f + erff({v} * 0.70710678118654752f))"),
    "tanh": ("torch.tanh({x})", "tanhf({v})"),
    "sigmoid": ("torch.sigmoid({x})", "1.0f / (1.0f + expf(-{v}))"),
    "silu": ("torch.nn.functional.silu({x})", "{v} / (1.0f + expf(-{v}))"),
    "abs": ("torch.abs({x})", "fabsf({v})"),
    "square": ("{x} * {x}", "{v} * {v}"),
    "sin": ("torch.sin({x})", "sinf({v})"),
    "softplus": ("torch.nn.functional.softplus({x})", "({v} > 20.0f ? {v} : log1pf(expf({v})))"),
    "elu": ("torch.nn.functional.elu({x})", "({v} > 0.0f ? {v} : expm1f({v}))"),
    "sqrt_abs": ("torch.sqrt(torch.abs({x}))", "sqrtf(fabsf({v}))"),
    "log1p_abs": ("torch.log1p(torch.abs({x}))", "log1pf(fabsf({v}))"),
    "scale": ("{x} * {c}", "{v} * {c}f"),
    "shift": ("{x} + {c}", "{v} + {c}f"),
    "leaky_relu": ("torch.nn.functional.leaky_relu({x}, {c})", "({v} > 0.0f ? {v} : {c}f * {v})"),
    "clamp": ("torch.clamp({x}, -{c}, {c})", "fminf(fmaxf({v}, -{c}f), {c}f)"),
    "hardtanh": ("torch.nn.functional.hardtanh({x})", "fminf(fmaxf({v}, -1.0f), 1.0f)"),
    "exp_neg_abs": ("torch.exp(-torch.abs({x}))", "expf(-fabsf({v}))"),
    "atan": ("torch.atan({x})", "atanf({v})"),
    "cos": ("torch.cos({x})", "cosf({v})"),
}
NEEDS_CONSTANT = ("scale", "shift", "leaky_relu", "clamp")  # ops whose `{c}` is drawn per task


def chain_exprs(ops: list[tuple[str, float]], x: str, v: str) -> tuple[str, str]:
    """The torch and CUDA expressions of a chain of elementwise ops applied to `x` / `v`."""
    t, c = x, v
    for name, k in ops:
        tt, cc = EW_OPS[name]
        t, c = tt.format(x=f"({t})", c=k), cc.format(v=f"({c})", c=k)
    return t, c
