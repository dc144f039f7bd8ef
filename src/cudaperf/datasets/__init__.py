"""The cudaperf task dataset: PyTorch→CUDA and C→CUDA task families, several CUDA implementations per task,
CPU filters that leave out tasks which cannot judge kernels, and the resumable GPU measurement.

Module map:
  records.py      Implementation, GeneratedTask, Family, the normalised-source hash
  registry.py     the index of every task (deterministic from a seed), dedupe
  splits.py       train / val / test by whole families
  export.py       task files (write-then-rename), C tasks' naive ports, JSONL prompts, Parquet
  jsonl.py        JSON Lines files: read tolerating torn lines and shards, append fsynced
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
  measure/        the GPU measurement:
    runner.py                 what to measure (shards, resume, the CPU filter) and the run's entry points
    options.py                MeasureOptions (one field per `dataset measure` flag), runners by name
    pool.py                   the measuring children: spawn, jobs, the blame rule for deaths, the budget
    task_measurement.py       one task inside a child: check and time every implementation (GPU)
    results.py                measurements.jsonl: row version, implementation hash, progress, CPU verdicts
    features.py               static features of the implementations (features.jsonl)
    stats.py                  statistics of a measurement, its export (markdown, CSV, Parquet)
    gpucheck.py               one implementation on one configuration on the GPU (a first check)

The `cudaperf dataset` command is `cudaperf.commands.dataset_cmd`.
Not covered: evaluation of model-written candidates (that is `cudaperf.evaluate`).
"""
