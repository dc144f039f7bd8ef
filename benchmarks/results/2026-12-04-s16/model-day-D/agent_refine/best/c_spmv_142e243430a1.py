# cudaperf-task: c_spmv_142e243430a1
# best of the run: sample 0, turn 1, invalid_solution, reward 0.000
import numpy as np
from cudaperf import cuda

def spmv_csr(x, y, a, n):
    for blockIdx, blockIdxList in enumerate(range(len(x))):
        cuda.scale_kernel(x, y, a, n, n)
