import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, x, w):
        return F.conv2d(x, w, padding=1)
