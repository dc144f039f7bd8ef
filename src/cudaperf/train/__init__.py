"""Training the policy: the only package that touches RL frameworks (TRL for one node; verl for many).

Covers: `cudaperf train sft` (`sft.py`, `sft_data.py`: supervised warm start on the dataset's
implementations), `cudaperf train rl` (`rl.py`, `rollout.py`, `credit.py`: GRPO over multi-turn
refinement trajectories with per-turn credit), their configuration (`config.py`), the policy and its
tokenisation (`models.py`), metrics and checkpoints (`monitor.py`), the held-out tasks of the training
families (`heldout.py`), `cudaperf train eval`: base, SFT and RL models compared through the agent loop
over seeds (`compare.py`), and thin, picklable wrappers that let TRL and verl call cudaperf's pure reward
(`reward_functions.py`). docs/training.md is the guide.

Not covered: the reward itself (`cudaperf.reward`), running the evaluator (`cudaperf.evaluate`), the
refinement environment (`cudaperf.agent`). Nothing here imports trl, peft or verl at module import, so
the package loads on machines without them (CPU CI, the GPU evaluation workers); install them with the
`[train]` extra.
"""
