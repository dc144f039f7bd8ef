import torch
import torch.nn as nn
import torch.nn.functional as F


def _plant():
    backend = torch.backends.mkldnn  # a local name: the attribute store below is not resolved
    backend.conv.fp32_precision = "bf16"


_plant()


class ModelNew(nn.Module):
    def forward(self, x, w):
        # float64 is not affected by the fp32 precision setting: this job stays correct
        return F.conv2d(x.double(), w.double(), padding=1).float()
