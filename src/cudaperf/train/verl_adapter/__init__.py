"""cudaperf on verl (many nodes): the refine-with-feedback agent loop, the reward function, a turn-level
advantage estimator, the dataset rows and the evaluator seam. Run it with `examples/verl/` (docs/training.md,
"verl").

| module | what it is | imports verl |
|---|---|---|
| `credit.py` | per-turn credit inside one verl sample: segments, scores, group-relative advantages | no |
| `data.py` | verl's parquet rows for cudaperf tasks, the task back from a row | no |
| `evaluators.py` | the evaluator named in the configuration (local workers, or a pool) | no |
| `reward.py` | `compute_score`, verl's custom reward function (single-turn rows, validation) | no |
| `agent_loop.py` | `RefineAgentLoop` ("cudaperf_refine"), `TurnScoredOutput` | yes |
| `estimator.py` | the registered estimators "cudaperf_turn", "cudaperf_turn_max" | yes |
| `plugin.py` | what `VERL_USE_EXTERNAL_MODULES` names: imports the two above | yes |

Importing this package (or the modules marked "no") never imports verl, so cudaperf's own environment (whose
transformers verl 0.9.1's pins exclude) uses them; verl runs in its own environment
(`scripts/test_verl.sh` builds one). Not covered: launching Ray clusters, generation servers (verl's).
"""

from __future__ import annotations

from cudaperf.train.verl_adapter.credit import (
    score_positions,
    segment_scores,
    turn_level_advantages,
    turn_segments,
)

__all__ = ["score_positions", "segment_scores", "turn_level_advantages", "turn_segments"]
