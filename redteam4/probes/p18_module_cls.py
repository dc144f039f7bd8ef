import torch
import torch.nn as nn
import collections.abc
import numpy as np
import functools
import typing
import warnings
import dataclasses

nn.Module.rt = 1


class ModelNew(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)
