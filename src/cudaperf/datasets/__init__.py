"""The cudaperf task dataset: PyTorch→CUDA and C→CUDA task families, several CUDA implementations per task,
CPU filters that leave out tasks which cannot judge kernels, and the resumable GPU measurement.

Module map:
  records.py      Implementation, GeneratedTask, Family, the normalised-source hash
  registry.py     the index of every task (deterministic from a seed), dedupe
  splits.py       train / val / test by whole families
  export.py       task files (write-then-rename), JSONL prompts, Parquet
  generate/       the families and their implementations:
    loop_nest.py              one C loop body as serial C, the naive CUDA port and mechanical strategies
    c_family_parts.py         shared pieces of the C families (literals, tolerances, configurations, tiling)
    c_parallel_families.py    C families that are perfectly parallel loop nests (maps, stencils, products)
    c_dependent_families.py   C families with carried dependencies (reductions, scans, histograms, sorts)
    elementwise_ops.py        the elementwise ops PyTorch tasks and implementations chain (torch and CUDA)
    torch_families.py         PyTorch families (KernelBench-format modules with get_input_configs)
    torch_impls/              fast-format CUDA implementations of the PyTorch families, one module per
                              family (rowwise.py: reduction, softmax, normalization), the matmul kernels
                              two of them share, and parts.py (module text, row mappings, reductions)
    tensor_core.py            the WMMA TF32 (3xTF32) matmul both kinds' matrix products share
  filters/        degenerate.py (constant / input-independent / tiny outputs), rounding.py (references that
                  move beyond tolerance under fused multiply-adds, CUDA's libm bounds or float64)
  measure/        runner.py (process model, resume, results files), task_measurement.py (one task in a
                  measuring child), stats.py (statistics, export), gpucheck.py (one implementation on the GPU)

The `cudaperf dataset` command is `cudaperf.commands.dataset_cmd`.
Not covered: evaluation of model-written candidates (that is `cudaperf.evaluate`).
"""
