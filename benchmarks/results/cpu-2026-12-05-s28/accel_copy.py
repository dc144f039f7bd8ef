"""Does the rollout's bfloat16 copy of an accelerate-prepared policy run its own weights, and without
autocast? (CPU, tiny Llama, accelerate mixed_precision=bf16 as TRL's trainer with bf16=True)."""
import torch
from accelerate import Accelerator

from cudaperf.agent.backends.tiny import tiny_chat_model
from cudaperf.train.rollout import ModelGenerator

model, tok = tiny_chat_model(hidden_size=64)
acc = Accelerator(mixed_precision="bf16", cpu=True)
prepared = acc.prepare(model)
unwrapped = acc.unwrap_model(prepared)
print("forward patched:", type(unwrapped.forward), getattr(unwrapped.forward, "__func__", None))
gen = ModelGenerator(unwrapped, tok, 1.0, 1.0, weights="bfloat16")
sampler = gen.sampler()
print("copy forward bound to copy:", getattr(sampler.forward, "__self__", None) is sampler)
seen = []


def record(module, args, out):
    seen.append((args[0].dtype, module.weight.dtype, torch.is_autocast_enabled("cpu")))


h = sampler.model.layers[0].self_attn.q_proj.register_forward_hook(record)
ids = torch.tensor([[5, 6, 7]])
with torch.no_grad():
    sampler(input_ids=ids)
print("copy's q_proj saw:", seen)
# does the copy's forward use the original's weights?
with torch.no_grad():
    out1 = sampler(input_ids=ids).logits.clone()
    for p in unwrapped.parameters():
        p.zero_()
    out2 = sampler(input_ids=ids).logits
print("copy output changed when the original's weights were zeroed:", not torch.equal(out1, out2))
