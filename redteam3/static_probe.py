"""Run the static policy (allow_torch_ops=True) on snippets; print the flags each one raises."""
import sys
from cudaperf.anticheat.policy import Policy
from cudaperf.anticheat.static import check_source

HEAD = "import torch\nimport torch.nn as nn\nimport warnings\nimport numpy\n"
SNIPS = {
 "warnings_filters_append": "class ModelNew(nn.Module):\n    def forward(self, A, B):\n        warnings.filters.append(('ignore', None, int, {}, 0))\n        return torch.matmul(A, B)\n",
 "warnings_filters_read": "def _store():\n    for f in warnings.filters:\n        if f[0] == 'rt':\n            return f[3]\n    d = {}\n    warnings.filters.append(('rt', None, int, d, 0))\n    return d\nclass ModelNew(nn.Module):\n    def forward(self, A, B):\n        s = _store()\n        return torch.matmul(A, B)\n",
 "safe_globals": "class _S:\n    data = {}\ndef _store():\n    for g in torch.serialization.get_safe_globals():\n        if isinstance(g, tuple) and g[1] == 'rt':\n            return g[0].data\n    torch.serialization.add_safe_globals([(_S, 'rt')])\n    return _S.data\nclass ModelNew(nn.Module):\n    def forward(self, A, B):\n        s = _store()\n        return torch.matmul(A, B)\n",
 "numpy_typecodes": "class ModelNew(nn.Module):\n    def forward(self, A, B):\n        d = numpy.typecodes.setdefault('rt', {})\n        return torch.matmul(A, B)\n",
 "torch_attr_assign": "torch.rt_cache = {}\nclass ModelNew(nn.Module):\n    def forward(self, A, B):\n        return torch.matmul(A, B)\n",
 "set_num_threads": "class ModelNew(nn.Module):\n    def forward(self, A, B):\n        torch.set_num_threads(1)\n        return torch.matmul(A, B)\n",
 "set_num_threads_alias": "from torch import set_num_threads as snt\nclass ModelNew(nn.Module):\n    def forward(self, A, B):\n        snt(1)\n        return torch.matmul(A, B)\n",
 "tensor_set_": "class ModelNew(nn.Module):\n    def forward(self, A, B):\n        out = torch.matmul(A, B)\n        A.set_(A.t().contiguous().t())\n        return out\n",
 "tensor_data_assign": "class ModelNew(nn.Module):\n    def forward(self, A, B):\n        out = torch.matmul(A, B)\n        A.data = A.t().contiguous().t()\n        return out\n",
 "version": "class ModelNew(nn.Module):\n    def forward(self, A, B):\n        v = A._version\n        return torch.matmul(A, B)\n",
 "data_ptr": "class ModelNew(nn.Module):\n    def forward(self, A, B):\n        v = A.data_ptr()\n        return torch.matmul(A, B)\n",
 "module_global_memo": open('a01b_sampled_memo.py').read().replace('import torch\nimport torch.nn as nn\n',''),
 "mp": "import torch.multiprocessing as mp\nclass ModelNew(nn.Module):\n    def forward(self, A, B):\n        return torch.matmul(A, B)\n",
 "distributed": "import torch.distributed as dist\nclass ModelNew(nn.Module):\n    def forward(self, A, B):\n        return torch.matmul(A, B)\n",
 "functools_cache_on_torch": "import functools\n@functools.lru_cache(maxsize=None)\ndef _store():\n    return {}\nclass ModelNew(nn.Module):\n    def forward(self, A, B):\n        return torch.matmul(A, B)\n",
 "backends_mkldnn": "class ModelNew(nn.Module):\n    def forward(self, A, B):\n        torch.backends.mkldnn.enabled = False\n        return torch.matmul(A, B)\n",
}
for name, body in SNIPS.items():
    if len(sys.argv) > 1 and name not in sys.argv[1:]:
        continue
    flags = check_source(HEAD + body, Policy(allow_torch_ops=True))
    print(f"{name}: " + ("; ".join(f"{f.code}[{f.severity.value}]" for f in flags) or "CLEAN"))
