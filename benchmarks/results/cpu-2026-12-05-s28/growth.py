"""Does a decoding step's host time grow with the number of steps? A 30-layer Llama of width 64 (compute
negligible, per-op overhead like SmolLM2-135M's) on the CPU, 16 rows, ~1,800-token prompts, 1,000 new
tokens, through the rollout's own sampler with the decoding probe."""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cudaperf.agent.backends.tiny import train_tokenizer
from cudaperf.train.rollout import ModelGenerator

tok = train_tokenizer()
cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=30,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
torch.manual_seed(0)
m = LlamaForCausalLM(cfg)
eos = torch.tensor([tok.eos_token_id])
m.lm_head.register_forward_hook(lambda mod, a, out: out.index_fill(-1, eos, float("-inf")))
rows, new = int(sys.argv[1]), int(sys.argv[2])
prompts = [[5] * (1500 + 20 * i) for i in range(rows)]
ModelGenerator(m, tok, 1.0, 1.0, batch_size=128, probe_to="/tmp/growth_probe.txt").generate(prompts, new)
print(open("/tmp/growth_probe.txt").read()[:700])
