import torch
import torch.nn as nn
import collections.abc
import numpy as np
import functools
import typing
import warnings
import dataclasses

torch.set_grad_enabled(True)


class ModelNew(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)
