"""What verl imports to see cudaperf's pieces: `VERL_USE_EXTERNAL_MODULES=cudaperf.train.verl_adapter.plugin`
(every verl process, the trainer's and the agent-loop workers', imports it when it imports verl) registers
the agent loop "cudaperf_refine" and the estimators "cudaperf_turn" / "cudaperf_turn_max".

Not covered: anything else; importing this module imports verl.
"""

from __future__ import annotations

from cudaperf.train.verl_adapter import agent_loop, estimator

__all__ = ["agent_loop", "estimator"]
