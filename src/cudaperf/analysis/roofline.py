"""H200 roofline ceilings and the regime of a kernel: no imports, so every analysis module can use them.

Covers: the bandwidth and compute ceilings of the H200 this project measures on, the ridge point (FLOP
per byte where the two roofs meet) for CUDA-core FP32 and for tensor cores, and the regime of a given
arithmetic intensity. Not covered: other GPUs (pass other ceilings), measuring the ceilings.
"""

from __future__ import annotations

# Measured on the H200 (docs/gpu-machine.md): device-to-device 4.2-4.3 TB/s, bf16 matmul ~790 TFLOP/s.
H200_BANDWIDTH_BYTES_PER_S = 4.27e12
H200_TENSOR_FLOPS = 790e12
# FP32 CUDA cores: 132 SMs x 128 lanes x 2 FLOP x 1.98 GHz boost = 66.9 TFLOP/s (spec-sheet arithmetic).
H200_FP32_FLOPS = 66.9e12


def ridge_flops_per_byte(tensor: bool = False) -> float:
    return (H200_TENSOR_FLOPS if tensor else H200_FP32_FLOPS) / H200_BANDWIDTH_BYTES_PER_S


def regime(intensity: float, tensor: bool = False) -> str:
    """"compute" at or above the ridge point, else "memory"."""
    return "compute" if intensity >= ridge_flops_per_byte(tensor) else "memory"
