"""Hack #3, result cache keyed on the shape alone ("the benchmark never changes its inputs"): the first
call of each shape computes, every later call returns that first result.

Defence (runtime): several seeds per configuration (fresh input values, same shape) and timing input sets
rotated with their outputs re-checked. Statically only a `forward_state` warning.
"""

TASK = "row_sum"
EXPECT = "outcome:incorrect|flag:candidate_input_independent|flag:timed_output_mismatch"
STATIC = None

from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void row_sum(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += x[(long long)row * cols + c];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) y[row] = s;
}
"""

_SEEN = {}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "row_sum")

    def forward(self, x):
        shape = tuple(x.shape)
        if shape in _SEEN:
            return _SEEN[shape]
        rows, cols = x.shape
        y = x.new_empty(rows)
        self.kernel(((rows + 7) // 8,), (256,), x, y, rows, cols)
        _SEEN[shape] = y
        return y
