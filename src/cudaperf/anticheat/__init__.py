"""Anti-cheat: the rules a candidate solution must follow, and the checks that enforce them.

- `policy`: the `Policy` record and the registry of rule codes (`RULES`), one rationale per rule.
- `static`: `check_source(source, policy)`, an AST policy over the solution file and the CUDA it embeds.
- `runtime`: checks around candidate code in the GPU worker (aten-op monitor, threads/streams, function
  identities, precision flags). Imports torch, so it is not imported here.
- `coverage`: share of GPU time spent in the candidate's own kernels (torch.profiler). Imports torch lazily.

Not covered: sandboxing (`cudaperf.execute`), correctness checks such as input mutation or uninitialised
outputs (`cudaperf.correctness`), timing defences (`cudaperf.timing`). The adversarial fixtures in
`tests/adversarial/` say which layer catches which known hack.
"""

from cudaperf.anticheat.policy import RULES, Policy, Rule
from cudaperf.anticheat.static import check_source

__all__ = ["RULES", "Policy", "Rule", "check_source"]
