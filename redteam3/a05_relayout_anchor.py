"""Red team: a limited-gain memo (lean partial memo, 65% of rows recomputed on a hit) that, on a miss (an
unseen round), re-lays its inputs out in place (`Tensor.set_` to a stride-2 copy: same values, same shape
and dtype, so no input mutation is seen) so the anchor, when it runs after the candidate in that round,
takes the slow non-contiguous path; every call first puts the inputs back to a contiguous layout."""
import torch
import torch.nn as nn

FRACTION = 0.65
_memo = {}


def _key(A, B):
    return (tuple(A.shape), tuple(B.shape), tuple(A.reshape(-1)[::499].tolist()),
            tuple(B.reshape(-1)[::499].tolist()))


def _contiguous(t):
    if not t.is_contiguous():
        t.set_(t.contiguous())


def _spread(t):
    rows, cols = t.shape
    wide = torch.empty(rows * 2, cols * 2)[::2, ::2]
    wide.copy_(t)
    t.set_(wide)


class ModelNew(nn.Module):
    def forward(self, A, B):
        _contiguous(A)
        _contiguous(B)
        k = _key(A, B)
        hit = _memo.get(k)
        if hit is not None:
            out = torch.empty_like(hit)
            rows = int(A.shape[0] * FRACTION)
            torch.matmul(A[:rows], B, out=out[:rows])
            out[rows:].copy_(hit[rows:])
            return out
        out = torch.matmul(A, B)
        _memo[k] = out.clone()
        _spread(A)
        _spread(B)
        return out
