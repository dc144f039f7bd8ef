"""A sampling loop over a static KV cache whose decoding step runs as one captured CUDA graph.

Used by the RL rollouts' sampler (`train.rollout.ModelGenerator`) and the local backend (`hf_local`) with
cache='graph'. Why: the rollouts' decoding step is bound by the host, not the GPU. In session 32's RL run a
step of SmolLM2-135M took 90-105 ms while its kernels took 6.5 ms: ~1,700 operators a step, each launched from
Python at 20-40 us of host time on the GPU machine (dev/LOG.md). A CUDA graph replays all of a step's kernels
in one launch. `transformers` offers this through its static cache and `torch.compile`, which failed on the
bfloat16 copy the rollouts sample from (torch 2.11, transformers 5.17: `rollout.STATIC_BFLOAT16`); this loop
captures the model's plain eager forward instead (`torch.cuda.CUDAGraph`), which needs no compiler, and only
the forward: sampling runs eagerly after each replay.

`decode` does what the rollouts' `generate` call does, row for row: left-padded prompts, one prefill forward,
then one token a step for every row with the tempered log-probability of the chosen token (before nucleus
truncation, as `rollout._ChosenLogprobs` records it), temperature and top-p sampling (greedy at temperature
0), end-of-turn handling (a finished row gets the pad token after it), and `min_new_tokens` (the end-of-turn
token suppressed before it). How a step is made capturable: the cache is `transformers.StaticCache` (fixed
addresses; each layer advances its own write position on the device), the attention mask is a 4-D boolean
tensor over the whole cache (`transformers` passes a 4-D mask through as it is, so no mask is built, and no
value is read back to the host, inside the step), positions are a device tensor advanced in place. While it
decodes, a model on `transformers`' SDPA path attends with `_folded_sdpa`: for one query token with grouped
key/value heads, the query heads of each key/value head are folded into the query length, so the cache is read
as it is instead of copied per group first (the copies were about a third of a step's kernel time in session
32's profile), and attends by two batched matrix products rather than PyTorch's memory-efficient kernel
(64% of a graph step's kernel time in session 33's profile: `_one_token_attention`). The first decoding
step runs eagerly (it is also the capture's warm-up); the graph, captured for the second step's inputs, is
replayed for every later step. Rows that finish early keep decoding pad tokens until every row has finished
(checked every `check_every` steps, the only reads back to the host); at each check the rows that ended
since the last one can be handed to the caller (`on_finished`: the RL rollout evaluates them while the
others decode).

On a CPU (or with `graph=False`) the same loop runs eagerly: that is how the CPU tests check it against
`generate`. Covers: decoder-only `transformers` models whose forward takes `position_ids`, a 4-D mask and
a `StaticCache` as `past_key_values` (Llama-family: SmolLM2). Not covered: beam search, repetition
penalties or other logits processors, sliding-window caches, several GPUs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

CHECK_EVERY = 8  # steps between reads of "has every row finished?" (each read waits for the GPU)


@dataclass(frozen=True)
class Sampling:
    """How each step's token is chosen."""

    temperature: float  # 0: greedy
    top_p: float = 1.0
    eos_ids: tuple[int, ...] = ()  # any of them ends a row
    pad_id: int = 0
    min_new_tokens: int = 0


FinishedRows = Callable[[list[int], Any, Any], None]
"""`decode`'s `on_finished(rows, tokens, logprobs)`: rows that have just ended, with their tokens and
log-probabilities so far ([len(rows), steps], on the host; a row's tokens end with its end-of-turn token)."""


def decode(model: Any, ids: Any, mask: Any, max_new_tokens: int, sampling: Sampling, *, graph: bool = True,
           on_step: Callable[[Any], None] | None = None, check_every: int = CHECK_EVERY,
           on_finished: FinishedRows | None = None) -> tuple[Any, Any]:
    """(new tokens [rows, n], their log-probabilities [rows, n]) for left-padded `ids` and `mask`
    [rows, width]; n <= `max_new_tokens` (fewer when every row finished). `graph`: capture the step as a
    CUDA graph (on a CUDA device; elsewhere ignored). `on_step(scores)` sees each step's scores (a decoding
    probe). `on_finished` is handed the rows that ended since the last check, at each check (every
    `check_every` steps) while others still decode, so a caller can use a reply before the batch ends; the
    rows still decoding at the last check are in the return value only."""
    import torch

    rows, width = ids.shape
    length = width + max_new_tokens
    device = ids.device
    state = _State.start(model, ids, mask, length)
    with torch.no_grad(), folded_attention(model):
        scores = _prefill(model, ids, state, width, length)
        tokens, logprobs = [], []
        unfinished = torch.ones(rows, dtype=torch.bool, device=device)
        eos = torch.tensor(sampling.eos_ids, dtype=torch.long, device=device)
        step = _Step(model, state)
        handed = torch.zeros(rows, dtype=torch.bool)  # rows given to `on_finished` (on the host)
        for t in range(max_new_tokens):
            if on_step is not None:
                on_step(scores)
            token, logprob = _choose(scores, sampling, t)
            token = torch.where(unfinished, token, torch.full_like(token, sampling.pad_id))
            tokens.append(token)
            logprobs.append(logprob)
            if sampling.eos_ids:
                unfinished &= ~torch.isin(token, eos)
            if t + 1 == max_new_tokens:
                break
            if (t + 1) % check_every == 0:
                running = unfinished.cpu()  # the only read back: it waits for the GPU
                if not bool(running.any()):
                    break
                if on_finished is not None:
                    _hand_over(~running & ~handed, tokens, logprobs, on_finished)
                    handed |= ~running
            state.advance(token, width + t)
            scores = step.run(graph and device.type == "cuda")
    return torch.stack(tokens, 1), torch.stack(logprobs, 1)


def _hand_over(ended: Any, tokens: list[Any], logprobs: list[Any], on_finished: FinishedRows) -> None:
    """Rows newly `ended` (a host mask), with their tokens and log-probabilities so far, to `on_finished`."""
    import torch

    rows = [int(r) for r in torch.nonzero(ended).flatten()]
    if rows:
        at = torch.tensor(rows, device=tokens[0].device)
        on_finished(rows, torch.stack(tokens, 1)[at].cpu(), torch.stack(logprobs, 1)[at].float().cpu())


def calling(processors: list[Any]) -> Callable[[Any], None] | None:
    """An `on_step` that hands each step's scores to `generate`-style logits processors (the decoding
    probe `probing` puts among them), or None without any."""
    if not processors:
        return None
    return lambda scores: [p(None, scores) for p in processors]


@dataclass
class _State:
    """The step's inputs at fixed addresses: the cache, the next token, its position, the key mask."""

    cache: Any
    token: Any  # [rows, 1]
    position: Any  # [rows, 1]
    keys: Any  # [rows, length] bool: which cache slots a query may attend to
    cache_argument: str  # the forward's name for the cache
    extra: dict[str, Any]  # further arguments of every forward

    @classmethod
    def start(cls, model: Any, ids: Any, mask: Any, length: int) -> "_State":
        import inspect

        import torch
        from transformers import StaticCache

        rows, width = ids.shape
        keys = torch.zeros(rows, length, dtype=torch.bool, device=ids.device)
        keys[:, :width] = mask.bool()
        position = torch.zeros(rows, 1, dtype=torch.long, device=ids.device)  # set by the prefill
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft wrapper
        names = inspect.signature(base.forward).parameters  # passes its keyword arguments on
        argument = "cache" if "cache" in names and "past_key_values" not in names else "past_key_values"
        # Logits of the last position only (as `generate` asks for them): the prefill's for every position
        # would be rows x width x vocabulary (16 x 2,300 x 49,152 in bfloat16: 3.6 GB).
        last_only = {"logits_to_keep": 1} if "logits_to_keep" in names else {}
        cache = StaticCache(config=base.config, max_cache_len=length)
        return cls(cache, torch.zeros(rows, 1, dtype=torch.long, device=ids.device), position, keys, argument,
                   last_only)

    def advance(self, token: Any, slot: int) -> None:
        """The inputs of the step that writes cache slot `slot` (in place: a captured graph reads them)."""
        self.token.copy_(token[:, None])
        self.position.add_(1)
        self.keys[:, slot] = True

    def forward(self, model: Any, **inputs: Any) -> Any:
        out = model(**inputs, **{self.cache_argument: self.cache}, **self.extra, use_cache=True)
        return out.logits[:, -1].float()


def _prefill(model: Any, ids: Any, state: _State, width: int, length: int) -> Any:
    """The prompts' forward: each query position attends to the prompt's real tokens up to itself, and a
    padding position to itself alone (a query with nothing to attend to would give NaN, which the
    cache would then hold under masked slots, where 0 x NaN is still NaN)."""
    import torch

    causal = torch.zeros(width, length, dtype=torch.bool, device=ids.device)
    causal[:, :width] = torch.tril(torch.ones(width, width, dtype=torch.bool, device=ids.device))
    itself = torch.zeros(width, length, dtype=torch.bool, device=ids.device)
    itself[:, :width] = torch.eye(width, dtype=torch.bool, device=ids.device)
    positions = (state.keys[:, :width].long().cumsum(-1) - 1).clamp(min=0)
    state.position.copy_(positions[:, -1:])  # each row's last prompt position: the steps go on from it
    allowed = (state.keys[:, None, None, :] & causal) | itself
    return state.forward(model, input_ids=ids, attention_mask=allowed, position_ids=positions)


class _Step:
    """One decoding forward: eager the first time (the capture's warm-up), then a captured graph."""

    def __init__(self, model: Any, state: _State) -> None:
        self.model, self.state = model, state
        self.calls = 0
        self.failed = ""  # why the capture failed, when it did
        self._graph: Any = None
        self._scores: Any = None

    def run(self, graph: bool) -> Any:
        self.calls += 1
        if not graph or self.calls == 1 or self.failed:
            return self._eager()
        if self._graph is None and not self._capture():
            return self._eager()
        self._graph.replay()
        return self._scores.clone()

    def _eager(self) -> Any:
        s = self.state
        return s.forward(self.model, input_ids=s.token, attention_mask=s.keys[:, None, None, :],
                         position_ids=s.position)

    def _capture(self) -> bool:
        """The step captured with the current inputs; capturing runs nothing, so the replay that follows
        computes this step (the cache's write positions advance on the device, at each replay). A model
        whose forward cannot be captured (it reads a value back to the host, say) decodes eagerly from
        here on, said once on stdout: slower, never wrong."""
        import torch

        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self._scores = self._eager()
        except Exception as exc:  # noqa: BLE001 - whatever the capture refuses, the eager step still works
            self.failed = f"{type(exc).__name__}: {exc}"[:300]
            print(f"step_decoder: the decoding step could not be captured ({self.failed}); decoding eagerly",
                  flush=True)
            torch.cuda.synchronize()
            return False
        self._graph = graph
        return True


def _choose(scores: Any, sampling: Sampling, step: int) -> tuple[Any, Any]:
    """Each row's token and its tempered log-probability (before nucleus truncation)."""
    import torch

    if sampling.eos_ids and step < sampling.min_new_tokens:
        scores = scores.clone()
        scores[:, list(sampling.eos_ids)] = float("-inf")
    temperature = sampling.temperature if sampling.temperature > 0 else 1.0
    logp = torch.log_softmax(scores / temperature, dim=-1)
    if sampling.temperature <= 0:
        token = scores.argmax(-1)
    else:
        token = torch.multinomial(_nucleus(logp.exp(), sampling.top_p), 1).squeeze(1)
    return token, logp.gather(1, token[:, None]).squeeze(1)


def _nucleus(probs: Any, top_p: float) -> Any:
    """`probs` with everything outside the smallest set of tokens whose mass reaches `top_p` set to 0 (the
    most likely token always kept), as `transformers`' top-p warper keeps them."""
    if top_p >= 1.0:
        return probs
    ordered, order = probs.sort(dim=-1, descending=True)
    outside = ordered.cumsum(-1) - ordered >= top_p  # the mass before a token already reaches top_p
    outside[:, 0] = False
    return probs.scatter(-1, order, ordered.masked_fill(outside, 0.0))


FOLDED = "cudaperf_folded_decode"  # its name among `transformers`' attention functions


def _folded_sdpa(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                 scaling: float | None = None, **kwargs: Any) -> tuple[Any, None]:
    """`transformers`' SDPA attention, except for one query token with grouped key/value heads and a 4-D
    mask of one query row: there the query heads of each key/value head are folded into the query length
    ([rows, kv heads, group, dim]) and attend to the cache as it is, where the SDPA path would first copy
    every key and value head `group` times (`repeat_kv`: for SmolLM2's 3 groups, a copy of the whole
    cache per layer and step). Query head i reads key/value head i // group in both."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    rows, heads, q_len, dim = query.shape
    if (q_len != 1 or groups == 1 or attention_mask is None or attention_mask.dim() != 4
            or attention_mask.shape[2] != 1 or dropout):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    folded = query.reshape(rows, key.shape[1], groups, dim)
    out = _one_token_attention(folded, key, value, attention_mask[:, :, :, :key.shape[2]],
                               scaling if scaling is not None else dim ** -0.5)
    return out.reshape(rows, heads, 1, dim).transpose(1, 2).contiguous(), None


def _one_token_attention(query: Any, key: Any, value: Any, mask: Any, scale: float) -> Any:
    """softmax(query key^T * scale, masked) value as two batched matrix products: the products in the
    cache's dtype, scale, mask and softmax in float32 (as `transformers`' eager attention, whose products
    are bfloat16 too in a bfloat16 model).
    Why not `scaled_dot_product_attention`: for a few query rows against the whole static cache PyTorch
    picks its memory-efficient kernel, which parallelises over queries and heads (16 rows x 3 key/value
    heads: 48 blocks for 132 SMs) and read the cache at ~0.2 TB/s in session 33's profile (188 us a layer
    of a 10 ms step, 64% of it); a batched product is bound by reading the cache once. `mask`: boolean
    (True: attend) or additive, broadcast over [rows, kv heads, query rows, keys]."""
    import torch

    scores = torch.matmul(query, key.transpose(-1, -2)).float() * scale
    scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.float()
    return torch.matmul(torch.softmax(scores, dim=-1).to(value.dtype), value)


@contextlib.contextmanager
def folded_attention(model: Any) -> Iterator[None]:
    """The model's attention as `_folded_sdpa` for the duration (models on `transformers`' SDPA path only;
    others are left as they are)."""
    from transformers import AttentionInterface

    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        yield
        return
    AttentionInterface.register(FOLDED, _folded_sdpa)
    config._attn_implementation = FOLDED
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"
