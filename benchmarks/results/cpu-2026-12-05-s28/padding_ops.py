"""Op counts per decoding step of SmolLM2-135M's shape (30 layers) on the CPU: equal-length prompts vs
left-padded ones, via the real DecodingProbe (the counts do not depend on the device's speed)."""
import sys

import torch

sys.path.insert(0, "scripts")
from generation_profile import load_shape_model
from transformers import LogitsProcessorList

from cudaperf.agent.backends.decoding_probe import DecodingProbe

model, tok = load_shape_model("cpu")
model = model.to(torch.bfloat16).eval()
def run(lengths, new=30):
    width = max(lengths)
    pad = tok.pad_token_id
    ids = torch.tensor([[pad] * (width - n) + [5] * n for n in lengths])
    mask = torch.tensor([[0] * (width - n) + [1] * n for n in lengths])
    probe = DecodingProbe("cpu", lengths, skip_steps=8, active_steps=4)
    with torch.no_grad(), probe:
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                       do_sample=True,
                       top_k=0, top_p=1.0, pad_token_id=pad, eos_token_id=tok.eos_token_id,
                       logits_processor=LogitsProcessorList([probe]))
    ev = probe._events
    calls = sum(e.count for e in ev if e.key.startswith("aten::") )
    top = sorted(((e.count, e.key) for e in ev if e.key.startswith("aten::")), reverse=True)[:12]
    rep = probe.report()
    return calls / 4, rep.host_ms_per_profiled_step, top
for name, lengths in (("equal", [256] * 4), ("padded", [128, 192, 224, 256])):
    c, ms, top = run(lengths)
    print(name, "aten calls per step", c, "host ms", round(ms, 1))
    print("  ", [(n / 4, k) for n, k in top])
