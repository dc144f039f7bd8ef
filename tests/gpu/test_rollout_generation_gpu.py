"""The RL rollout's sampler (`train.rollout.ModelGenerator`) on a GPU, in each of its forms (marker `gpu`):
float32 weights under bfloat16 autocast or a bfloat16 copy of them (`RlConfig.generation_weights`), with a
dynamic or a static KV cache (`RlConfig.generation_cache`; on a GPU `transformers` compiles the static
form's decoding step), and the decoding probe (`probe_to`) with the device's times. Session 20's decoding
profile found the static form failing only on the GPU (its compiled step wrote bfloat16 keys into a float32
cache), which no CPU test could see.

Run: `python3 -m pytest -q -s tests/gpu/test_rollout_generation_gpu.py`.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from cudaperf.train.rollout import ModelGenerator

pytestmark = [pytest.mark.gpu]
DEVICE = "cuda"


@pytest.fixture(scope="module")
def policy():
    """A small random Llama on the GPU in float32, as the trainer holds the policy, and the tiny ChatML
    tokenizer (built here: nothing carried)."""
    from cudaperf.agent.backends.tiny import tiny_chat_model

    model, tokenizer = tiny_chat_model(hidden_size=64)
    model = model.to("cuda")
    return model, tokenizer


@pytest.mark.parametrize("cache, weights", [("dynamic", "autocast"), ("dynamic", "bfloat16"),
                                            ("static", "autocast")])  # static + bfloat16: refused
def test_each_form_of_the_sampler_generates_replies_with_their_logprobs(policy, cache, weights):
    model, tokenizer = policy
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"]
               for text in ("__global__ void k(float* x)", "int main() { return 0; }")]
    generator = ModelGenerator(model, tokenizer, temperature=1.0, top_p=1.0, cache=cache, weights=weights)
    replies = generator.generate(prompts, 8)
    assert len(replies) == 2 and all(0 < len(r.ids) == len(r.logprobs) for r in replies)
    assert all(math.isfinite(lp) and lp <= 0 for r in replies for lp in r.logprobs)
    assert next(model.parameters()).dtype == torch.float32  # the policy itself is left as it was


def test_the_decoding_probe_measures_device_time_on_the_gpu(policy, tmp_path):
    import copy

    model, tokenizer = policy
    model = copy.deepcopy(model)  # one that never ends its turn, so the call reaches the profiled steps
    eos = torch.tensor([tokenizer.eos_token_id], device="cuda")
    model.lm_head.register_forward_hook(lambda module, args, out: out.index_fill(-1, eos, float("-inf")))
    prompts = [tokenizer("__global__ void k(float* x)", add_special_tokens=False)["input_ids"]] * 2
    path = tmp_path / "probe.txt"
    ModelGenerator(model, tokenizer, temperature=1.0, top_p=1.0, weights="bfloat16",
                   probe_to=str(path)).generate(prompts, 64)
    text = path.read_text()
    assert "device: cuda" in text and "new tokens: 64" in text and "device not measured" not in text


def test_a_lora_policy_held_by_the_rl_trainer_samples_in_bfloat16(tmp_path):
    """The rollout's copy of a LoRA policy as TRL holds it (peft, accelerate's bfloat16 mixed precision)
    runs in bfloat16: session 34's RL probe on the H100 showed float32 GEMMs and attention, 25.5 ms a step
    against 10.0 ms for a merged model's bfloat16 copy."""
    from cudaperf.train.config import RlConfig
    from cudaperf.train.models import load_policy
    from cudaperf.train.monitor import MetricsWriter
    from cudaperf.train.rl import _trainer, load_tasks
    from cudaperf.train.rollout import MultiTurnRollout

    config = RlConfig(model="tiny", output_dir=str(tmp_path), device=DEVICE, lora=True, lora_rank=4,
                      generation_weights="bfloat16", generation_cache="graph", kinds=("c",), limit_tasks=2,
                      tasks_per_step=1, trajectories=2, max_steps=1)
    model, tokenizer = load_policy(config)
    tasks = load_tasks(config)
    rollout = MultiTurnRollout(config, tasks, None, tokenizer)
    trainer = _trainer(config, model, tokenizer, tasks, rollout, MetricsWriter(config.output_dir), 0.0)
    generator = rollout._generator(trainer.accelerator.unwrap_model(trainer.model))
    sampler = generator.sampler()
    seen = []
    sampler.get_output_embeddings().register_forward_hook(lambda m, args, out: seen.append(args[0].dtype))
    prompts = [tokenizer("__global__ void k(float* x)", add_special_tokens=False)["input_ids"]] * 2
    generator.generate(prompts, 4)
    assert {p.dtype for p in sampler.parameters()} == {torch.bfloat16}
    assert seen and set(seen) == {torch.bfloat16}, seen
