"""Shared-memory cases: padded and unpadded transposes, strided and broadcast shared accesses, a tiled
matmul."""

from __future__ import annotations

from cudaperf.analysis.validation import case

N = 4096  # 4096 x 4096 float32 matrix for the transposes (64 MB each way)
MM = 1024  # matmul size

_TRANSPOSE = """(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float tile[32][%s];
    int x = blockIdx.x * 32 + threadIdx.x;
    int y = blockIdx.y * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}"""

CASES = (
    case("v_transpose_smem_unpadded", _TRANSPOSE % "32",
         {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "bank_conflict": 32,
          "padded": False, "barriers": 1, "regime": "memory"},
         grid=(N // 32, N // 32), block=(32, 8), args=("in:n * n", "out:n * n", "i32:n"), sizes={"n": N}),

    case("v_transpose_smem_padded", _TRANSPOSE % "33",
         {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "bank_conflict": 1,
          "padded": True, "barriers": 1, "regime": "memory"},
         grid=(N // 32, N // 32), block=(32, 8), args=("in:n * n", "out:n * n", "i32:n"), sizes={"n": N}),

    case("v_smem_stride2", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float s[512];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[2 * threadIdx.x] = in[i];                     // even words only: lanes l and l+16 share a bank
    s[2 * threadIdx.x + 1] = 0.0f;
    __syncthreads();
    out[i] = s[2 * threadIdx.x] + s[2 * threadIdx.x + 1];
}""", {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "bank_conflict": 2,
       "barriers": 1, "regime": "memory"},
         grid=(1 << 14,), block=(256,), args=("in:n", "out:n", "i32:n"), sizes={"n": 1 << 22}),

    case("v_smem_stride33", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float s[256 * 33];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[33 * threadIdx.x] = in[i];                    // odd stride: every lane its own bank
    __syncthreads();
    out[i] = s[33 * threadIdx.x];
}""", {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "bank_conflict": 1,
       "barriers": 1, "regime": "memory"},
         grid=(1 << 14,), block=(256,), args=("in:n", "out:n", "i32:n"), sizes={"n": 1 << 22}),

    case("v_smem_broadcast", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = s[threadIdx.x] * s[0];                 // s[0]: one word for the whole warp
}""", {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "bank_conflict": 1,
       "barriers": 1, "regime": "memory"},
         grid=(1 << 14,), block=(256,), args=("in:n", "out:n", "i32:n"), sizes={"n": 1 << 22}),

    case("v_smem_column_read", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float s[32][32];
    int i = blockIdx.x * 1024 + threadIdx.y * 32 + threadIdx.x;
    s[threadIdx.y][threadIdx.x] = in[i];
    __syncthreads();
    out[i] = s[threadIdx.x][threadIdx.y];           // a warp reads one column: 32 words, one bank
}""", {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "bank_conflict": 32,
       "padded": False, "barriers": 1, "regime": "memory"},
         grid=(1 << 12,), block=(32, 32), args=("in:n", "out:n", "i32:n"), sizes={"n": 1 << 22}),

    case("v_matmul_tiled",
         """(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int n) {
    __shared__ float As[16][16];
    __shared__ float Bs[16][16];
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < n / 16; ++t) {
        As[threadIdx.y][threadIdx.x] = A[row * n + t * 16 + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * 16 + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < 16; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * n + col] = acc;
}""", {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "bank_conflict": 1,
       "padded": False, "barriers": 2, "regime": "compute"},
         grid=(MM // 16, MM // 16), block=(16, 16), args=("in:n * n", "in:n * n", "out:n * n", "i32:n"),
         sizes={"n": MM}),
)
