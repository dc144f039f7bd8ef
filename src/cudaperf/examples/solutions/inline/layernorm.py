"""layernorm in the KernelBench (load_inline) format: mean, variance around the mean, affine write.

Two statistics passes avoid the cancellation of E[x^2] - E[x]^2 for rows with a large mean. Short rows
(dim <= 1024) get one warp each, long rows one block each. Parameters are drawn exactly as the
reference `Model` draws them. HEADER / KERNELS / WRAPPER as in the vector_add example.
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

__device__ __forceinline__ float block_sum(float v, float* scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_sum(lane < nwarps ? scratch[lane] : 0.0f);
}

__global__ void layernorm_warp_rows(const float* __restrict__ x, const float* __restrict__ w,
                                    const float* __restrict__ b, float* __restrict__ y,
                                    int rows, int dim, float eps)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;  // warp-uniform
    const float* xr = x + (long long)row * dim;
    float* yr = y + (long long)row * dim;
    float s = 0.0f;
    for (int c = lane; c < dim; c += 32) s += xr[c];
    const float mean = warp_sum(s) / dim;
    float q = 0.0f;
    for (int c = lane; c < dim; c += 32) { const float d = xr[c] - mean; q += d * d; }
    const float rstd = rsqrtf(warp_sum(q) / dim + eps);
    for (int c = lane; c < dim; c += 32) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
}

__global__ void layernorm_block_rows(const float* __restrict__ x, const float* __restrict__ w,
                                     const float* __restrict__ b, float* __restrict__ y, int dim, float eps)
{
    __shared__ float scratch[32];
    const float* xr = x + (long long)blockIdx.x * dim;
    float* yr = y + (long long)blockIdx.x * dim;
    float s = 0.0f;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) s += xr[c];
    const float mean = block_sum(s, scratch) / dim;
    float q = 0.0f;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) { const float d = xr[c] - mean; q += d * d; }
    const float rstd = rsqrtf(block_sum(q, scratch) / dim + eps);
    for (int c = threadIdx.x; c < dim; c += blockDim.x) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
}
"""

WRAPPER = r"""
torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "layernorm_forward: CUDA tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "layernorm_forward: input must be float32");
    TORCH_CHECK(x.dim() >= 1, "layernorm_forward: input needs a last dimension");
    const int dim = (int)x.size(-1);
    TORCH_CHECK(weight.numel() == dim && bias.numel() == dim, "layernorm_forward: weight/bias size != dim");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto y = torch::empty_like(xc);
    const int rows = dim ? (int)(xc.numel() / dim) : 0;
    if (rows == 0) return y;
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (dim <= 1024) {
        const int rows_per_block = 8;
        layernorm_warp_rows<<<(rows + rows_per_block - 1) / rows_per_block, 32 * rows_per_block, 0, stream>>>(
            xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(),
            rows, dim, (float)eps);
    } else {
        layernorm_block_rows<<<rows, 512, 0, stream>>>(
            xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(),
            dim, (float)eps);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

CPP = ("torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, "
       "double eps);")

_ext = load_inline(
    name="cudaperf_example_layernorm",
    cpp_sources=CPP,
    cuda_sources=HEADER + KERNELS + WRAPPER,
    functions=["layernorm_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.eps = 1e-5
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(dim))
        self.bias = nn.Parameter(0.5 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.layernorm_forward(x, self.weight, self.bias, self.eps)
