"""Fault tolerance: a batch of ≥ 100 candidates of which a quarter crash, hang, corrupt memory or are
otherwise broken, evaluated in one batch through the JSONL store.

Checks (issue 2): zero results lost (one JSONL line per candidate), every fault classified with the
expected outcome, every honest candidate still correct after the faults around it. Timing is off
(correctness is what the faults can disturb); the stage deadline is short so hangs cost little.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import example_pairs, write_result

from cudaperf.solutions import solution_from_text

_HEAD = '''import torch
from cudaperf import cuda

SRC = r"""
extern "C" __global__ void k(const float* a, const float* b, float* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    %s
}
"""
_k = cuda.compile(SRC, "k")


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, a, b):
        out = torch.empty_like(a)
        n = a.numel()
        %s
        _k(((n + 255) // 256,), (256,), a, b, out, n)
        return out
'''

# name -> (kernel body, forward prelude, accepted outcomes)
FAULTS = {
    "illegal_address": ("if (i < n) out[i + (1ll << 40)] = a[i] + b[i];", "", {"cuda_error"}),
    # A loop on a volatile local finishes on an H200 (dev/LOG.md, evaluation: throughput); a volatile
    # global load that is never NaN (inputs are randn) keeps the kernel spinning.
    "infinite_loop": (("while (*(volatile const float*)a == *(volatile const float*)a) {} "
                       "if (i < n) out[i] = a[i] + b[i];"), "",
                      {"timeout"}),
    "corrupt_memory": ("if (i < n) { out[i] = a[i] + b[i]; out[i + 3 * n + 1000000] = 0.f; }", "",
                       {"cuda_error", "incorrect", "crash"}),
    "python_exception": ("if (i < n) out[i] = a[i] + b[i];", "raise ValueError('bad shape')",
                         {"runtime_error"}),
    "gpu_oom": ("if (i < n) out[i] = a[i] + b[i];", "torch.empty(1 << 45, device=a.device)",
                {"out_of_memory"}),
    "wrong_answer": ("if (i < n) out[i] = a[i] - b[i];", "", {"incorrect"}),
}
SIMPLE_FAULTS = {
    "syntax_error": ("def ModelNew(:\n    pass\n", {"syntax_error"}),
    "no_model_new": ("import torch\n\nclass Model2(torch.nn.Module):\n    pass\n", {"invalid_solution"}),
    "compile_error": (_HEAD.replace("const float* a", "const flot* a") % ("", ""), {"compile_error"}),
    "huge_output": (("import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n"
                     "        return torch.empty(3 << 30, device=a.device)\n"),
                    {"output_too_large", "incorrect"}),
}
SEGFAULT_INLINE = r'''import torch
from torch.utils.cpp_extension import load_inline

cpp = "torch::Tensor crash(torch::Tensor a);"
cu = r"""
#include <torch/extension.h>
torch::Tensor crash(torch::Tensor a) {
    volatile int* p = nullptr;
    *p = 1;   // host-side null dereference: SIGSEGV in the worker
    return a;
}
"""
ext = load_inline(name="cudaperf_fault_segv", cpp_sources=cpp, cuda_sources=cu, functions=["crash"])


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return ext.crash(a)
'''


def _log_tail(result) -> str:
    """The end of the build log and worker logs, so a misclassification can be understood from the JSON."""
    parts = [result.build.log if result.build else "", result.logs]
    return "\n".join(p for p in parts if p)[-1500:]


def fault_candidates(task, count: int) -> list[tuple]:
    names = list(FAULTS) + list(SIMPLE_FAULTS) + ["segfault"]
    out = []
    for i in range(count):
        name = names[i % len(names)]
        if name in FAULTS:
            body, prelude, ok = FAULTS[name]
            src = _HEAD % (body + f" // fault {i}", prelude or "pass")
        elif name in SIMPLE_FAULTS:
            src, ok = SIMPLE_FAULTS[name]
            src = src + f"\n# fault {i}\n"
        else:
            src, ok = SEGFAULT_INLINE, {"crash"}
        out.append((task, solution_from_text(src, f"fault-{name}-{i}"), ok))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--honest", type=int, default=75)
    ap.add_argument("--faulty", type=int, default=25)
    ap.add_argument("--out", default=None)
    ap.add_argument("--store", default=None,
                    help="JSONL result store (default: a temporary file); kept, so a cut-off run shows "
                         "its results")
    args = ap.parse_args()
    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
    from cudaperf.results import ResultStore

    honest = [(t, s, {"correct"}) for t, s in example_pairs("fast", args.honest)]
    vector_add = next(t for t, _s, _ok in honest if t.task_id == "vector_add")
    batch = honest + fault_candidates(vector_add, args.faulty)
    random.Random(0).shuffle(batch)
    expected = {s.solution_id: ok for _t, s, ok in batch}
    config = EvalConfig(device="cuda", timing=TimingConfig(enabled=False), coverage=False,
                        max_output_bytes=1 << 30,
                        stage_timeouts_s={"correctness": 20.0, "construct": 20.0})
    with tempfile.TemporaryDirectory() as tmp:
        store_path = Path(args.store) if args.store else Path(tmp) / "results.jsonl"
        store_path.unlink(missing_ok=True)  # a fresh batch: the store must hold this run's results only
        store = ResultStore(store_path)
        t0 = time.perf_counter()
        with Evaluator(config) as ev:
            for _ in ev.evaluate_many([(t, s) for t, s, _ok in batch], store=store, progress=False):
                pass
        wall = time.perf_counter() - t0
        stored = store.load()
    got = {r.solution_id: r for r in stored}
    lost = sorted(set(expected) - set(got))
    misclassified = [(sid, got[sid].outcome.value, sorted(ok), got[sid].message[:200],
                      _log_tail(got[sid]))
                     for sid, ok in expected.items() if sid in got and got[sid].outcome.value not in ok]
    honest_ids = [s.solution_id for _t, s, ok in batch if ok == {"correct"}]
    honest_ok = sum(1 for sid in honest_ids if sid in got and got[sid].correct)
    payload = {"candidates": len(batch), "faulty": args.faulty, "wall_s": wall, "lost": lost,
               "misclassified": misclassified, "honest_correct": honest_ok, "honest": len(honest_ids),
               "outcomes": {sid: r.outcome.value for sid, r in got.items()}}
    write_result(args.out, payload)
    for m in misclassified:
        print("misclassified:", m)
    print("\n| faults batch | value | target |\n|---|---|---|")
    print(f"| candidates (faulty) | {len(batch)} ({args.faulty}) | ≥ 100 (a quarter) |")
    print(f"| results lost | {len(lost)} | 0 |")
    fault_ids = set(expected) - set(honest_ids)
    fault_ok = sum(1 for sid in fault_ids if sid in got and got[sid].outcome.value in expected[sid])
    print(f"| faults classified as expected | {fault_ok}/{len(fault_ids)} | all |")
    print(f"| honest candidates correct | {honest_ok}/{len(honest_ids)} | all |")
    print(f"| wall time | {wall:.0f} s | |")
    return 0 if not lost and not misclassified else 1


if __name__ == "__main__":
    sys.exit(main())
