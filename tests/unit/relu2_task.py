"""A small CPU task and a right candidate for it, shared by the tests that run whole batches through real
CPU-mode workers (tests/unit/test_eval_modes_cpu.py, tests/unit/test_scale.py). No tests here."""

from __future__ import annotations

import textwrap


def relu2_source(why_no_derived: str) -> str:
    """`relu(x) * 2 + z` at two declared sizes; derived configurations off, for `why_no_derived`."""
    return textwrap.dedent("""
        import torch
        import torch.nn as nn

        CUDAPERF_TASK = {"no_derived_configs": %r}

        class Model(nn.Module):
            def forward(self, x, z):
                return torch.relu(x) * 2 + z

        def get_input_configs():
            return [{"name": "small", "n": 16}, {"name": "odd", "n": 23}]

        def get_inputs(n=16):
            return [torch.randn(8, n), torch.randn(8, n)]

        def get_init_inputs(n=16):
            return []
    """) % why_no_derived


# A right candidate; `{k}` makes each copy's source (and so its build) distinct.
RIGHT = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class ModelNew(nn.Module):
        def forward(self, x, z):
            return torch.relu(x) * 2 + z  # {k}
""")
