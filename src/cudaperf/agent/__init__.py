"""The refinement agent: prompts, feedback, model backends, the refine loop and its RL environment.

A model writes a kernel for a task, the evaluator judges it, the model reads the feedback and rewrites it.

  prompts/*.md     the prompt templates (PyTorch and C tasks, fast and inline formats, system, refine)
  prompting.py     a task -> its first prompt (source, input configurations, tolerance, the policy's rules)
  extract.py       a reply -> the solution module, or a classified reason why there is none
  feedback.py      an evaluation -> feedback text within a token budget (errors, configurations, timings,
                   structural hints at lines, ranker score, anti-cheat verdicts)
  context.py       the conversation at each turn (reasoning summarised, history window, best kernel kept)
  evaluation.py    `CandidateEvaluator`, the one seam to the judge, and `LocalEvaluator` (cudaperf.evaluate)
  environment.py   `RefineEnv`: reset(task) -> prompt, step(reply) -> feedback, reward, done; `step_many`
  loop.py          `refine`: K trajectories x N turns over tasks, batched generation, resumable
  trajectory.py    `TurnRecord`, `Trajectory`, `TrajectoryStore` (JSONL), best turn, discounted returns
  summary.py       per-turn figures (correct rate, fast_p over best-so-far kernels, time split), best files
  taskset.py       task specs (files, directories, examples, dataset splits, KernelBench) -> tasks
  backends/        `ModelBackend` and its implementations (smollm2, hf, openai, replay)

The command line is `cudaperf optimize` (`cudaperf.commands.optimize_cmd`). Not covered here: training
(`cudaperf.train`), evaluation itself (`cudaperf.evaluate`), rendering runs as HTML (`cudaperf.report`).
"""
