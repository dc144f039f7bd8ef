"""Global-memory cases: coalesced, offset, strided, column-major, broadcast, indirect and vector accesses."""

from __future__ import annotations

from cudaperf.analysis.validation import case

N = 1 << 22  # 16 MB of float32 per array: well past L1, streamed from DRAM
ROWS = COLS = 2048
BLOCK = (256,)
GRID_N = (N // 256,)
MEM = {"regime": "memory"}

CASES = (
    case("v_copy_coalesced", """(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}""", {"load": "coalesced", "store": "coalesced", **MEM}, grid=GRID_N, block=BLOCK,
         args=("in:n", "out:n", "i32:n"), sizes={"n": N}),

    case("v_copy_offset", """(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i + 1 < n) out[i] = in[i + 1];   // shifted by one element: still one contiguous run per warp
}""", {"load": "coalesced", "store": "coalesced", **MEM}, grid=GRID_N, block=BLOCK,
         args=("in:n", "out:n", "i32:n"), sizes={"n": N}),

    case("v_copy_stride2", """(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[2 * i];
}""", {"load": "strided", "store": "coalesced", **MEM}, grid=(N // 2 // 256,), block=BLOCK,
         args=("in:n", "out:n // 2", "i32:n // 2"), sizes={"n": N}),

    case("v_copy_stride32", """(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i * 32];
}""", {"load": "strided", "store": "coalesced", **MEM}, grid=(N // 32 // 256,), block=BLOCK,
         args=("in:n", "out:n // 32", "i32:n // 32"), sizes={"n": N}),

    case("v_store_stride4", """(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i * 4] = in[i];
}""", {"load": "coalesced", "store": "strided", **MEM}, grid=(N // 4 // 256,), block=BLOCK,
         args=("in:n // 4", "out:n", "i32:n // 4"), sizes={"n": N}),

    case("v_transpose_naive", """(const float* in, float* out, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (col < cols) out[col * rows + row] = in[row * cols + col];   // the store walks a column
}""", {"load": "coalesced", "store": "uncoalesced", **MEM}, grid=(COLS // 256, ROWS), block=BLOCK,
         args=("in:rows * cols", "out:rows * cols", "i32:rows", "i32:cols"),
         sizes={"rows": ROWS, "cols": COLS}),

    case("v_column_sum", """(const float* in, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;    // one thread per row, summing along the row
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += in[r * cols + c];
    out[r] = s;
}""", {"load": "uncoalesced", "store": "coalesced", **MEM}, grid=(ROWS // 256,), block=BLOCK,
         args=("in:rows * cols", "out:rows", "i32:rows", "i32:cols"), sizes={"rows": ROWS, "cols": COLS}),

    case("v_row_sum_coalesced", """(const float* in, float* out, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;    // one thread per column: lanes read along a row
    if (c >= cols) return;
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s += in[r * cols + c];
    out[c] = s;
}""", {"load": "coalesced", "store": "coalesced", **MEM}, grid=(COLS // 256,), block=BLOCK,
         args=("in:rows * cols", "out:cols", "i32:rows", "i32:cols"), sizes={"rows": ROWS, "cols": COLS}),

    case("v_broadcast_scale", """(const float* in, const float* scale, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * scale[blockIdx.x];     // every lane reads the same word
}""", {"load": "broadcast", "store": "coalesced", **MEM}, grid=GRID_N, block=BLOCK,
         args=("in:n", "in:n / 256", "out:n", "i32:n"), sizes={"n": N}),

    case("v_gather_indirect", """(const float* in, const int* idx, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[idx[i]];                   // the address depends on loaded data
}""", {"load": "unknown", "store": "coalesced", **MEM}, grid=GRID_N, block=BLOCK,
         args=("in:n", "idx:n:n", "out:n", "i32:n"), sizes={"n": N}),

    case("v_copy_float4", """(const float4* __restrict__ in, float4* __restrict__ out, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) out[i] = in[i];
}""", {"load": "coalesced", "store": "coalesced", "vectorized": True, **MEM},
         grid=(N // 4 // 256,), block=BLOCK, args=("in:n", "out:n", "i32:n // 4"),
         sizes={"n4": N // 4, "n": N}, access_bytes=16),

    case("v_copy_float2_cast", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * i + 1 < n) {
        float2 v = reinterpret_cast<const float2*>(in)[i];
        reinterpret_cast<float2*>(out)[i] = v;
    }
}""", {"load": "coalesced", "store": "coalesced", "vectorized": True, **MEM},
         grid=(N // 2 // 256,), block=BLOCK, args=("in:n", "out:n", "i32:n"), sizes={"n": N}, access_bytes=8),

    case("v_coarsened_scalar", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;    // 4 consecutive floats per thread, scalar loads
    if (4 * i + 3 < n) {
        for (int k = 0; k < 4; ++k) out[4 * i + k] = in[4 * i + k] * 3.0f;
    }
}""", {"load": "strided", "store": "strided", "window": True, **MEM}, grid=(N // 4 // 256,), block=BLOCK,
         args=("in:n", "out:n", "i32:n"), sizes={"n": N},
         note="a per-thread window: each request strided by 4, the 4 requests share their sectors"),

    case("v_window_statements", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;    // a window of 2 written out as two statements
    if (2 * i + 1 < n) out[i] = in[2 * i] + in[2 * i + 1];
}""", {"load": "strided", "store": "coalesced", "window": True, **MEM}, grid=(N // 2 // 256,), block=BLOCK,
         args=("in:n", "out:n // 2", "i32:n"), sizes={"n": N}),

    case("v_window_partial", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;    // 2 of every 4 floats: half of each sector unused
    if (4 * i + 1 < n) {
        float s = 0.0f;
        for (int k = 0; k < 2; ++k) s += in[4 * i + k];
        out[i] = s;
    }
}""", {"load": "strided", "store": "coalesced", **MEM}, grid=(N // 4 // 256,), block=BLOCK,
         args=("in:n", "out:n // 4", "i32:n"), sizes={"n": N},
         note="not a window: the strided requests share sectors but leave half of each unused"),

    case("v_stencil_clamp_helper", """(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;    // loads through a macro and a __device__ clamp
    if (i < n) out[i] = AT(i - 1) + AT(i) + AT(i + 1);
}""", {"load": "coalesced", "store": "coalesced", **MEM}, grid=GRID_N, block=BLOCK,
         args=("in:n", "out:n", "i32:n"), sizes={"n": N},
         prelude=("__device__ __forceinline__ int clampi(int v, int lo, int hi) "
                  "{ return v < lo ? lo : (v > hi ? hi : v); }\n"
                  "#define AT(j) in[clampi((j), 0, n - 1)]\n")),

    case("v_grid_stride_saxpy", """(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}""", {"load": "coalesced", "store": "coalesced", **MEM}, grid=(1056,), block=BLOCK,
         args=("in:n", "out:n", "f32:2.0", "i32:n"), sizes={"n": N}),
)
