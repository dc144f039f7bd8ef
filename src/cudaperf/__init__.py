"""cudaperf: evaluate, analyse and reward LLM-written CUDA kernels, and train models to write them.

The package imports nothing heavy at top level (no torch, no CUDA) so that `cudaperf --help`, the
records in `cudaperf.types` and the pure reward load anywhere.
"""

__version__ = "0.1.0"
