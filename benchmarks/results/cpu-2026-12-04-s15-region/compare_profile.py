"""The referee's comparison on a realistic output set, timed on the CPU: a dozen outputs as one job ships
them (one 4096x4096 float32, five 1024x1025, six 17x999), each compared with its reference under the
default tolerances (`correctness.compare`) and its inputs checked the way a judge does when the worker
shipped no inputs after the call (`mutated_positions(inputs, inputs)`). Prints the median seconds per job
over `--repeats` and a digest of every verdict (ok, figures, message), so that two trees can be compared:

    PYTHONPATH=<tree>/src python3 compare_profile.py --repeats 5
"""

from __future__ import annotations

import argparse
import hashlib
import math
import statistics
import time

import torch

import cudaperf
from cudaperf.correctness import compare, mutated_positions


def output_set() -> list[tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]]:
    gen = torch.Generator().manual_seed(7)
    shapes = [(4096, 4096)] + [(1024, 1025)] * 5 + [(17, 999)] * 6
    items = []
    for i, shape in enumerate(shapes):
        ref = torch.randn(shape, generator=gen)
        out = ref + 1e-6 * torch.randn(shape, generator=gen)
        if i % 3 == 1:
            out.view(-1)[i * 37] += 1.0  # a wrong element: the failure message too
        if i % 4 == 2:
            out.view(-1)[i] = math.nan
        items.append((out, ref, [torch.randn(shape, generator=gen)]))
    return items


def job(items) -> list:
    verdicts = []
    for out, ref, inputs in items:
        verdicts.append(compare(out, ref, None))
        mutated_positions(inputs, inputs)
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(2)
    items = output_set()
    verdicts = job(items)  # warm
    seconds = []
    for _ in range(args.repeats):
        began = time.perf_counter()
        job(items)
        seconds.append(time.perf_counter() - began)
    digest = hashlib.sha256(repr([(v.ok, v.max_abs_error, v.max_rel_error, v.mismatch_fraction, v.message)
                                  for v in verdicts]).encode()).hexdigest()[:16]
    print(f"tree {cudaperf.__file__}")
    print(f"compare, median s per job of 12 outputs: {statistics.median(seconds):.3f} "
          f"(min {min(seconds):.3f}, max {max(seconds):.3f}, {args.repeats} repeats)")
    print(f"verdicts: {[v.ok for v in verdicts]}; digest {digest}")
    for v in verdicts:
        if not v.ok:
            print(f"  {v.message[:160]}")


if __name__ == "__main__":
    main()
