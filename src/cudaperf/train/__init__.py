"""Training adapters: the only package that touches RL frameworks (TRL for one node, verl for many).

Covers: thin, picklable wrappers that let those frameworks call cudaperf's pure reward
(`cudaperf.train.reward_functions`: a TRL reward function and a verl `compute_score`); later, rollout
functions and agent loops for multi-turn refinement.

Not covered: the reward itself (`cudaperf.reward`), running the evaluator (`cudaperf.evaluate`), or the
frameworks: nothing here imports trl or verl at module import, so the package loads on machines without
them (CPU CI, the GPU evaluation workers). Install them with the `[train]` extra.
"""
