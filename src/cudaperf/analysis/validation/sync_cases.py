"""Barrier cases: uniform and thread-dependent barriers, early exits, redundant barriers, taint through
control dependence and through shared memory, atomics.

Kernels with `run=False` put a barrier where some threads of a block can never reach it: undefined
behaviour that can hang a GPU, so they are labelled for the static analysis only. The runnable
divergent cases let the skipping threads exit (an early `return`, a grid-stride loop whose last round
leaves some threads out), which the hardware tolerates and which Nsight Compute sees as divergent branches.
"""

from __future__ import annotations

from cudaperf.analysis.validation import case

N = 1 << 22
ODD = N - 77  # not a multiple of the block: the last block has threads that exit early
MEM = {"regime": "memory"}

CASES = (
    case("v_early_return_barrier", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || in[i] < 0.25f) return;             // a quarter of the threads, at random, leave...
    s[threadIdx.x] = in[i];
    __syncthreads();                                 // ...and never arrive here
    out[i] = s[threadIdx.x] + s[threadIdx.x ^ 1];
}""", {"load": "coalesced", "store": "coalesced", "bank_conflict": 1, "barriers": 1,
       "divergent_barrier": True, **MEM},
         grid=(N // 256,), block=(256,), args=("in:n", "out:n", "i32:n"), sizes={"n": N},
         note="the exiting threads are spread over every warp, so the hardware sees the divergence"),

    case("v_grid_stride_barrier", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float s[256];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        s[threadIdx.x] = in[i];
        __syncthreads();                             // the loop bound depends on the thread
        out[i] = s[255 - threadIdx.x];
        __syncthreads();
    }
}""", {"load": "coalesced", "store": "coalesced", "bank_conflict": 1, "barriers": 2,
       "divergent_barrier": True, **MEM},
         grid=(1024,), block=(256,), args=("in:n", "out:n", "i32:n"), sizes={"n": ODD}),

    case("v_uniform_barrier_loop", """(const float* __restrict__ in, float* __restrict__ out, int steps) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = in[i];
    for (int t = 0; t < steps; ++t) {                // every thread runs the same trip count
        s[threadIdx.x] = v;
        __syncthreads();
        v = 0.5f * (v + s[(threadIdx.x + 1) & 255]);
        __syncthreads();
    }
    out[i] = v;
}""", {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "bank_conflict": 1,
       "barriers": 2, **MEM},
         grid=(1 << 14,), block=(256,), args=("in:n", "out:n", "i32:steps"), sizes={"n": N, "steps": 8}),

    case("v_block_uniform_return", """(const float* __restrict__ in, float* __restrict__ out, int nblocks) {
    __shared__ float s[256];
    if (blockIdx.x >= nblocks) return;               // whole blocks leave together: uniform
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = s[255 - threadIdx.x];
}""", {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "bank_conflict": 1,
       "barriers": 1, **MEM},
         grid=(1 << 14,), block=(256,), args=("in:n", "out:n", "i32:nblocks"),
         sizes={"n": N, "nblocks": (1 << 14) - 16}),

    case("v_redundant_barrier", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = in[i];
    __syncthreads();
    __syncthreads();                                 // nothing to order since the previous one
    out[i] = s[255 - threadIdx.x];
}""", {"divergent_branches": False, "load": "coalesced", "store": "coalesced", "bank_conflict": 1,
       "barriers": 2, "redundant_barrier": True, **MEM},
         grid=(1 << 14,), block=(256,), args=("in:n", "out:n", "i32:n"), sizes={"n": N}),

    case("v_shared_flag_uniform", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ int go;
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x == 0) go = in[blockIdx.x] >= 0.0f;
    __syncthreads();
    if (go) {                                        // read back from shared memory: the same for all
        s[threadIdx.x] = in[i];
        __syncthreads();
        out[i] = s[255 - threadIdx.x];
    }
}""", {"load": "coalesced", "store": "coalesced", "bank_conflict": 1, "barriers": 2, **MEM},
         grid=(1 << 14,), block=(256,), args=("in:n", "out:n", "i32:n"), sizes={"n": N},
         note="a thread-dependent write to shared memory does not make later reads of it thread-dependent"),

    case("v_tid_condition_barrier", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = in[i];
    if (threadIdx.x < 128) {
        __syncthreads();                             // half the block never arrives
        out[i] = s[threadIdx.x + 128];
    }
}""", {"load": "coalesced", "store": "coalesced", "bank_conflict": 1, "barriers": 1,
       "divergent_barrier": True, **MEM},
         grid=(1 << 14,), block=(256,), args=("in:n", "out:n", "i32:n"), sizes={"n": N}, run=False),

    case("v_flag_control_dependence", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int leader = 0;
    if (threadIdx.x % 32 == 0) leader = 1;           // thread-dependent through control dependence
    s[threadIdx.x] = in[i];
    if (leader) __syncthreads();
    out[i] = s[threadIdx.x];
}""", {"load": "coalesced", "store": "coalesced", "bank_conflict": 1, "barriers": 1,
       "divergent_barrier": True, **MEM},
         grid=(1 << 14,), block=(256,), args=("in:n", "out:n", "i32:n"), sizes={"n": N}, run=False),

    case("v_atomic_global_sum", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&out[0], in[i]);            // every thread hits one address
}""", {"load": "coalesced", "store": None, "atomics": True, **MEM}, grid=(1 << 14,), block=(256,),
         args=("in:n", "out:1", "i32:n"), sizes={"n": N}),

    case("v_atomic_histogram_shared", """(const int* __restrict__ keys, int* __restrict__ hist, int n) {
    __shared__ int local[256];
    local[threadIdx.x] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[keys[i] & 255], 1);
    __syncthreads();
    atomicAdd(&hist[threadIdx.x], local[threadIdx.x]);
}""", {"load": "coalesced", "store": None, "atomics": True, "bank_conflict": 1, "barriers": 2, **MEM},
         grid=(512,), block=(256,), args=("idx:n:1 << 20", "out:256", "i32:n"), sizes={"n": N},
         note="the barrier after the grid-stride loop is outside it: every thread reaches it"),

    case("v_warp_reduce_no_barrier", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(&out[blockIdx.x], v);
}""", {"load": "coalesced", "store": None, "atomics": True, **MEM}, grid=(1 << 14,), block=(256,),
         args=("in:n", "out:1 << 14", "i32:n"), sizes={"n": N}),
)
