import torch
import torch.nn as nn
import collections.abc
import numpy as np
import functools
import typing
import warnings
import dataclasses

class M(nn.Module):
    def __init__(self):
        super().__init__()
M.call_super_init = True


class ModelNew(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)
