"""aten calls per decoding step of the rollout's bfloat16 copy of an accelerate-prepared SmolLM2-shaped
policy, with accelerate's forward wrapper (autocast + fp32 outputs) on the copy and with it removed."""
import sys

import torch

sys.path.insert(0, "scripts")
from accelerate import Accelerator
from generation_profile import load_shape_model
from transformers import LogitsProcessorList

from cudaperf.agent.backends.decoding_probe import DecodingProbe
from cudaperf.train.rollout import ModelGenerator

model, tok = load_shape_model("cpu")
acc = Accelerator(mixed_precision="bf16", cpu=True)
policy = acc.unwrap_model(acc.prepare(model))
def count(sampler):
    ids = torch.full((2, 64), 5)
    probe = DecodingProbe("cpu", [64, 64], skip_steps=6, active_steps=4)
    with torch.no_grad(), probe:
        sampler.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=14,
                         min_new_tokens=14, do_sample=True, top_k=0, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id,
                         logits_processor=LogitsProcessorList([probe]))
    ev = probe._events
    calls = sum(e.count for e in ev if e.key.startswith("aten::")) / 4
    return calls, sum(e.count for e in ev if e.key in ("aten::to", "aten::_to_copy")) / 4
gen = ModelGenerator(policy, tok, 1.0, 1.0, weights="bfloat16")
copy = gen.sampler()
print("wrapped copy: aten calls, casts per step", count(copy))
copy.__dict__.pop("forward", None)
copy.__dict__.pop("_original_forward", None)
print("plain copy:   aten calls, casts per step", count(copy))
