"""Red team: a content memo whose store outlives the job (kept in a process-wide list of an allowed module,
`warnings.filters`), so a later job of the same worker, with the same secret-derived seeds, finds the unseen
sets' outputs already there."""
import warnings

import torch
import torch.nn as nn


def _store():
    for f in warnings.filters:
        if f[0] == "rt-memo":
            return f[3]
    d = {}
    # a 5-tuple like every filter; its category `int` is no Warning subclass, so it never matches
    warnings.filters.append(("rt-memo", None, int, d, 0))
    return d


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
