"""Resource cases: occupancy limited by shared memory, dynamic shared memory, registers or nothing; local
memory from dynamically indexed arrays; compute-bound and memory-bound arithmetic."""

from __future__ import annotations

from cudaperf.analysis.validation import case

N = 1 << 22
MEM = {"regime": "memory"}
COPY_ARGS = ("in:n", "out:n", "i32:n")

CASES = (
    case("v_occupancy_big_static_smem", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float buf[10240];                     // 40 KB per 64-thread block: 5 blocks, 10 warps per SM
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = in[i];
    buf[10239 - threadIdx.x] = in[i] * 2.0f;
    __syncthreads();
    out[i] = buf[63 - threadIdx.x] + buf[10176 + threadIdx.x];
}""", {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "bank_conflict": 1,
       "barriers": 1, "occupancy": "low", **MEM},
         grid=(N // 64,), block=(64,), args=COPY_ARGS, sizes={"n": N}),

    case("v_occupancy_dynamic_smem", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    extern __shared__ float dyn[];                   // 96 KB per block at launch: 2 blocks per SM
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    dyn[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = dyn[255 - threadIdx.x];
}""", {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "bank_conflict": 1,
       "barriers": 1, "occupancy": "low", **MEM},
         grid=(N // 256,), block=(256,), args=COPY_ARGS, sizes={"n": N}, smem_bytes=96 * 1024),

    case("v_occupancy_registers", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int stride = n / 128;
    float a[96];
    #pragma unroll
    for (int k = 0; k < 96; ++k) a[k] = in[(i + k * stride) % n];
    float s = 0.0f;
    #pragma unroll
    for (int k = 0; k < 96; ++k) {
        #pragma unroll
        for (int j = k; j < 96; j += 5) s += a[k] * a[j];   // every a[k] stays live to the end
    }
    out[i] = s;
}""", {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "occupancy": "low",
       "regime": "compute"},
         grid=(N // 4 // 256,), block=(256,), args=COPY_ARGS, sizes={"n": N}, prelude="",
         note="96 live floats per thread: about 100+ registers, so few warps fit"),

    case("v_occupancy_high", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * in[i] + 1.0f;
}""", {"load": "coalesced", "store": "coalesced", **MEM}, grid=(N // 256,), block=(256,), args=COPY_ARGS,
         sizes={"n": N}),

    case("v_occupancy_block1024", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + 1.0f;
}""", {"load": "coalesced", "store": "coalesced", **MEM}, grid=(N // 1024,), block=(1024,), args=COPY_ARGS,
         sizes={"n": N}),

    case("v_local_dynamic_index",
         """(const float* __restrict__ in, const int* __restrict__ sel, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float buf[64];
    int first = sel[i];
    for (int k = 0; k < 64; ++k) buf[(first + k) & 63] = in[(i + k) % n];   // indices known only at run time
    out[i] = buf[(first * 7) & 63];                  // so the array lives in local memory
}""", {"load": "coalesced", "store": "coalesced", "local_memory": True, **MEM},
         grid=(N // 256,), block=(256,), args=("in:n", "idx:n:32", "out:n", "i32:n"), sizes={"n": N}),

    case("v_register_array", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float buf[8];
    #pragma unroll
    for (int k = 0; k < 8; ++k) buf[k] = in[(i + k) % n];
    float s = 0.0f;
    #pragma unroll
    for (int k = 0; k < 8; ++k) s += buf[k] * (k + 1);   // constant indices: registers
    out[i] = s;
}""", {"load": "coalesced", "store": "coalesced", **MEM}, grid=(N // 256,), block=(256,), args=COPY_ARGS,
         sizes={"n": N}),

    case("v_compute_fma_chain", """(const float* __restrict__ in, float* __restrict__ out, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = in[i];
    for (int k = 0; k < iters; ++k) x = x * 0.999f + 0.001f;   // 2 FLOP per step, no memory
    out[i] = x;
}""", {"load": "coalesced", "store": "coalesced", "regime": "compute"}, grid=(N // 256,), block=(256,),
         args=("in:n", "out:n", "i32:n", "i32:iters"), sizes={"n": N, "iters": 512}),

    case("v_memory_polynomial", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = in[i];
    out[i] = ((x * 0.5f + 1.0f) * x + 2.0f) * x + 3.0f;   // 6 FLOP per 8 bytes
}""", {"load": "coalesced", "store": "coalesced", **MEM}, grid=(N // 256,), block=(256,), args=COPY_ARGS,
         sizes={"n": N}),

    case("v_matmul_naive",
         """(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int n) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n && col < n) {
        float acc = 0.0f;
        for (int k = 0; k < n; ++k) acc += A[row * n + k] * B[k * n + col];
        C[row * n + col] = acc;
    }
}""", {"load": "coalesced", "store": "coalesced", "regime": "compute"}, grid=(32, 1024), block=(32, 1),
         args=("in:n * n", "in:n * n", "out:n * n", "i32:n"), sizes={"n": 1024},
         note="A[row * n + k] is a broadcast, B and C coalesced: the worst load is coalesced"),
)
