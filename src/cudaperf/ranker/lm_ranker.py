"""The language-model ranker: a Bradley-Terry head on a Hugging Face model, trained on code pairs.

The model reads one text per (solution, configuration): the configuration's sizes (from the task, the
same `ProblemSizes` the feature ranker sees) followed by the solution with comments and docstrings
removed, cut to `max_tokens`. `AutoModelForSequenceClassification(num_labels=1)` puts a linear head on
the last token's hidden state; training minimises -log sigmoid(r_faster - r_slower) over pairs (the
Bradley-Terry loss that TRL's `RewardTrainer` also uses), written here as a short torch loop because the
layering keeps TRL inside `cudaperf.train`. `compare` is sigmoid(scale * (r_a - r_b)) with the scale
fitted on training pairs, as for the feature ranker.

Any causal or encoder model that `AutoModelForSequenceClassification` accepts works (a directory or hub
name; the GPU script uses SmolLM2-135M converted from its GGUF). `tiny_model(texts)` builds a ~1 M
parameter Llama from a config with a byte-level BPE trained on the training texts in seconds: for CI
and CPU runs, not for quality.

Not covered: parameter-efficient training (LoRA), multi-GPU training, the feature backend.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cudaperf.ranker.problem import Problem, ProblemSizes


@dataclass(frozen=True)
class LMRankerConfig:
    """Training settings of the Bradley-Terry head."""

    max_tokens: int = 512
    """Texts are cut to this many tokens (the tail of a long solution is dropped)."""
    batch_pairs: int = 8
    steps: int = 600
    learning_rate: float = 3e-4
    weight_decay: float = 0.01
    seed: int = 0
    device: str = "cpu"
    """"cuda" on the GPU machine."""
    dtype: str = "float32"
    """Compute dtype: "bfloat16" runs forward and backward under autocast (weights stay float32), for
    SmolLM2 on the H200."""
    max_seconds: float = 0.0
    """Stop training after this many seconds even before `steps` (0: no limit): a run lent a machine for
    minutes still scores with what it learnt; the losses' length says how many steps ran."""


_COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/|"""(?:.|\n)*?"""|#[^\n]*(?=\n)', re.DOTALL)


def solution_text(source: str, sizes: ProblemSizes | None) -> str:
    """The model's input: the configuration's sizes, then the solution without comments or docstrings."""
    body = "\n".join(line for line in _COMMENT.sub("", source).splitlines() if line.strip())
    if sizes is None:
        return body
    scalars = " ".join(f"{k}={v:g}" for k, v in sorted(sizes.scalars.items()))
    return (
        f"in_elems={sizes.in_elems} out_elems={sizes.out_elems} elem_bytes={sizes.elem_bytes} "
        f"{scalars}\n{body}"
    )


def tiny_model(
    texts: Sequence[str],
    *,
    vocab_size: int = 2000,
    hidden_size: int = 64,
    layers: int = 2,
    max_tokens: int = 512,
    seed: int = 0,
):
    """(model, tokenizer): a random ~1 M-parameter Llama sequence classifier and a BPE trained on `texts`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForSequenceClassification, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(list(texts), trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", eos_token="<eos>")
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_tokens,
        num_labels=1,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    return LlamaForSequenceClassification(config), tok


def load_pretrained(name_or_dir: str, dtype: str = "float32"):
    """(model, tokenizer) with a fresh one-output head on a Hugging Face model (weights in `dtype`; keep
    float32 for training under autocast)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(name_or_dir)
    if tok.pad_token is None:  # SmolLM2 has none: its end-of-text token pads
        tok.pad_token = tok.eos_token or "<|endoftext|>"
    model = AutoModelForSequenceClassification.from_pretrained(
        name_or_dir, num_labels=1, dtype=getattr(torch, dtype)
    )
    model.config.pad_token_id = tok.pad_token_id
    return model, tok


class LMRanker:
    """A trained (or untrained) Bradley-Terry model over solution texts."""

    name = "lm"

    def __init__(self, model, tokenizer, config: LMRankerConfig | None = None, scale: float = 1.0):
        self.model, self.tokenizer = model, tokenizer
        self.config = config or LMRankerConfig()
        self.scale = scale
        self._problems: dict[Any, Problem] = {}

    # -- scoring -------------------------------------------------------------------------------------
    def _encode(self, texts: Sequence[str]):
        return self.tokenizer(
            list(texts), truncation=True, max_length=self.config.max_tokens, padding=True, return_tensors="pt"
        ).to(self.config.device)

    def _autocast(self):
        import contextlib

        import torch

        if self.config.dtype == "float32":
            return contextlib.nullcontext()
        device = "cuda" if str(self.config.device).startswith("cuda") else "cpu"
        return torch.autocast(device, dtype=getattr(torch, self.config.dtype))

    def rewards(self, texts: Sequence[str], batch: int = 32) -> np.ndarray:
        import torch

        self.model.eval()
        out = []
        with torch.no_grad(), self._autocast():
            for i in range(0, len(texts), batch):
                logits = self.model(**self._encode(texts[i : i + batch])).logits
                out.append(logits[:, 0].float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0)

    def text(self, candidate: str, task: Any, config: str) -> str:
        key = getattr(task, "task_id", None) or id(task)
        problem = self._problems.setdefault(key, Problem.of(task))
        try:
            sizes = problem.sizes(config)
        except Exception:  # noqa: BLE001 - the code alone still says something
            sizes = None
        return solution_text(candidate, sizes)

    def score(self, candidate: str, task: Any, config: str) -> float:
        return float(self.rewards([self.text(candidate, task, config)])[0])

    def score_many(self, candidates: Sequence[str], task: Any, config: str) -> list[float]:
        return [float(r) for r in self.rewards([self.text(c, task, config) for c in candidates])]

    def compare(self, a: str, b: str, task: Any, config: str) -> float:
        ra, rb = self.score_many([a, b], task, config)
        return 1.0 / (1.0 + math.exp(-self.scale * (ra - rb)))

    def probability_of_score(self, score: float) -> float:
        return 1.0 / (1.0 + math.exp(-self.scale * score))

    # -- training ------------------------------------------------------------------------------------
    def train(
        self,
        faster: Sequence[str],
        slower: Sequence[str],
        progress: Callable[[int, float], None] | None = None,
    ) -> list[float]:
        """Bradley-Terry training on aligned lists of texts (faster[i] beat slower[i]); the losses."""
        import torch

        cfg = self.config
        rng = np.random.default_rng(cfg.seed)
        self.model.to(cfg.device)
        self.model.train()
        opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        losses = []
        stop_at = time.monotonic() + cfg.max_seconds if cfg.max_seconds > 0 else None
        for step in range(cfg.steps):
            if stop_at is not None and time.monotonic() > stop_at:
                break
            pick = rng.integers(0, len(faster), size=cfg.batch_pairs)
            enc = self._encode([faster[i] for i in pick] + [slower[i] for i in pick])
            with self._autocast():
                r = self.model(**enc).logits[:, 0].float()
                loss = -torch.nn.functional.logsigmoid(r[: cfg.batch_pairs] - r[cfg.batch_pairs :]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            if progress and (step + 1) % 50 == 0:
                progress(step + 1, float(np.mean(losses[-50:])))
        return losses

    def fit_scale(self, reward_faster: np.ndarray, reward_slower: np.ndarray) -> float:
        """The logistic slope on reward differences that maximises the pairs' likelihood."""
        from scipy.optimize import minimize_scalar

        d = np.asarray(reward_faster) - np.asarray(reward_slower)
        self.scale = float(
            minimize_scalar(
                lambda s: float(np.logaddexp(0.0, -s * d).mean()), bounds=(0.01, 50.0), method="bounded"
            ).x
        )
        return self.scale

    def save(self, directory: Path) -> Path:
        import json

        directory = Path(directory)
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        (directory / "cudaperf_lm_ranker.json").write_text(
            json.dumps({"scale": self.scale, "config": asdict(self.config)})
        )
        return directory

    @classmethod
    def load(cls, directory: Path, **overrides: Any) -> LMRanker:
        import json

        meta = json.loads((Path(directory) / "cudaperf_lm_ranker.json").read_text())
        config = LMRankerConfig(**{**meta["config"], **overrides})
        model, tok = load_pretrained(str(directory))
        return cls(model.to(config.device), tok, config, meta["scale"])
