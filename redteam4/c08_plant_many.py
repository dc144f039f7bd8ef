import collections.abc
import warnings

import numpy as np
import torch
import torch.nn as nn


def _plant():
    collections.abc.Sequence.register(complex)                 # bit 0: ABC registry
    np.seterr(over="raise")                                    # bit 1: numpy error state
    np.set_printoptions(precision=3)                           # bit 2: numpy print options
    torch.set_printoptions(precision=2)                        # bit 3: torch print options
    ns = torch.nn
    ns.rt_planted = 1                                          # bit 4: attribute on an imported module
    torch.set_anomaly_enabled(True)                            # bit 5: autograd anomaly mode
    torch.set_warn_always(True)                                # bit 6: torch warn-always
    w = warnings
    w.defaultaction = "error"                                  # bit 7: warnings' default action
    mk = torch.backends.mkldnn
    mk.enabled = False                                         # bit 8: oneDNN off
    torch.utils.backend_registration.rename_privateuse1_backend("rtstate")  # bit 9: backend name


_plant()


class ModelNew(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)
