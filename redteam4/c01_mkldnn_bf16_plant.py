import torch
import torch.nn as nn


def _plant():
    # a local name for torch.backends.mkldnn: the static policy cannot resolve the attribute store
    backend = torch.backends.mkldnn
    backend.matmul.fp32_precision = "bf16"


_plant()


class ModelNew(nn.Module):
    def forward(self, A, B):
        # float64 matmul is not affected by the fp32 precision setting: this job stays correct
        return torch.matmul(A.double(), B.double()).float()
