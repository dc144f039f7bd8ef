"""A CPU stand-in for `cudaperf.cuda` (tests only): runs fast-format kernels on CPU tensors, so that the
generated implementations can be checked against their PyTorch reference on a machine without a GPU.

How: the kernel source is compiled with the host C++ compiler after a small rewrite (`__shared__` becomes
`static`, dynamic shared memory a pointer into a per-launch buffer) and a prelude that defines the CUDA
built-ins the dataset kernels use. Blocks run one after another; inside a block, when the source
synchronises (`__syncthreads`, `__shfl_*_sync`), every CUDA thread is a ucontext fiber and the
barriers are counted (a thread that has exited counts as arrived, as on sm_70+); otherwise threads run as
plain calls. Atomics are plain read-modify-writes (fibers never switch inside one).

Checks made at launch (each raises `EmulationError`): barrier deadlock, a full-mask shuffle in a warp with
exited lanes, writes outside a tensor argument (each tensor is copied into a buffer with guard bytes on
both sides; reads outside read the guard pattern 0x7F7F7F7F, a huge float, into the results).

Why hand-written: no maintained CPU runtime for CUDA C exists in our dependencies (HIP-CPU needs TBB and a
HIP port of the source; GPU simulators need a GPU-like toolchain), and the dataset kernels use a small
subset of CUDA.

WMMA: float (TF32) and double fragments, each thread computing the warp's whole tile (see the prelude); a
TF32 multiply-add truncates as the tensor cores do (inputs to 19 bits, the aligned sum toward zero).

Not covered: memory-model effects (no races are detected), warp-synchronous code without `_sync`
intrinsics, half / bf16 / integer WMMA, textures, cooperative groups, templates launched by name expression,
timing of any kind.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

from cudaperf.toolchain.signature import POINTER, parse_kernels

GUARD_BYTES = 4096
_GUARD_VALUE = 0x7F

PRELUDE = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <functional>
#include <vector>

struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x, y, z; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }

namespace emu {
struct Fiber { ucontext_t ctx; uint3 tid; int lane, warp; bool done; };
struct Barrier { int arrived, live; unsigned gen; };
static Fiber* cur;
static uint3 blk;
static dim3 bdim, gdim;
static ucontext_t sched;
static char* dyn_smem;
static Barrier block_bar;
static std::vector<Barrier> warp_bars;
static std::vector<uint64_t> slots;
static unsigned long long progress;
static int error;  // 0 ok, 2 partial-warp shuffle
static std::function<void()> body;

static void yield_() { swapcontext(&cur->ctx, &sched); }
static void arrive(Barrier& b) {
    unsigned g = b.gen;
    ++progress;
    if (++b.arrived >= b.live) { b.arrived = 0; ++b.gen; return; }
    while (b.gen == g) yield_();
}
static void depart(Barrier& b) {
    --b.live;
    if (b.arrived > 0 && b.arrived >= b.live) { b.arrived = 0; ++b.gen; }
}
static void trampoline() {
    body();
    cur->done = true;
    ++progress;
    depart(block_bar);
    depart(warp_bars[cur->warp]);
    swapcontext(&cur->ctx, &sched);
}
template <class T> static T exchange(T v, int src) {
    Barrier& wb = warp_bars[cur->warp];
    if (wb.live != 32) { error = 2; }
    int base = cur->warp * 32;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    slots[base + cur->lane] = bits;
    arrive(wb);
    T r;
    bits = slots[base + src];
    memcpy(&r, &bits, sizeof(T));
    arrive(wb);
    return r;
}

static int run(dim3 g, dim3 b, unsigned long long smem, bool fibers) {
    gdim = g; bdim = b; error = 0;
    int n = (int)(b.x * b.y * b.z), nw = (n + 31) / 32;
    std::vector<char> dyn(smem + 64);
    dyn_smem = dyn.data();
    std::vector<Fiber> fs(n);
    const size_t stack_bytes = 1 << 16;
    std::vector<char> stacks(fibers ? (size_t)n * stack_bytes : 0);
    for (unsigned bz = 0; bz < g.z; ++bz) for (unsigned by = 0; by < g.y; ++by)
    for (unsigned bx = 0; bx < g.x; ++bx) {
        blk = uint3{bx, by, bz};
        for (int t = 0; t < n; ++t) {
            fs[t].tid = uint3{(unsigned)(t % b.x), (unsigned)(t / b.x % b.y), (unsigned)(t / (b.x * b.y))};
            fs[t].lane = t % 32; fs[t].warp = t / 32; fs[t].done = false;
        }
        if (!fibers) {
            for (int t = 0; t < n; ++t) { cur = &fs[t]; body(); }
            continue;
        }
        block_bar = Barrier{0, n, 0};
        warp_bars.assign(nw, Barrier{0, 0, 0});
        for (int w = 0; w < nw; ++w) warp_bars[w].live = (n - 32 * w < 32) ? n - 32 * w : 32;
        slots.assign((size_t)nw * 32, 0);
        for (int t = 0; t < n; ++t) {
            getcontext(&fs[t].ctx);
            fs[t].ctx.uc_stack.ss_sp = stacks.data() + (size_t)t * stack_bytes;
            fs[t].ctx.uc_stack.ss_size = stack_bytes;
            fs[t].ctx.uc_link = &sched;
            makecontext(&fs[t].ctx, trampoline, 0);
        }
        int remaining = n;
        while (remaining) {
            unsigned long long before = progress;
            for (int t = 0; t < n; ++t) {
                if (fs[t].done) continue;
                cur = &fs[t];
                swapcontext(&sched, &fs[t].ctx);
                if (fs[t].done) --remaining;
                if (error) return error;
            }
            if (remaining && progress == before) return 1;  // every live thread waits: deadlock
        }
    }
    return error;
}
struct P { void* p; template <class T> operator T*() const { return (T*)p; } };
}  // namespace emu

#define threadIdx (emu::cur->tid)
#define blockIdx (emu::blk)
#define blockDim (emu::bdim)
#define gridDim (emu::gdim)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

static inline void __syncthreads() { emu::arrive(emu::block_bar); }
template <class T> static inline T __shfl_sync(unsigned, T v, int src) { return emu::exchange(v, src & 31); }
template <class T> static inline T __shfl_up_sync(unsigned, T v, unsigned d) {
    int l = emu::cur->lane; return emu::exchange(v, l >= (int)d ? l - (int)d : l);
}
template <class T> static inline T __shfl_down_sync(unsigned, T v, unsigned d) {
    int l = emu::cur->lane; return emu::exchange(v, l + (int)d < 32 ? l + (int)d : l);
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int m) {
    return emu::exchange(v, (emu::cur->lane ^ m) & 31);
}
static inline float atomicAdd(float* p, float v) { float o = *p; *p = o + v; return o; }
static inline int atomicAdd(int* p, int v) { int o = *p; *p = o + v; return o; }
static inline unsigned atomicAdd(unsigned* p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __int_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
#define __align__(n) __attribute__((aligned(n)))

// WMMA (mma.h), float (TF32) and double fragments: every thread of the warp holds and computes the WHOLE
// tile (the hardware spreads it over the lanes in an unspecified order), so element-wise code over
// `num_elements` and the warp-collective load / mma / store give the same results as on the GPU.
namespace nvcuda { namespace wmma {
struct row_major {}; struct col_major {}; struct matrix_a {}; struct matrix_b {}; struct accumulator {};
namespace precision { struct tf32 {}; }
enum layout_t { mem_row_major, mem_col_major };
template <class T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };
template <class Use, int M, int N, int K> struct shape;
template <int M, int N, int K> struct shape<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct shape<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct shape<accumulator, M, N, K> { enum { rows = M, cols = N }; };
template <class L> struct is_col { enum { value = 0 }; };
template <> struct is_col<col_major> { enum { value = 1 }; };
template <class Use, int M, int N, int K, class T, class L = void> struct fragment {
    typedef typename storage<T>::type element;
    enum { rows = shape<Use, M, N, K>::rows, cols = shape<Use, M, N, K>::cols, num_elements = rows * cols,
           col = is_col<L>::value };
    element x[rows * cols];
};
template <class F, class V> static inline void fill_fragment(F& f, V v) {
    for (int t = 0; t < F::num_elements; ++t) f.x[t] = v;
}
template <class F, class E> static inline void load_matrix_sync(F& f, const E* p, unsigned ldm) {
    for (int r = 0; r < F::rows; ++r)
        for (int c = 0; c < F::cols; ++c) f.x[r * F::cols + c] = F::col ? p[c * ldm + r] : p[r * ldm + c];
}
template <class F, class E> static inline void store_matrix_sync(E* p, const F& f, unsigned ldm, layout_t l) {
    for (int r = 0; r < F::rows; ++r)
        for (int c = 0; c < F::cols; ++c)
            (l == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[r * F::cols + c];
}
// TF32 inputs with an fp32 accumulator, as the tensor cores add (measured on V100 / T4 / A100 by Fasi et
// al., 2021): each input keeps its top 19 bits, the products are exact, every term is aligned to the
// largest one and cut to 24 bits toward zero, and the sum is cut to fp32 toward zero. The truncation is
// biased, so a long k loop accumulated in one fragment drifts (seen on the H200).
static inline float tf32_bits(float v) {
    unsigned u; memcpy(&u, &v, 4); u &= 0xFFFFE000u; memcpy(&v, &u, 4); return v;
}
static inline float mma_dot(float c, const float* a, const float* b, int n, int b_stride) {
    double t[17]; int terms = 0; t[terms++] = c;
    for (int p = 0; p < n && p < 16; ++p)
        t[terms++] = (double)tf32_bits(a[p]) * (double)tf32_bits(b[p * b_stride]);
    int emax = -100000;
    for (int i = 0; i < terms; ++i) if (t[i] != 0.0 && ilogb(t[i]) > emax) emax = ilogb(t[i]);
    if (emax == -100000) return 0.0f;
    double q = ldexp(1.0, emax - 23), sum = 0.0;
    for (int i = 0; i < terms; ++i) sum += trunc(t[i] / q) * q;
    float f = (float)sum;
    return fabs((double)f) > fabs(sum) ? nextafterf(f, 0.0f) : f;
}
// DMMA: IEEE double fused multiply-adds.
static inline double mma_dot(double c, const double* a, const double* b, int n, int b_stride) {
    for (int p = 0; p < n; ++p) c = fma(a[p], b[p * b_stride], c);
    return c;
}
template <class D, class A, class B, class C>
static inline void mma_sync(D& d, const A& a, const B& b, const C& c) {
    typename D::element out[D::num_elements], column[A::cols];
    for (int j = 0; j < D::cols; ++j) {
        for (int p = 0; p < A::cols; ++p) column[p] = b.x[p * B::cols + j];
        for (int i = 0; i < D::rows; ++i)
            out[i * D::cols + j] = mma_dot(c.x[i * D::cols + j], &a.x[i * A::cols], column, A::cols, 1);
    }
    for (int t = 0; t < D::num_elements; ++t) d.x[t] = out[t];
}
static inline float __float_to_tf32(float v) {  // round to 10 mantissa bits, ties away from zero
    unsigned u; memcpy(&u, &v, 4); u = (u + 0x1000u) & 0xFFFFE000u; memcpy(&v, &u, 4); return v;
}
}}  // namespace nvcuda::wmma
"""

_EXTERN_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?(\w+)\s+(\w+)\s*\[\s*\]\s*;")


class EmulationError(RuntimeError):
    pass


def host_source(source: str) -> str:
    """The kernel source rewritten for the host compiler, prelude and launch wrappers included."""
    body = _EXTERN_SHARED.sub(r"\1* \2 = (\1*)emu::dyn_smem;", source).replace("#include <mma.h>", "")
    body = body.replace("__shared__", "static")
    wrappers = []
    for name, sig in parse_kernels(source).items():
        args = ", ".join(f"emu::P{{a[{i}]}}" if p.kind == POINTER else f"*({p.c_type}*)a[{i}]"
                         for i, p in enumerate(sig.params))
        wrappers.append(
            f'extern "C" int emu_launch_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned '
            'bx, unsigned by, '
            f"unsigned bz, unsigned long long smem, void** a, int fibers) {{\n"
            f"    emu::body = [a] {{ {name}({args}); }};\n"
            f"    return emu::run(dim3{{gx, gy, gz}}, dim3{{bx, by, bz}}, smem, fibers != 0);\n}}\n")
    return PRELUDE + "\n#line 1\n" + body + "\n" + "".join(wrappers)


def _cache_dir() -> Path:
    d = Path(os.environ.get("CUDAPERF_EMU_CACHE", Path(tempfile.gettempdir()) / "cudaperf_cpu_cuda"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def build(source: str) -> Path:
    """Compile `source` to a shared library (cached by content); raises EmulationError with the log."""
    text = host_source(source)
    key = hashlib.sha256(text.encode()).hexdigest()[:20]
    lib = _cache_dir() / f"{key}.so"
    if lib.exists():
        return lib
    src = lib.with_suffix(".cpp")
    src.write_text(text)
    tmp = lib.with_suffix(f".{os.getpid()}.tmp")
    proc = subprocess.run(["g++", "-std=c++17", "-O1", "-ffp-contract=off", "-fno-fast-math", "-shared",
                           "-fPIC",
                           "-w", "-o", str(tmp), str(src)], check=False, capture_output=True, text=True)
    if proc.returncode:
        raise EmulationError(f"host compile failed:\n{proc.stderr[-4000:]}")
    tmp.replace(lib)
    return lib


def _dim3(v) -> tuple[int, int, int]:
    t = (v,) if isinstance(v, int) else tuple(v)
    return (*t, *(1,) * (3 - len(t)))


_SCALARS = {"int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "int64": ctypes.c_int64,
            "uint64": ctypes.c_uint64,
            "float32": ctypes.c_float, "float64": ctypes.c_double, "bool_": ctypes.c_bool}


class _Guarded:
    """A tensor argument copied into a buffer with guard bytes on both sides, copied back after the launch."""

    def __init__(self, tensor):
        import torch

        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            raise EmulationError("tensor arguments must be contiguous CPU tensors here")
        self.tensor = tensor
        self.bytes = tensor.reshape(-1).view(torch.uint8)
        n = self.bytes.numel()
        self.buf = torch.full((n + 2 * GUARD_BYTES,), _GUARD_VALUE, dtype=torch.uint8)
        self.buf[GUARD_BYTES:GUARD_BYTES + n].copy_(self.bytes)
        self.address = self.buf.data_ptr() + GUARD_BYTES

    def finish(self, label: str) -> None:
        n = self.bytes.numel()
        if bool((self.buf[:GUARD_BYTES] != _GUARD_VALUE).any()) or bool(
                (self.buf[GUARD_BYTES + n:] != _GUARD_VALUE).any()):
            raise EmulationError(f"write outside the tensor passed as `{label}`")
        self.bytes.copy_(self.buf[GUARD_BYTES:GUARD_BYTES + n])


class Kernel:
    def __init__(self, lib: ctypes.CDLL, name: str, params, fibers: bool):
        self.name, self.params, self.fibers = name, params, fibers
        self.fn = getattr(lib, f"emu_launch_{name}")
        self.fn.restype = ctypes.c_int

    def __call__(self, grid, block, *args, smem_bytes: int = 0, stream=None) -> None:
        import torch

        if len(args) != len(self.params):
            raise EmulationError(f"{self.name} takes {len(self.params)} arguments, {len(args)} given")
        slots = (ctypes.c_void_p * max(1, len(args)))()
        keep, guarded = [], []
        for i, (p, a) in enumerate(zip(self.params, args)):
            if p.kind == POINTER:
                if a is None:
                    slots[i] = None
                elif isinstance(a, torch.Tensor):
                    g = _Guarded(a)
                    guarded.append((p.name, g))
                    slots[i] = g.address
                else:
                    raise EmulationError(f"{p.name}: pointer argument must be a tensor or None")
            else:
                value = _SCALARS[p.kind](a)
                keep.append(value)
                slots[i] = ctypes.cast(ctypes.pointer(value), ctypes.c_void_p)
        gx, gy, gz = _dim3(grid)
        bx, by, bz = _dim3(block)
        rc = self.fn(gx, gy, gz, bx, by, bz, ctypes.c_ulonglong(smem_bytes), slots, int(self.fibers))
        if rc == 1:
            raise EmulationError(f"{self.name}: barrier deadlock")
        if rc == 2:
            raise EmulationError(f"{self.name}: full-mask shuffle in a warp with exited lanes")
        for label, g in guarded:
            g.finish(label)


class Module:
    def __init__(self, source: str):
        self._lib = ctypes.CDLL(str(build(source)))
        fibers = "__syncthreads" in source or "__shfl" in source
        self._kernels = {name: Kernel(self._lib, name, sig.params, fibers)
                         for name, sig in parse_kernels(source).items()}

    def __getattr__(self, name: str) -> Kernel:
        try:
            return self._kernels[name]
        except KeyError:
            raise AttributeError(name) from None


class CpuCuda:
    """Drop-in for the `cuda` name of a fast-format solution: `load(SOURCE)` and `compile(SOURCE, name)`."""

    def __init__(self):
        self._modules: dict[str, Module] = {}

    def load(self, source: str, **_: object) -> Module:
        if source not in self._modules:
            self._modules[source] = Module(source)
        return self._modules[source]

    def compile(self, source: str, name: str, **_: object) -> Kernel:
        return getattr(self.load(source), name)
