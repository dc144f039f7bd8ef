"""A loop over one segment of an offsets array (`p = off[i]; p < off[i + 1]`: a CSR row, a bag) counts its
mean trip once the arrays' lengths are bound (`numel(name)`), and once (as before) where they are not."""

from __future__ import annotations

from cudaperf.analysis.analyze import analyze_source

SPMV = r'''
extern "C" __global__ void spmv(const int* row_ptr, const int* col_idx, const float* vals, const float* xv,
                                float* c, int rows) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows) {
        float acc = 0;
        for (int p = row_ptr[i]; p < row_ptr[i + 1]; ++p) acc += vals[p] * xv[col_idx[p]];
        c[i] = acc;
    }
}
'''
LAUNCH = {"spmv": {"grid": (391, 1, 1), "block": (256, 1, 1), "smem_bytes": 0}}


def _requests(sizes: dict) -> list[float]:
    report = analyze_source(SPMV, sizes=sizes, launch=LAUNCH, compile=False, sass=False)
    return [g["requests"] for g in report.details[0].global_accesses]


def test_a_segment_loop_runs_the_mean_segment_when_the_lengths_are_bound():
    requests = _requests({"rows": 99991, "numel(row_ptr)": 99992, "numel(vals)": 1_000_003})
    assert max(requests) == 1_000_003 / 99991


def test_a_segment_loop_counts_once_without_the_lengths():
    assert set(_requests({"rows": 99991})) == {1.0}


def test_the_offsets_themselves_are_read_once_per_thread():
    requests = _requests({"rows": 99991, "numel(row_ptr)": 99992, "numel(vals)": 1_000_003})
    assert sorted(requests)[:3] == [1.0, 1.0, 1.0]
