"""A model, not a measurement: the RL mode's gate as a discrete-event simulation, to choose what to try on
the GPU (where minutes are scarce) before trying it.

W workers each take a candidate, check it holding the gate shared (C seconds, log-normal around the
median), then, if it is correct (probability p), time it holding the gate exclusively (T seconds), then
spend O seconds outside the gate before the next; a timed candidate is a carrier (a task's baselines
all timed again: K seconds instead of T) with probability q. Policies: "writers-first"
(`eval_modes.GpuGate`: once a timed pass waits, no new check starts) and "batch" (a waiting timed pass
closes the gate to new checks only once k of them wait, the oldest has waited tau seconds, or no check
is left to run). Printed: evaluations per minute, median over seeds, for a grid of W, C, T and policies
(`--carriers`: of W and q, writers first; `--segments`: of W, C and the pieces a check gives the gate back
between). Not modelled: checks slowing each other down as more run at
once, the parent's own time (its GIL), builds.

    python benchmarks/rl_gate_model.py            # the H200's session-20 figures: C 0.49 s, T 0.2 s, p 0.65
    python benchmarks/rl_gate_model.py --carriers # K 1.4 s (a carrier's timing stage, default mode, s20)
    python benchmarks/rl_gate_model.py --segments # checks giving the gate back between pieces
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Model:
    workers: int
    check_s: float = 0.49
    timed_s: float = 0.2
    correct: float = 0.65
    outside_s: float = 0.03
    carrier_p: float = 0.0  # the share of timed candidates that are carriers
    carrier_s: float = 1.4  # a carrier's timed pass (the default mode's timing stage on the H200, s20)
    policy: str = "writers-first"
    batch: int = 2
    max_wait_s: float = 0.3
    segments: int = 1  # a check gives the gate back between this many equal pieces (1: held throughout)


def simulate(m: Model, candidates: int = 400, seed: int = 0) -> float:
    """Evaluations per minute of one simulated batch."""
    rng = random.Random(seed)
    jobs = [(m.check_s * rng.lognormvariate(0, 0.4), rng.random() < m.correct,
             m.carrier_s if m.carrier_p and rng.random() < m.carrier_p else m.timed_s)
            for _ in range(candidates)]
    events: list[tuple[float, int, str, int]] = []
    counter = [0]

    def push(at: float, kind: str, worker: int) -> None:
        counter[0] += 1
        heapq.heappush(events, (at, counter[0], kind, worker))

    job_of: dict[int, tuple[float, bool, float]] = {}
    left: dict[int, float] = {}  # a check's time still to run
    to_check: list[int] = []
    waiting: list[tuple[float, int]] = []
    readers, writing, taken, now = 0, False, 0, 0.0
    for w in range(m.workers):
        push(0.0, "start", w)
    while events:
        now, _, kind, w = heapq.heappop(events)
        if kind == "start" and taken < candidates:
            job_of[w], taken = jobs[taken], taken + 1
            left[w] = job_of[w][0]
            to_check.append(w)
        elif kind == "piece":
            readers -= 1
            if left[w] > 1e-12:  # the gate given back between pieces: the rest waits its turn
                to_check.append(w)
            elif job_of[w][1]:
                waiting.append((now, w))
            else:
                push(now + m.outside_s, "start", w)
        elif kind == "timed":
            writing = False
            push(now + m.outside_s, "start", w)
        closed = _closed(m, waiting, now, readers + len(to_check), push)
        if not writing and waiting and readers == 0 and (closed or not to_check):
            _, timer = waiting.pop(0)
            writing = True
            push(now + job_of[timer][2], "timed", timer)
        if not writing and not closed:
            for checker in to_check:
                readers += 1
                piece = min(left[checker], job_of[checker][0] / m.segments)
                left[checker] -= piece
                push(now + piece, "piece", checker)
            to_check.clear()
    return 60.0 * candidates / now


def _closed(m: Model, waiting: list, now: float, checks_left: int, push) -> bool:
    """Whether new checks are held back now."""
    if not waiting:
        return False
    if m.policy == "writers-first":
        return True
    oldest = waiting[0][0]
    if len(waiting) >= m.batch or now - oldest >= m.max_wait_s - 1e-9 or checks_left == 0:
        return True
    push(oldest + m.max_wait_s, "tick", -1)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--carriers", action="store_true", help="the table of carrier shares instead")
    parser.add_argument("--segments", action="store_true",
                        help="the table of checks that give the gate back between pieces instead")
    args = parser.parse_args(argv)
    if args.carriers:
        return carriers_table(args.seeds)
    if args.segments:
        return segments_table(args.seeds)
    print("| workers | check s | timed s | policy | evaluations/min |\n|---|---|---|---|---|")
    for check_s in (0.49, 0.3):
        for timed_s in (0.2, 0.1):
            for workers in (4, 8):
                for policy, batch, wait in (("writers-first", 2, 0.3), ("batch", 2, 0.3), ("batch", 3, 0.5)):
                    m = Model(workers, check_s, timed_s, policy=policy, batch=batch, max_wait_s=wait)
                    rate = statistics.median(simulate(m, seed=s) for s in range(args.seeds))
                    name = policy if policy == "writers-first" else f"batch k={batch} tau={wait}s"
                    print(f"| {workers} | {check_s} | {timed_s} | {name} | {rate:.0f} |")
    return 0


def carriers_table(seeds: int) -> int:
    """Evaluations per minute against the share of timed candidates that carry: 0, and the shares the
    two drift rules give on session 20's live anchors replayed (benchmarks/results/cpu-2026-12-05-s22/)."""
    print("| workers | carriers, share of timed candidates | evaluations/min |\n|---|---|---|")
    for workers in (4, 8):
        for share in (0.0, 0.057, 0.40):
            rate = statistics.median(simulate(Model(workers, carrier_p=share), seed=s) for s in range(seeds))
            print(f"| {workers} | {share:.3f} | {rate:.0f} |")
    return 0


def segments_table(seeds: int) -> int:
    """Evaluations per minute when a check gives the gate back between pieces (a timed pass that waits
    then waits for the pieces in flight, not for whole checks): 1 piece (today), 6 (one per configuration
    and seed pair of runs, one seed), 18 (one per run: 3 configurations x 3 seeds x 2 runs)."""
    print("| workers | check s | pieces per check | evaluations/min |\n|---|---|---|---|")
    for check_s in (0.49, 0.3):
        for workers in (4, 8):
            for pieces in (1, 6, 18):
                m = Model(workers, check_s, segments=pieces)
                rate = statistics.median(simulate(m, seed=s) for s in range(seeds))
                print(f"| {workers} | {check_s} | {pieces} | {rate:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
