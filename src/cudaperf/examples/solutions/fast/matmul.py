"""matmul in the fast format: a shared-memory tiled fp32 GEMM (NVRTC), 64x64 tiles, 4x4 per thread.

Each block of 256 threads computes a 64x64 tile of C, walking K in steps of 16: it stages a 64x16 tile
of A (stored k-major, so the inner loop reads it as rows) and a 16x64 tile of B in shared memory, then
every thread accumulates a 4x4 patch in registers, reading 4 values of A and 4 of B per k with two
16-byte shared loads (8 FMAs per shared load). Out-of-range elements are staged as zeros and never
stored, so any M, N, K works. Accumulation is plain fp32 FMA in k order: no TF32.
"""

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
#define BM 64
#define BN 64
#define BK 16
#define TM 4
#define TN 4
#define PAD 4   // keeps rows 16-byte aligned (float4 reads) while shifting banks between rows

extern "C" __global__ void __launch_bounds__(256)
matmul_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
             int M, int N, int K)
{
    __shared__ __align__(16) float As[BK][BM + PAD];  // As[k][m] = A[row0 + m][k0 + k]
    __shared__ __align__(16) float Bs[BK][BN + PAD];  // Bs[k][n] = B[k0 + k][col0 + n]
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);  // 16 x 16 threads
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        #pragma unroll
        for (int i = tid; i < BM * BK; i += 256) {  // consecutive threads read consecutive k of one row
            const int m = i / BK, k = i % BK;
            const int gr = row0 + m, gk = k0 + k;
            As[k][m] = (gr < M && gk < K) ? A[(long long)gr * K + gk] : 0.0f;
        }
        #pragma unroll
        for (int i = tid; i < BK * BN; i += 256) {  // consecutive threads read consecutive columns
            const int k = i / BN, n = i % BN;
            const int gk = k0 + k, gc = col0 + n;
            Bs[k][n] = (gk < K && gc < N) ? B[(long long)gk * N + gc] : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 a = *reinterpret_cast<const float4*>(&As[k][ty * TM]);
            const float4 b = *reinterpret_cast<const float4*>(&Bs[k][tx * TN]);
            const float av[TM] = {a.x, a.y, a.z, a.w};
            const float bv[TN] = {b.x, b.y, b.z, b.w};
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + ty * TM + i;
        if (r >= M) break;
        #pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = col0 + tx * TN + j;
            if (c < N) C[(long long)r * N + c] = acc[i][j];
        }
    }
}
"""

TILE = 64
THREADS = 256


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "matmul_tiled")

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A = A.contiguous()
        B = B.contiguous()
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), dtype=A.dtype, device=A.device)
        if M == 0 or N == 0:
            return C
        grid = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE)
        self.kernel(grid, (THREADS,), A, B, C, M, N, K)
        return C
