"""Fast-format CUDA implementations of the PyTorch families: a `ModelNew` module per implementation whose
kernels are built by NVRTC through `cudaperf.cuda`, several optimisation strategies per family.

  parts.py            the ModelNew module text, CUDA literals, row-to-threads mappings and reductions
  elementwise.py      elementwise
  rowwise.py          reduction, softmax, normalization
  matmul_kernels.py   the batched matmul kernels matmul_epilogue and attention share
  matmul_epilogue.py  matmul_epilogue
  conv_activation.py  conv_activation
  pooling.py          pooling
  attention.py        attention (scores, probs, attention, rotary)
  scan.py             scan_torch
  gather_scatter.py   gather_scatter
  loss.py             loss
  fresh_*.py          the fresh families held out of the dataset (fresh_torch_families.py), not in
                      `IMPLEMENTATIONS`

Every implementation guards its tails (no size needs to be a multiple of a block or tile) and creates its
parameters exactly like the task's `Model` (same modules, same order), so seeded construction gives equal
weights. `IMPLEMENTATIONS` maps each family name to its implementations function.

Not covered: the task modules themselves (torch_families.py), other dtypes than float32, inputs that are
not contiguous.
"""

from __future__ import annotations

from cudaperf.datasets.generate.torch_impls.attention import attention_impls
from cudaperf.datasets.generate.torch_impls.conv_activation import conv_impls
from cudaperf.datasets.generate.torch_impls.elementwise import elementwise_impls
from cudaperf.datasets.generate.torch_impls.gather_scatter import gather_impls
from cudaperf.datasets.generate.torch_impls.loss import loss_impls
from cudaperf.datasets.generate.torch_impls.matmul_epilogue import matmul_impls
from cudaperf.datasets.generate.torch_impls.parts import Impls
from cudaperf.datasets.generate.torch_impls.pooling import pool_impls
from cudaperf.datasets.generate.torch_impls.rowwise import row_impls
from cudaperf.datasets.generate.torch_impls.scan import scan_impls

IMPLEMENTATIONS: dict[str, Impls] = {
    "elementwise": elementwise_impls,
    "reduction": row_impls("reduction"),
    "softmax": row_impls("softmax"),
    "normalization": row_impls("normalization"),
    "matmul_epilogue": matmul_impls,
    "conv_activation": conv_impls,
    "pooling": pool_impls,
    "attention": attention_impls,
    "scan_torch": scan_impls,
    "gather_scatter": gather_impls,
    "loss": loss_impls,
}
