"""The refinement agent: prompts, feedback, model backends, the refine loop and its RL environment."""
