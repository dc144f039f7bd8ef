"""row_sum in the KernelBench (load_inline) format: warp-per-row or block-per-row shuffle reductions.

Four independent partial sums per thread keep four loads in flight. HEADER / KERNELS / WRAPPER as in
the vector_add example.
"""

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

HEADER = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
"""

KERNELS = r"""
#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float warp_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
    return v;
}

__device__ __forceinline__ float strided_sum(const float* __restrict__ xr, int first, int step, int cols)
{
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    int c = first;
    for (; c + 3 * step < cols; c += 4 * step) {
        a0 += xr[c];
        a1 += xr[c + step];
        a2 += xr[c + 2 * step];
        a3 += xr[c + 3 * step];
    }
    for (; c < cols; c += step) a0 += xr[c];
    return (a0 + a1) + (a2 + a3);
}

__global__ void row_sum_warp_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;  // warp-uniform
    const float total = warp_sum(strided_sum(x + (long long)row * cols, lane, 32, cols));
    if (lane == 0) y[row] = total;
}

__global__ void row_sum_block_rows(const float* __restrict__ x, float* __restrict__ y, int cols)
{
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    float v = warp_sum(strided_sum(x + (long long)blockIdx.x * cols, threadIdx.x, blockDim.x, cols));
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = warp_sum(lane < nwarps ? partial[lane] : 0.0f);
        if (lane == 0) y[blockIdx.x] = v;
    }
}
"""

WRAPPER = r"""
torch::Tensor row_sum_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "row_sum_forward: input must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "row_sum_forward: input must be float32");
    TORCH_CHECK(x.dim() >= 1, "row_sum_forward: input needs a last dimension");
    auto xc = x.contiguous();
    auto out_sizes = xc.sizes().vec();
    out_sizes.pop_back();
    auto y = torch::empty(out_sizes, xc.options());
    const int cols = (int)xc.size(-1);
    const int rows = (int)y.numel();
    if (rows == 0) return y;
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (cols <= 1024) {
        const int rows_per_block = 8;
        row_sum_warp_rows<<<(rows + rows_per_block - 1) / rows_per_block, 32 * rows_per_block, 0, stream>>>(
            xc.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
    } else {
        row_sum_block_rows<<<rows, 512, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), cols);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

CPP = "torch::Tensor row_sum_forward(torch::Tensor x);"

_ext = load_inline(
    name="cudaperf_example_row_sum",
    cpp_sources=CPP,
    cuda_sources=HEADER + KERNELS + WRAPPER,
    functions=["row_sum_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.row_sum_forward(x)
