"""The cudaperf task dataset: generators of PyTorch→CUDA and C→CUDA task families, CUDA implementations
from templates (several optimisation strategies per task), the degenerate-task filter, family splits,
export (JSONL prompts, Parquet) and the `cudaperf dataset` command.

Module map:
  records.py        Implementation, GeneratedTask, Family, the normalised-source hash
  cgen.py           loop-nest kernels: serial C, the naive one-thread-per-iteration CUDA port and the
                    other mechanical strategies (grid-stride, coarsened, uncoalesced mapping)
  c_families.py     C→CUDA families (maps, stencils, reductions, scans, histograms, ...)
  torch_families.py PyTorch→CUDA families (KernelBench-format modules with get_input_configs)
  torch_impls.py    fast-format CUDA implementations of the PyTorch tasks (elementwise, reductions,
                    softmax, normalisation)
  torch_impls_more.py  the other seven PyTorch families (matmul epilogues, conv, pooling, attention,
                    scans, gather/scatter, losses)
  tensor_core.py    the WMMA TF32 (3xTF32) matmul kernel both kinds' matrix products share
  registry.py       the index of every task (deterministic from a seed), dedupe
  degenerate.py     CPU checks for constant / input-independent / tiny outputs
  splits.py         train / val / test by whole families
  export.py         task files (write-then-rename), JSONL prompts, Parquet
  measure.py, measure_task.py, measure_stats.py
                    resumable GPU verification and timing of every implementation, stats, export
  gpucheck.py       one implementation against its reference on the GPU (tests)
  cli.py            `cudaperf dataset build | validate | stats | measure`

Not covered: evaluation of model-written candidates (that is `cudaperf.evaluate`).
"""
