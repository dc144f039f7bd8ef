"""Scale-out of evaluation on Ray (issue 22): a pool of Ray actors, one per GPU, each owning an
`Evaluator` with its sandboxed worker and referee, behind the same contracts as the local evaluator.

  config.py     `PoolConfig` (address, actors, per-actor resources, trainer GPUs, fault limits), `PoolError`
  actor.py      `EvalActor`: what runs inside one actor (an `Evaluator`, one candidate per call)
  pool.py       `RayEvalPool`: placement group, actors, the dispatcher (submit -> Future[EvalResult]),
                lost actors replaced and their candidates re-run, `PoolReport`
  evaluator.py  `RayEvaluator`: the agent's `CandidateEvaluator` seam and `evaluate_many` with a
                `ResultStore` and a progress bar

Ray is an optional dependency (`pip install 'cudaperf[scale]'`): these modules import it only when a pool
starts. docs/scale.md says how to use it and what is tested where.

Not covered: training on many nodes (verl), several driver processes sharing one pool.
"""

from cudaperf.scale.config import PoolConfig, PoolError
from cudaperf.scale.evaluator import RayEvaluator
from cudaperf.scale.pool import PoolReport, RayEvalPool

__all__ = ["PoolConfig", "PoolError", "PoolReport", "RayEvalPool", "RayEvaluator"]
