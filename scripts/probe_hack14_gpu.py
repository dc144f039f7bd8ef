"""GPU probe for hack 14 (tests/adversarial/hack_14_skip_unchecked_rounds.py): the fixture's model in the
interleaved bench directly (silent re-checks and unseen rounds on, eager as the anchor), and what one of its
skipped calls returns (`new_empty` right after an honest output was freed). Prints the bench's checks and
failures; `python3 scripts/probe_hack14_gpu.py` on a machine with a GPU (about 30 s)."""

from __future__ import annotations

import importlib.util

import torch

from cudaperf.timing import bench_interleaved_report

SIZE = 1024
TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}


def _fixture_model() -> torch.nn.Module:
    spec = importlib.util.spec_from_file_location("h14", "tests/adversarial/hack_14_skip_unchecked_rounds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ModelNew()


def _sets(n: int) -> list[list[torch.Tensor]]:
    return [[torch.randn(SIZE, SIZE, device="cuda") for _ in range(2)] for _ in range(n)]


def main() -> None:
    torch.manual_seed(0)
    rotated, unseen = _sets(3), _sets(5)
    expected = [torch.matmul(a, b) for a, b in rotated + unseen]
    model = _fixture_model()
    report = bench_interleaved_report(
        {"candidate": lambda x: model(*x), "eager": lambda x: torch.matmul(*x)}, rotated, budget_ms=100,
        warmup_ms=25, check=lambda name, i, out: bool(torch.allclose(out, expected[i], **TOLERANCE)),
        silent_checks=frozenset({"candidate"}), unseen_sets=unseen, anchor="eager")
    print("rounds", report.rounds, "checks", report.checks, "failures", report.check_failures,
          "unseen", report.unseen_slowdown, "candidate ms", report.timings["candidate"].median_ms,
          "eager ms", report.timings["eager"].median_ms)
    first = model(*rotated[0])
    honest = bool(torch.allclose(first, expected[0], **TOLERANCE))
    del first
    other = model(*rotated[1])
    del other
    skipped = model(*rotated[0])
    print("honest first:", honest, "| a skipped call equals set 0's answer:",
          bool(torch.allclose(skipped, expected[0], **TOLERANCE)), "| equals set 1's:",
          bool(torch.allclose(skipped, expected[1], **TOLERANCE)))


if __name__ == "__main__":
    main()
