"""Red team: a content memo whose store outlives the job (kept in torch's process-wide set of "safe globals",
public API `torch.serialization.add_safe_globals` / `get_safe_globals`), so a later job of the same worker, with the same secret-derived seeds, finds the unseen
sets' outputs already there."""
import torch
import torch.nn as nn


class _Box:
    data = {}


def _store():
    for g in torch.serialization.get_safe_globals():
        if isinstance(g, tuple) and g[1] == "rt-memo-box":
            return g[0].data
    torch.serialization.add_safe_globals([(_Box, "rt-memo-box")])
    return _Box.data


def _key(A, B):
    return (tuple(A.shape), tuple(B.shape), tuple(A.reshape(-1)[::499].tolist()),
            tuple(B.reshape(-1)[::499].tolist()))


class ModelNew(nn.Module):
    def forward(self, A, B):
        store = _store()
        k = _key(A, B)
        hit = store.get(k)
        if hit is not None:
            return hit.clone()
        out = torch.matmul(A, B)
        store[k] = out.clone()
        return out
