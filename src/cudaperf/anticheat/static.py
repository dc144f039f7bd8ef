"""Static anti-cheat: an AST policy over a solution file, plus a scan of the C++/CUDA it embeds.

Covers: `check_source(source, policy)`, which parses the file (never executes it) and returns one `Flag`
per broken rule, with the source line. Rules and their rationale live in `policy.RULES`; this module says
*how* each is detected:

- Names are resolved through the file's imports and module-level aliases (`import torch as t`,
  `from torch import matmul as mm`, `F = torch.nn.functional`, `mm = torch.matmul`), so a call is judged by
  the dotted path it reaches (`torch.matmul`), never by its spelling. Computed names (`getattr(torch, "mat"
  + "mul")`, `eval`, `__import__`, `globals()`) are flagged as such, since they defeat resolution.
- Module-wide rules (imports, dynamic code, dunders, monkey-patching, streams, graphs, reseeding, file I/O,
  precision flags, tensor subclasses, the reference `Model`) apply everywhere in the file.
- "Forward-path" rules (torch compute ops, operators on tensors, nn-module calls, host transfers, exception
  fallbacks, identity caches) apply to the code reachable from a `forward`/`__call__` of any class except the
  reference `Model`: the methods and module functions they call or reference, transitively, and everything
  nested in them. `__init__` may use torch freely (weights must be built the reference's way).
- Operators are flagged when an operand is *known* to be a tensor by a small flow-insensitive inference:
  forward parameters (unless annotated/defaulted as scalars), results of torch calls and tensor methods,
  `self.<attr>` bound to parameters/buffers/torch results in `__init__`, and helper parameters that some
  call site feeds a tensor. `x.shape`, `x.size()`, `x.numel()`, `x.data_ptr()` are scalars. `@` is always
  flagged. Tensor methods are flagged by name (every method of `torch.Tensor` outside the allow-list).
- String constants that look like C/CUDA are scanned (comments stripped) for vendor libraries (cuBLAS,
  cuDNN, CUTLASS...), torch C++ compute calls (`torch::matmul`, `at::mm`, `x.sum()`), stream/graph/thread
  creation, process/file access and reduced precision.

Not covered (the runtime checks are the backstop, see `runtime.py` and `coverage.py`): operators and
methods on values whose tensor-ness the inference cannot see (tensors inside lists/dicts, returned by
untyped helpers of other objects), tensor indexing with tensors (`x[mask]`), behaviour that depends on
values (call counting, shape-specialised skipping), and anything in C++ that does not use the names above.
A checker crash yields one `static_check_failed` ERROR: the check fails closed.
"""

from __future__ import annotations

import ast
import collections
import functools
import inspect
import re
import sys
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from cudaperf.anticheat.policy import FORBIDDEN_IMPORTS, Policy, make_flag
from cudaperf.types import Flag

# --------------------------------------------------------------------------------------------------
# Vocabulary

_DYNAMIC_BUILTINS = frozenset({"eval", "exec", "compile", "__import__", "globals", "locals", "vars",
                               "breakpoint"})
_ATTR_BUILTINS = frozenset({"getattr", "setattr", "delattr", "hasattr"})
_FILE_BUILTINS = frozenset({"open", "input"})
_EXIT_BUILTINS = frozenset({"exit", "quit"})
# Builtins that reduce or transform a tensor argument through torch ops.
_REDUCING_BUILTINS = frozenset({"sum", "max", "min", "abs", "pow", "round", "divmod", "sorted", "any", "all"})
_HOST_BUILTINS = frozenset({"float", "int", "bool", "complex"})  # on a tensor: .item() in disguise

_ALLOWED_DUNDER_ATTRS = frozenset({"__init__", "__name__", "__version__", "__doc__", "__qualname__"})
_ALLOWED_DUNDER_NAMES = frozenset({"__name__", "__doc__", "__all__"})
# Dunder methods a class may define: construction, printing, container protocol, context management.
_ALLOWED_DUNDER_DEFS = frozenset(
    {"__init__", "__repr__", "__str__", "__len__", "__iter__", "__getitem__", "__hash__", "__call__",
     "__post_init__", "__enter__", "__exit__"}
)
_TORCH_HOOK_DEFS = frozenset({"__torch_function__", "__torch_dispatch__"})

_TENSOR_CLASSES = frozenset(
    {"torch.Tensor", "torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer",
     "torch._C.TensorBase", "torch._C._TensorBase"}
)
_MODULE_CONTAINERS = frozenset({"Module", "ModuleList", "ModuleDict", "Parameter", "ParameterList",
                                "ParameterDict", "Buffer", "Identity"})
_KERNEL_FACTORIES = frozenset(
    {"cudaperf.cuda.compile", "cudaperf.cuda.load", "torch.utils.cpp_extension.load_inline"}
)
_TENSOR_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "real", "imag", "grad"})
_MODULE_TENSOR_ATTRS = frozenset({"weight", "bias", "running_mean", "running_var", "in_proj_weight"})

# Tensor methods that keep the data where it is: views, metadata, allocation, constant fills, no-op casts
# (`.float()`/`.to(device)`/`.cuda()` do nothing on an fp32 CUDA input; the runtime monitor sees real copies).
_ALLOWED_TENSOR_METHODS = frozenset(
    {"view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "permute",
     "transpose", "t", "expand", "expand_as", "narrow", "select", "split", "chunk", "unbind", "as_strided",
     "movedim", "moveaxis", "swapaxes", "swapdims", "unfold", "contiguous", "is_contiguous", "data_ptr",
     "numel", "nelement", "size", "stride", "dim", "ndimension", "element_size", "storage_offset",
     "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "new_tensor", "detach",
     "detach_", "requires_grad_", "get_device", "is_floating_point", "is_complex", "zero_", "fill_", "cuda",
     "to", "float", "type", "is_set_to", "dim_order", "is_pinned", "is_shared", "view_as_real"}
)
_HOST_TRANSFER_METHODS = frozenset({"cpu", "numpy", "tolist", "item"})
_DOWNCAST_METHODS = frozenset({"half", "bfloat16"})
_SCALAR_METHODS = frozenset(
    {"numel", "nelement", "size", "stride", "dim", "ndimension", "data_ptr", "item", "element_size",
     "is_contiguous", "tolist", "storage_offset", "get_device", "is_floating_point", "is_complex", "type"}
)
_RESEED_METHODS = frozenset({"manual_seed", "seed", "set_state", "set_rng_state"})
_SUBCLASS_METHODS = frozenset({"as_subclass", "_make_subclass", "_make_wrapper_subclass"})
# Names shared with dict/list/set/str: on a receiver of unknown type they are not evidence of a tensor.
_CONTAINER_METHODS = frozenset(
    {"values", "keys", "items", "get", "update", "copy", "pop", "append", "extend", "insert", "remove",
     "clear", "count", "index", "sort", "add", "format", "join", "strip", "replace", "lower", "upper",
     "apply", "map", "reverse", "find", "encode", "decode", "setdefault"}
)
# Used when torch cannot be imported: the commonest compute methods.
_CORE_COMPUTE_METHODS = frozenset(
    {"matmul", "mm", "bmm", "addmm", "sum", "mean", "max", "min", "amax", "amin", "softmax", "log_softmax",
     "relu", "relu_", "exp", "log", "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "pow",
     "sqrt", "rsqrt", "clamp", "clamp_", "clamp_min", "abs", "neg", "sigmoid", "tanh", "norm", "var", "std",
     "cumsum", "sort", "topk", "argmax", "argmin", "clone", "copy_", "masked_fill", "where", "gather",
     "index_select", "layer_norm", "double", "int", "long", "maximum", "minimum", "logsumexp", "prod",
     "einsum", "dot", "mv", "outer", "baddbmm", "addcmul", "lerp"}
)

_IDENTITY_FUNCS = frozenset({"id", "hash"})
_IDENTITY_METHODS = frozenset({"data_ptr", "untyped_storage", "storage", "_cdata"})

_REDUCED_DTYPES = frozenset({"float16", "half", "bfloat16", "float8_e4m3fn", "float8_e5m2"})


@functools.cache
def _tensor_compute_methods() -> frozenset[str]:
    """Methods of torch.Tensor that are compute ops: every routine outside the allow-lists."""
    try:
        import inspect

        import torch

        names = {n for n in dir(torch.Tensor)
                 if not n.startswith("__")
                 and inspect.isroutine(inspect.getattr_static(torch.Tensor, n, None))}
    except Exception:  # noqa: BLE001 -- torch unavailable or exotic: fall back to the curated core
        names = set()
    return frozenset((names | _CORE_COMPUTE_METHODS) - _ALLOWED_TENSOR_METHODS - _HOST_TRANSFER_METHODS
                     - _DOWNCAST_METHODS)


# --------------------------------------------------------------------------------------------------
# Classification of dotted paths reached through imports


_TORCH_NEUTRAL = frozenset(
    {"Tensor", "Size", "device", "dtype", "Generator", "memory_format", "contiguous_format", "channels_last",
     "preserve_format", "layout", "strided", "pi", "e", "inf", "nan", "newaxis", "nn", "cuda", "backends",
     "utils", "autograd", "version", "types", "float32", "float", "float64", "double", "float16", "half",
     "bfloat16", "int8", "int16", "short", "int32", "int", "int64", "long", "uint8", "uint16", "uint32",
     "uint64", "bool", "complex64", "cfloat", "complex128", "cdouble", "float8_e4m3fn", "float8_e5m2",
     "__version__", "Event", "linalg", "fft", "special", "testing", "accelerator"}
)
_TORCH_NAMESPACES = frozenset({"linalg", "fft", "special", "testing", "sparse", "nested", "masked"})
_TORCH_RESEED = frozenset({"manual_seed", "seed", "initial_seed", "set_rng_state", "get_rng_state", "random"})
_TORCH_CUDA_RESEED = frozenset({"manual_seed", "manual_seed_all", "seed", "seed_all", "set_rng_state",
                                "set_rng_state_all", "get_rng_state", "get_rng_state_all", "initial_seed",
                                "random"})
_TORCH_CUDA_STREAMS = frozenset({"Stream", "stream", "ExternalStream", "set_stream", "StreamContext",
                                 "default_stream", "streams"})
_TORCH_CUDA_GRAPHS = frozenset({"graph", "CUDAGraph", "graphs", "make_graphed_callables",
                                "graph_pool_handle"})
_TORCH_COMPILE = frozenset({"compile", "jit", "export", "compiler", "fx"})
_TORCH_PRIVATE_NS = frozenset({"ops", "library", "overrides"})
_TORCH_GLOBAL_STATE = frozenset({"set_default_dtype", "set_default_tensor_type", "set_default_device",
                                 "set_flush_denormal", "use_deterministic_algorithms",
                                 "set_deterministic_debug_mode", "set_num_threads",
                                 "set_num_interop_threads"})
_TORCH_FILE_IO = frozenset({"load", "save", "hub", "from_file", "package", "serialization"})
_NUMPY_FILE_IO = frozenset({"load", "save", "savez", "savez_compressed", "fromfile", "loadtxt", "genfromtxt",
                            "memmap", "lib", "tofile", "savetxt"})
# File readers that sit below a namespace or a class (`numpy.rec.fromfile`, `torch.UntypedStorage.from_file`:
# a native read, which no Python audit event reports), refused wherever they appear in a path.
_FILE_READERS = frozenset({"fromfile", "fromregex", "from_file", "DataSource", "open_memmap", "memmap",
                           "loadtxt", "genfromtxt"})

# Methods that change a list, dict, set or deque in place: called on a container that belongs to an imported
# module (`warnings.filters`), they leave state the worker's later jobs find (a red team kept outputs there).
_MUTATORS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem",
                       "remove", "discard", "clear", "appendleft", "extendleft", "sort", "reverse",
                       "__setitem__", "__delitem__", "__iadd__", "__ior__"})
_CONTAINERS = (list, dict, set, collections.deque)


def _loaded_objects(path: str) -> list[object]:
    """The object each prefix of `path` names (`a`, `a.b`, `a.b.c`), followed from the root module through
    attributes, and through `sys.modules` where an attribute is missing: only what this process has
    imported (nothing is imported for the check); None from where the path cannot be followed."""
    parts = path.split(".")
    found: list[object] = [sys.modules.get(parts[0])]
    for i, attr in enumerate(parts[1:], start=2):
        owner = found[-1]
        value = None if owner is None else inspect.getattr_static(owner, attr, None)
        found.append(value if value is not None else sys.modules.get(".".join(parts[:i])))
    return found


@functools.lru_cache(maxsize=4096)
def shared_container(path: str) -> bool:
    """Whether `path` names a list, dict, set or deque held by a module this process has imported."""
    return isinstance(_loaded_objects(path)[-1], _CONTAINERS)


@functools.lru_cache(maxsize=4096)
def reached_module(path: str) -> str | None:
    """The first module, by its own name, that `path` reaches through an attribute of another module
    (`typing.sys` -> "sys", `torch.os.path` -> "os"): None when every module on the way is the one the
    path names, or the path cannot be followed in what this process has imported."""
    parts = path.split(".")
    for i, value in enumerate(_loaded_objects(path)):
        if isinstance(value, types.ModuleType) and value.__name__ != ".".join(parts[:i + 1]):
            return value.__name__
    return None


# Outcomes of classification: a rule code, or one of these.
_COMPUTE = "compute"
_MODULE_CLASS = "module_class"


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def classify_path(path: str, allowed_torch_calls: frozenset[str]) -> str | None:
    """What reaching `path` (e.g. "torch.cuda.Stream") means: a rule code, "compute", "module_class", or
    None."""
    parts = path.split(".")
    if any(_is_private(p) for p in parts[1:]):
        return "private_api"
    root = parts[0]
    if root in ("torch", "numpy") and any(p in _FILE_READERS for p in parts[1:]):
        return "file_io"
    if root == "torch":
        return _classify_torch(parts[1:], allowed_torch_calls)
    if root == "numpy":
        if len(parts) >= 3 and parts[1] == "random" and parts[2] in ("seed", "set_state"):
            return "reseed"
        if len(parts) >= 2 and parts[1] == "ctypeslib":
            return "process_control"
        if len(parts) >= 2 and parts[1] in _NUMPY_FILE_IO:
            return "file_io"
    return None


def _classify_torch(rest: list[str], allowed: frozenset[str]) -> str | None:
    if not rest:
        return None
    if any(p.startswith("register_module_") for p in rest):
        return "global_torch_state"  # a hook in every module's call: the reference's, the baselines'
    head = rest[0]
    if head in _TORCH_PRIVATE_NS:
        return "private_api"
    if head in _TORCH_COMPILE:
        return "torch_compile"
    if head in _TORCH_RESEED:
        return "reseed"
    if head in _TORCH_GLOBAL_STATE:
        return "global_torch_state"
    if head == "set_float32_matmul_precision":
        return "precision_flags_changed"
    if head in _TORCH_FILE_IO:
        return "file_io"
    if head in ("autocast", "amp"):
        return "precision_downcast"
    if head == "Stream":
        return "stream_created"
    if head == "cuda":
        return _classify_torch_cuda(rest[1:])
    if head == "accelerator" and len(rest) > 1 and "stream" in rest[1].lower():
        return "stream_created"
    if head == "backends":
        leaf = rest[-1]
        if leaf.startswith(("preferred_", "sdp_kernel")):
            return "global_torch_state"  # the baselines' math libraries and attention backends
        return "precision_flags_changed" if leaf.startswith(("set_", "enable_", "flags")) else None
    if head == "Tensor":
        return _classify_tensor_member(rest[1:])
    if head == "nn":
        return _classify_nn(rest[1:])
    if head == "utils":
        if rest[1:2] == ["cpp_extension"] and rest[2:3] == ["load"]:
            return "file_io"  # sources outside the solution file cannot be audited
        return None
    if head == "autograd":
        return None if len(rest) == 1 or rest[1] in ("Function", "function") else _COMPUTE
    if head in _TORCH_NAMESPACES:
        return _COMPUTE if len(rest) > 1 else None
    if head in allowed or head in _TORCH_NEUTRAL or head[:1].isupper():
        return None
    return _COMPUTE


def _classify_torch_cuda(rest: list[str]) -> str | None:
    if not rest:
        return None
    if rest[0] in _TORCH_CUDA_STREAMS:
        return "stream_created"
    if rest[0] in _TORCH_CUDA_GRAPHS:
        return "cuda_graph"
    if rest[0] in _TORCH_CUDA_RESEED:
        return "reseed"
    if rest[0] == "amp":
        return "precision_downcast"
    if rest[0] == "jiterator":
        return "torch_compile"
    if rest[0] == "tunable" or any(p.startswith("set_") for p in rest):
        return "global_torch_state"  # a memory cap, a sync debug mode, the device: the harness's too
    return None


def _classify_tensor_member(rest: list[str]) -> str | None:
    if not rest:
        return None
    if rest[0] in _SUBCLASS_METHODS:
        return "tensor_subclass"
    return _COMPUTE if rest[0] in _tensor_compute_methods() else None


def _classify_nn(rest: list[str]) -> str | None:
    if not rest:
        return None
    if rest[0] in ("functional", "init"):
        return _COMPUTE if len(rest) > 1 else None
    if rest[0] in _MODULE_CONTAINERS:
        return None
    if rest[0][:1].isupper():
        return _MODULE_CLASS
    return None


# --------------------------------------------------------------------------------------------------
# Module facts gathered before the rules run


@dataclass
class _ClassInfo:
    node: ast.ClassDef
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    torch_modules: set[str] = field(default_factory=set)  # self.<attr> bound to torch nn modules
    tensor_attrs: set[str] = field(default_factory=set)  # self.<attr> bound to tensors
    kernel_attrs: set[str] = field(default_factory=set)  # self.<attr> bound to compiled kernels
    instance_attrs: dict[str, str] = field(default_factory=dict)  # self.<attr> -> local class it instantiates


@dataclass
class _Module:
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> dotted module path
    imported_roots: set[str] = field(default_factory=set)  # local names bound by imports (modules/objects)
    bound: set[str] = field(default_factory=set)  # every module-level name bound in the file
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: dict[str, _ClassInfo] = field(default_factory=dict)
    kernel_names: set[str] = field(default_factory=set)  # module-level names bound to compiled kernels
    module_containers: set[str] = field(default_factory=set)  # module-level names bound to dicts/lists/sets


FuncNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def _is_main_guard(node: ast.AST) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    parts = [node.test.left, *node.test.comparators]
    return any(isinstance(p, ast.Name) and p.id == "__name__" for p in parts)


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


# --------------------------------------------------------------------------------------------------
# The checker


class _Checker:
    """Runs every rule over one parsed file; `flags` accumulates findings in source order."""

    def __init__(self, tree: ast.Module, policy: Policy) -> None:
        self.tree = tree
        self.policy = policy
        self.allowed_torch = frozenset(policy.allowed_torch_calls)
        self.flags: list[Flag] = []
        self.parents = _parents(tree)
        self.mod = _Module()
        self.skip: set[ast.AST] = set()  # subtrees of the copied reference (Model, get_inputs, main guard)
        self.owner: dict[FuncNode, _ClassInfo | None] = {}
        self._locals_cache: dict[FuncNode, frozenset[str]] = {}

    # ---- reporting

    def add(self, code: str, message: str, node: ast.AST | None) -> None:
        if self.policy.active(code):
            line = getattr(node, "lineno", None) if node is not None else None
            self.flags.append(make_flag(code, message, line=line))

    # ---- driver

    def run(self) -> list[Flag]:
        self._collect()
        self._module_rules()
        self._class_rules()
        scope = self._forward_scope()
        self._forward_rules(scope)
        self._cuda_rules()
        return self.flags

    # ---- resolution

    def resolve(self, node: ast.AST) -> str | None:
        """Dotted path an expression reaches through imports/aliases (`F.relu` ->
        torch.nn.functional.relu)."""
        if isinstance(node, ast.Name):
            return self.mod.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) >= 2 and (name := _const_str(node.args[1])) is not None):
            base = self.resolve(node.args[0])
            return f"{base}.{name}" if base else None
        return None

    def classify(self, path: str) -> str | None:
        return classify_path(path, self.allowed_torch)

    # ---- collection

    def _collect(self) -> None:
        for stmt in self.tree.body:
            if _is_main_guard(stmt):
                self.skip.add(stmt)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    local = a.asname or a.name.split(".")[0]
                    self.mod.aliases[local] = a.name if a.asname else a.name.split(".")[0]
                    self.mod.imported_roots.add(local)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        local = a.asname or a.name
                        self.mod.aliases[local] = f"{node.module}.{a.name}"
                        self.mod.imported_roots.add(local)
        self._class_names = {s.name for s in self.tree.body if isinstance(s, ast.ClassDef)}
        for stmt in self.tree.body:
            self._collect_stmt(stmt)
        self._collect_local_aliases()

    def _collect_local_aliases(self) -> None:
        """Names bound inside functions to an imported path (`cls = nn.Module` in a def), as aliases too,
        where the module binds no such name: a store through them (`cls.to = f`) is a store into the
        imported object. Twice, for chains (`a = torch.nn; b = a.Module`)."""
        functions = [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for _ in range(2):
            for fn in functions:
                for node in ast.walk(fn):
                    if (isinstance(node, ast.Assign) and len(node.targets) == 1
                            and isinstance(node.targets[0], ast.Name)
                            and isinstance(node.value, (ast.Name, ast.Attribute))
                            and node.targets[0].id not in self.mod.aliases
                            and (path := self.resolve(node.value))):
                        self.mod.aliases[node.targets[0].id] = path

    def _collect_stmt(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.mod.functions[stmt.name] = stmt
            self.mod.bound.add(stmt.name)
            if stmt.name in ("get_inputs", "get_init_inputs"):
                self.skip.add(stmt)
        elif isinstance(stmt, ast.ClassDef):
            self.mod.bound.add(stmt.name)
            self.mod.classes[stmt.name] = self._class_info(stmt)
            if stmt.name == "Model":
                self.skip.add(stmt)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                for name in (n.id for n in ast.walk(t) if isinstance(n, ast.Name)):
                    self.mod.bound.add(name)
                if isinstance(t, ast.Name) and stmt.value is not None:
                    self._collect_binding(t.id, stmt.value)
        elif isinstance(stmt, (ast.If, ast.Try, ast.With)) and not _is_main_guard(stmt):
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.stmt):
                    self._collect_stmt(child)

    def _collect_binding(self, name: str, value: ast.expr) -> None:
        if isinstance(value, (ast.Name, ast.Attribute)) and (path := self.resolve(value)):
            self.mod.aliases[name] = path  # `mm = torch.matmul`, `F = torch.nn.functional`
        elif self._is_kernel_expr(value, None):
            self.mod.kernel_names.add(name)
        elif isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp)) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id in ("dict", "list", "set", "OrderedDict", "defaultdict")
        ):
            self.mod.module_containers.add(name)

    def _is_kernel_expr(self, value: ast.expr, cls: _ClassInfo | None) -> bool:
        """A compiled kernel/module handle: cuda.compile(...), cuda.load(...), load_inline(...), attrs of
        those."""
        if isinstance(value, ast.Call):
            path = self.resolve(value.func)
            return path in _KERNEL_FACTORIES
        if isinstance(value, ast.Attribute):
            return self._is_kernel_expr(value.value, cls) or self._is_kernel_receiver(value.value, cls)
        if isinstance(value, ast.Name):
            return value.id in self.mod.kernel_names
        return False

    def _class_info(self, node: ast.ClassDef) -> _ClassInfo:
        info = _ClassInfo(node)
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                info.methods[stmt.name] = stmt
        for method in info.methods.values():
            for sub in ast.walk(method):
                if isinstance(sub, ast.Assign):
                    for t in sub.targets:
                        if _is_self_attr(t):
                            self._class_binding(info, t.attr, sub.value)
                elif (isinstance(sub, ast.Call) and _is_self_attr(sub.func)
                      and sub.func.attr in ("register_buffer", "register_parameter")
                      and sub.args and (name := _const_str(sub.args[0]))):
                    info.tensor_attrs.add(name)
        return info

    def _class_binding(self, info: _ClassInfo, attr: str, value: ast.expr) -> None:
        if self._is_kernel_expr(value, info):
            info.kernel_attrs.add(attr)
            return
        if not isinstance(value, ast.Call):
            return
        if isinstance(value.func, ast.Name) and value.func.id in self._class_names:
            info.instance_attrs[attr] = value.func.id
            return
        path = self.resolve(value.func) or ""
        leaf = path.rsplit(".", 1)[-1]
        if self.classify(path) == _MODULE_CLASS or leaf in ("ModuleList", "ModuleDict"):
            info.torch_modules.add(attr)
        elif path.startswith("torch.") and (leaf in ("Parameter", "Buffer") or (
            leaf not in _NON_TENSOR_TORCH and not leaf[:1].isupper()
        )):
            info.tensor_attrs.add(attr)  # nn.Parameter(...), torch.randn(...), torch.empty(...)

    # ---- module-wide rules

    def _module_rules(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self._check_import(a.name, node)
            elif isinstance(node, ast.ImportFrom):
                self._check_import_from(node)
            elif isinstance(node, ast.Call):
                self._check_builtin_call(node)
                self._check_method_anywhere(node)
                self._check_container_call(node)
            elif isinstance(node, ast.Name):
                self._check_name(node)
            elif isinstance(node, ast.Attribute):
                self._check_attribute(node)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                self._check_store(node)

    def _check_import(self, name: str, node: ast.AST) -> None:
        verdict = _import_verdict(name, self.policy.allowed_imports)
        if verdict is not None:
            code = "thread_created" if name.split(".")[0] in _THREAD_MODULES else "forbidden_import"
            self.add(code, f"import of `{name}` is not allowed: {verdict}", node)
            return
        kind = self.classify(name)
        if kind not in (None, _COMPUTE, _MODULE_CLASS):
            self.add(kind, f"import of `{name}`", node)

    def _check_import_from(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.add("forbidden_import", "relative imports are not allowed in a solution file", node)
            return
        module = node.module or ""
        for a in node.names:
            if a.name == "*":
                self.add("star_import", f"`from {module} import *` hides which names it binds", node)
                self._check_import(module, node)
            else:
                self._check_import(f"{module}.{a.name}", node)

    def _check_builtin_call(self, node: ast.Call) -> None:
        func = node.func
        if not isinstance(func, ast.Name) or not self.is_builtin(func):
            return
        name = func.id
        if name == "type" and len(node.args) == 3:
            self.add("dynamic_code", "three-argument type() creates a class dynamically", node)
        elif name in _ATTR_BUILTINS and len(node.args) >= 2:
            self._check_attr_builtin(name, node)

    def _check_attr_builtin(self, name: str, node: ast.Call) -> None:
        attr = _const_str(node.args[1])
        if attr is None:
            self.add("dynamic_attribute", f"{name}() with a computed attribute name", node)
            return
        if attr.startswith("__") and attr.endswith("__") and attr not in _ALLOWED_DUNDER_ATTRS:
            self.add("dunder_access", f"{name}(..., {attr!r})", node)
        target = self.resolve(node.args[0])
        if target is None and not self._is_imported_object(node.args[0]):
            return
        where = target or ast.unparse(node.args[0])
        if name in ("setattr", "delattr"):
            self.add("monkey_patch", f"{name}() on `{where}` replaces an attribute of an imported module",
                     node)
        else:
            self.add("dynamic_attribute", f"{name}() on module `{where}` (aliasing `{where}.{attr}`)", node)

    def _is_imported_object(self, node: ast.AST) -> bool:
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        return isinstance(root, ast.Name) and root.id in self.mod.imported_roots

    def _check_method_anywhere(self, node: ast.Call) -> None:
        func = node.func
        if not isinstance(func, ast.Attribute) or self.resolve(func) is not None:
            return
        if func.attr in _RESEED_METHODS and not self._is_kernel_receiver(func.value, None):
            self.add("reseed", f"`.{func.attr}()` reseeds a generator", node)
        elif func.attr in _SUBCLASS_METHODS:
            self.add("tensor_subclass", f"`.{func.attr}()` makes a tensor subclass", node)
        elif func.attr == "tofile":
            self.add("file_io", "`.tofile()` writes a file", node)

    def _check_name(self, node: ast.Name) -> None:
        name = node.id
        if not isinstance(node.ctx, ast.Load):
            return
        if name.startswith("__") and name.endswith("__"):
            if name == "__import__":
                self.add("dynamic_code", "`__import__` imports dynamically", node)
            elif name not in _ALLOWED_DUNDER_NAMES:
                self.add("dunder_access", f"name `{name}`", node)
            return
        if name in self.mod.aliases and not self._locally_bound(node):
            if self._is_outermost(node):
                self._check_path_use(self.mod.aliases[name], node)
            return
        if not self.is_builtin(node):
            return
        if name in _DYNAMIC_BUILTINS:
            self.add("dynamic_code", f"`{name}` runs or inspects code dynamically", node)
        elif name in _FILE_BUILTINS:
            self.add("file_io", f"`{name}` reads or writes outside the harness", node)
        elif name in _EXIT_BUILTINS:
            self.add("process_control", f"`{name}` ends the process", node)
        elif name in _ATTR_BUILTINS and not self._is_called(node):
            self.add("dynamic_attribute", f"`{name}` taken as a value hides attribute lookups", node)

    def _check_attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr.startswith("__") and attr.endswith("__") and attr not in _ALLOWED_DUNDER_ATTRS:
            self.add("dunder_access", f"attribute `{attr}`", node)
        if attr == "_version":  # a tensor's write counter: what tells timing's re-checked rounds apart
            self.add("identity_cache", "reads `._version`, a tensor's write counter", node)
        if isinstance(node.ctx, ast.Load) and self._is_outermost(node):
            path = self.resolve(node)
            if path is not None:
                self._check_path_use(path, node)

    def _check_path_use(self, path: str, node: ast.AST) -> None:
        """Module-wide verdict on reaching a dotted path (called or not)."""
        reached = reached_module(path)
        if reached is not None and _import_verdict(reached, self.policy.allowed_imports) is not None:
            self.add("forbidden_import", f"`{path}` reaches the module `{reached}`, whose import is not "
                     "allowed", node)
            return
        kind = self.classify(path)
        if kind is None:
            return
        if kind == _COMPUTE:
            if not self._is_called(node) and not self._in_annotation(node) and not self._skipped(node):
                self.add("torch_compute_op", f"reference to `{path}` aliases a torch compute op", node)
            return
        if kind == _MODULE_CLASS:
            return
        self.add(kind, f"uses `{path}`", node)

    def _check_store(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        else:
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    self._check_attr_store(sub)
                elif isinstance(sub, ast.Subscript) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    self._check_container(sub.value, "item assignment", sub)
        value = getattr(node, "value", None)
        if isinstance(node, ast.AugAssign):
            self._check_container(node.target, "augmented assignment", node)
        elif isinstance(value, ast.Attribute):
            self._check_container(value, "a name bound to it", node)

    def _check_container_call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _MUTATORS:
            self._check_container(func.value, f"`.{func.attr}()`", node)

    def _check_container(self, target: ast.AST, how: str, node: ast.AST) -> None:
        """`monkey_patch` when `target` is a list, dict, set or deque of an imported module (a name bound to
        one counts: it can be changed through the name)."""
        path = self.resolve(target)
        if path is not None and shared_container(path):
            self.add("monkey_patch", f"changes `{path}`, a container of an imported module that outlives the "
                     f"job ({how})", node)

    def _check_attr_store(self, target: ast.Attribute) -> None:
        base = self.resolve(target.value)
        if base is None and not self._is_imported_object(target.value):
            return
        where = f"{base or ast.unparse(target.value)}.{target.attr}"
        if where.startswith("torch.backends."):
            self.add("precision_flags_changed", f"assigns `{where}` (changes the reference's precision)",
                     target)
        else:
            self.add("monkey_patch", f"assigns `{where}`, an attribute of an imported module", target)

    # ---- class rules: bases, dunder hooks, ModelNew, the reference Model

    def _class_rules(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef):
                self._check_class(node)
            elif isinstance(node, ast.Name) and node.id == "Model" and isinstance(node.ctx, ast.Load):
                if not self._skipped(node) and not self.mod.aliases.get("Model", "").startswith("torch."):
                    self.add("reference_reuse", "uses the reference `Model`", node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._check_def(node)

    def _check_class(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            path = self.resolve(base)
            if path in _TENSOR_CLASSES or self._local_tensor_class(base):
                self.add("tensor_subclass", f"class `{node.name}` subclasses a tensor type", node)
            elif node.name == "ModelNew" and path and self.classify(path) == _MODULE_CLASS:
                self.add("torch_module_call", f"`ModelNew` inherits `{path}` and its torch forward", node)

    def _local_tensor_class(self, base: ast.expr, depth: int = 0) -> bool:
        if depth > 20 or not isinstance(base, ast.Name) or base.id not in self.mod.classes:
            return False
        for b in self.mod.classes[base.id].node.bases:
            if self.resolve(b) in _TENSOR_CLASSES or self._local_tensor_class(b, depth + 1):
                return True
        return False

    def _check_def(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        name = node.name
        if not (name.startswith("__") and name.endswith("__")):
            return
        if name in _TORCH_HOOK_DEFS:
            self.add("tensor_subclass", f"defines `{name}`, a torch function/dispatch hook", node)
        elif name not in _ALLOWED_DUNDER_DEFS:
            self.add("dunder_definition", f"defines `{name}`", node)

    # ---- forward-path scope

    def _forward_scope(self) -> list[FuncNode]:
        """Functions reachable from forward/__call__/backward of every class except the reference Model."""
        work: list[tuple[FuncNode, _ClassInfo | None]] = []
        for cname, info in self.mod.classes.items():
            if cname == "Model":
                continue
            for mname, m in info.methods.items():
                if mname in ("forward", "__call__", "backward"):
                    work.append((m, info))
        seen: dict[FuncNode, _ClassInfo | None] = {}
        while work:
            fn, owner = work.pop()
            if fn in seen:
                continue
            seen[fn] = owner
            work.extend(self._referenced_functions(fn, owner))
        self.owner = seen
        return list(seen)

    def _referenced_functions(self, fn: FuncNode,
                              owner: _ClassInfo | None) -> Iterator[tuple[FuncNode, _ClassInfo | None]]:
        for sub in ast.walk(fn):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                if sub.id in self.mod.functions:
                    yield self.mod.functions[sub.id], None
                elif sub.id in self.mod.classes and sub.id != "Model":
                    info = self.mod.classes[sub.id]
                    yield from ((m, info) for m in info.methods.values())
            elif isinstance(sub, ast.Attribute) and owner is not None and _is_self(sub.value):
                if sub.attr in owner.methods:
                    yield owner.methods[sub.attr], owner
                elif (cname := owner.instance_attrs.get(sub.attr)) and cname != "Model":
                    info = self.mod.classes[cname]
                    yield from ((m, info) for m in info.methods.values() if m.name != "__init__")

    # ---- forward-path rules

    def _forward_rules(self, scope: list[FuncNode]) -> None:
        types = _TensorTypes(self, scope)
        for fn in scope:
            owner = self.owner.get(fn)
            tensors = types.tensors[fn]
            for sub in ast.walk(fn):
                self._forward_node(sub, fn, owner, tensors)

    def _forward_node(self, sub: ast.AST, fn: FuncNode, owner: _ClassInfo | None, tensors: set[str]) -> None:
        is_t = functools.partial(self.is_tensor, tensors=tensors, owner=owner)
        if isinstance(sub, ast.Call):
            self._forward_call(sub, owner, tensors, is_t)
        elif isinstance(sub, ast.BinOp):
            if isinstance(sub.op, ast.MatMult) or is_t(sub.left) or is_t(sub.right):
                self.add("torch_operator", f"`{_op(sub.op)}` applied to a tensor", sub)
        elif isinstance(sub, ast.UnaryOp) and is_t(sub.operand):
            self.add("torch_operator", f"`{_op(sub.op)}` applied to a tensor", sub)
        elif isinstance(sub, ast.AugAssign):
            if isinstance(sub.op, ast.MatMult) or is_t(sub.target) or is_t(sub.value):
                self.add("torch_operator", f"`{_op(sub.op)}=` applied to a tensor", sub)
        elif isinstance(sub, ast.Compare):
            self._forward_compare(sub, is_t)
        elif isinstance(sub, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            self._forward_try(sub)
        elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Load):
            if not self._is_called(sub) and sub.attr in _tensor_compute_methods() and is_t(sub.value):
                self.add("torch_compute_op", f"reference to tensor method `.{sub.attr}`", sub)
        elif isinstance(sub, (ast.Global, ast.Nonlocal)):
            self.add("forward_state", f"`{type(sub).__name__.lower()}` state in the forward path", sub)
        elif (isinstance(sub, ast.Return) and isinstance(sub.value, ast.Name) and _is_forward(fn)
              and sub.value.id in _param_names(fn)):
            self.add("returns_input", f"returns its input `{sub.value.id}`", sub)
        if isinstance(sub, (ast.Assign, ast.AugAssign)):
            self._forward_state(sub)
        self._identity_key(sub)

    def _forward_call(self, node: ast.Call, owner: _ClassInfo | None, tensors: set[str], is_t) -> None:
        self._launch_stream(node)
        func = node.func
        path = self.resolve(func)
        if path is not None:
            self._forward_path_call(path, node, is_t)
            return
        if isinstance(func, ast.Name):
            if func.id in self.local_modules:
                self.add("torch_module_call", f"calls torch module `{func.id}`", node)
            elif self.is_builtin(func):
                if func.id in _REDUCING_BUILTINS and any(is_t(a) for a in node.args):
                    self.add("torch_compute_op", f"builtin `{func.id}` reduces a tensor", node)
                elif func.id in _HOST_BUILTINS and any(is_t(a) for a in node.args):
                    self.add("host_transfer", f"`{func.id}(tensor)` reads tensor data on the host", node)
            return
        if isinstance(func, ast.Attribute):
            self._forward_method(node, func, owner, is_t)
        self._downcast_kwargs(node)

    def _forward_path_call(self, path: str, node: ast.Call, is_t) -> None:
        kind = self.classify(path)
        if kind == _COMPUTE:
            self.add("torch_compute_op", f"calls `{path}`", node)
        elif kind == _MODULE_CLASS:
            self.add("torch_module_call", f"builds and runs `{path}` in the forward path", node)
        elif path.startswith("numpy.") and any(is_t(a) for a in node.args):
            self.add("numpy_in_forward", f"calls `{path}` on a tensor", node)
        self._downcast_kwargs(node)

    def _forward_method(self, node: ast.Call, func: ast.Attribute, owner: _ClassInfo | None, is_t) -> None:
        name, recv = func.attr, func.value
        if _is_self(recv):
            if owner is not None and name in owner.torch_modules:
                self.add("torch_module_call", f"calls torch module `self.{name}`", node)
            return
        if self._is_kernel_receiver(recv, owner):
            return
        if owner is not None and _is_self_attr(recv) and recv.attr in owner.torch_modules:
            self.add("torch_module_call", f"calls `self.{recv.attr}.{name}`", node)
            return
        if name in _HOST_TRANSFER_METHODS or (name == "to" and _mentions_cpu(node)):
            self.add("host_transfer", f"`.{name}()` moves tensor data to the host", node)
        elif name in _DOWNCAST_METHODS or (name in ("to", "type") and _mentions_reduced_dtype(node, self)):
            self.add("precision_downcast", f"`.{name}()` casts to reduced precision", node)
        elif (name in _tensor_compute_methods() and (is_t(recv) or name not in _CONTAINER_METHODS)
              and not isinstance(recv, ast.Constant)):
            self.add("torch_compute_op", f"calls tensor method `.{name}()`", node)
        if isinstance(recv, ast.Name) and recv.id in self.local_modules:
            self.add("torch_module_call", f"calls torch module `{recv.id}`", node)

    def _launch_stream(self, node: ast.Call) -> None:
        """`kernel(..., stream=s)`: the helper launches wherever it is told; only the current stream is
        fair."""
        for kw in node.keywords:
            if kw.arg != "stream" or (isinstance(kw.value, ast.Constant) and kw.value.value is None):
                continue
            if isinstance(kw.value, ast.Call) and self.resolve(kw.value.func) == "torch.cuda.current_stream":
                continue
            self.add("stream_created",
                     f"launches on `stream={ast.unparse(kw.value)}`, not the current stream", node)

    def _downcast_kwargs(self, node: ast.Call) -> None:
        for kw in node.keywords:
            if kw.arg == "dtype" and (p := self.resolve(kw.value)) and p.split(".")[-1] in _REDUCED_DTYPES:
                self.add("precision_downcast", f"allocates/casts with `{p}`", node)

    def _forward_compare(self, node: ast.Compare, is_t) -> None:
        if all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            return
        if any(is_t(x) for x in (node.left, *node.comparators)):
            self.add("torch_operator", "comparison applied to a tensor", node)

    def _forward_try(self, node: ast.Try) -> None:
        for handler in node.handlers:
            last = handler.body[-1] if handler.body else None
            if not isinstance(last, ast.Raise):
                self.add("exception_fallback", "an except clause that does not re-raise hides kernel "
                         "failures (and is how torch fallbacks are written)", handler)

    def _forward_state(self, node: ast.Assign | ast.AugAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            base = t.value if isinstance(t, ast.Subscript) else t
            if _is_self_attr(base):
                self.add("forward_state", f"writes `{ast.unparse(base)}`, state that survives the call", node)
            elif (isinstance(t, ast.Subscript) and isinstance(base, ast.Name)
                  and base.id in self.mod.module_containers):
                self.add("forward_state", f"writes into module-level `{base.id}`", node)

    def _identity_key(self, node: ast.AST) -> None:
        keys: list[ast.AST] = []
        if isinstance(node, ast.Subscript):
            keys.append(node.slice)
        elif isinstance(node, ast.Dict):
            keys.extend(k for k in node.keys if k is not None)
        elif isinstance(node, ast.Compare):
            keys.extend(self._compare_keys(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
            "get", "setdefault", "pop", "__contains__"
        ):
            keys.extend(node.args[:1])
        for key in keys:
            if self._is_identity_operand(key):
                self.add("identity_cache", "state keyed on a tensor's identity (data_ptr/id/hash)", node)
                return

    def _compare_keys(self, node: ast.Compare) -> list[ast.AST]:
        """Operands of a comparison that act as lookup keys: the left side of `in`, or either side of
        `==`/`is` against remembered state (`self.x`, a module-level name). Two fresh identities compared
        with each other (an aliasing check: `y.data_ptr() != x.data_ptr()`) are not a cache."""
        operands = [node.left, *node.comparators]
        keys: list[ast.AST] = []
        for i, op in enumerate(node.ops):
            left, right = operands[i], operands[i + 1]
            if isinstance(op, (ast.In, ast.NotIn)):
                keys.append(left)
            elif isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) and (
                self._is_stored_state(left) or self._is_stored_state(right)
            ):
                keys.extend([left, right])
        return keys

    def _is_stored_state(self, expr: ast.AST) -> bool:
        base = expr.value if isinstance(expr, ast.Subscript) else expr
        return _is_self_attr(base) or (isinstance(base, ast.Name) and base.id in self.mod.bound)

    def _is_identity_operand(self, expr: ast.AST) -> bool:
        """A tensor identity used as a value: id(x), x.data_ptr(), a name bound to one, or a tuple holding
        one. Arithmetic on a pointer (`ptr % 16 == 0`, alignment checks) is not a key and is not flagged."""
        if isinstance(expr, (ast.Tuple, ast.List)):
            return any(self._is_identity_operand(e) for e in expr.elts)
        if isinstance(expr, ast.Call):
            f = expr.func
            if isinstance(f, ast.Name) and f.id in _IDENTITY_FUNCS and self.is_builtin(f):
                return True
            return isinstance(f, ast.Attribute) and f.attr in _IDENTITY_METHODS
        return isinstance(expr, ast.Name) and expr.id in self.identity_names

    # ---- tensor-ness

    def is_tensor(self, expr: ast.AST, *, tensors: set[str], owner: _ClassInfo | None) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in tensors
        if isinstance(expr, ast.Attribute):
            if _is_self(expr.value):
                return owner is not None and expr.attr in owner.tensor_attrs
            if owner is not None and _is_self_attr(expr.value) and expr.value.attr in owner.torch_modules:
                return expr.attr in _MODULE_TENSOR_ATTRS
            return expr.attr in _TENSOR_ATTRS and self.is_tensor(expr.value, tensors=tensors, owner=owner)
        if isinstance(expr, (ast.Subscript, ast.Starred)):
            return self.is_tensor(expr.value, tensors=tensors, owner=owner)
        if isinstance(expr, ast.BinOp):
            return any(self.is_tensor(x, tensors=tensors, owner=owner) for x in (expr.left, expr.right))
        if isinstance(expr, ast.UnaryOp):
            return self.is_tensor(expr.operand, tensors=tensors, owner=owner)
        if isinstance(expr, ast.IfExp):
            return any(self.is_tensor(x, tensors=tensors, owner=owner) for x in (expr.body, expr.orelse))
        if isinstance(expr, ast.Call):
            return self._call_returns_tensor(expr, tensors, owner)
        return False

    def _call_returns_tensor(self, expr: ast.Call, tensors: set[str], owner: _ClassInfo | None) -> bool:
        path = self.resolve(expr.func)
        if path is not None:
            leaf = path.split(".")[-1]
            return path.startswith("torch.") and leaf not in _NON_TENSOR_TORCH and not leaf[:1].isupper()
        func = expr.func
        if isinstance(func, ast.Attribute) and not self._is_kernel_receiver(func.value, owner):
            if func.attr in _SCALAR_METHODS:
                return False
            if owner is not None and _is_self(func.value) and func.attr in owner.torch_modules:
                return True
            return self.is_tensor(func.value, tensors=tensors, owner=owner)
        return False

    def _is_kernel_receiver(self, recv: ast.AST, owner: _ClassInfo | None) -> bool:
        if isinstance(recv, ast.Name):
            return recv.id in self.mod.kernel_names
        if _is_self_attr(recv):
            return owner is not None and recv.attr in owner.kernel_attrs
        if isinstance(recv, ast.Attribute):
            return self._is_kernel_receiver(recv.value, owner)
        return False

    # ---- CUDA / C++ text rules

    def _cuda_rules(self) -> None:
        docstrings = _docstring_nodes(self.tree)
        for node in ast.walk(self.tree):
            text = _const_str(node)
            if text is None or node in docstrings or not _looks_like_code(text):
                continue
            for code, message, offset in scan_cuda_text(text):
                line = getattr(node, "lineno", 1) + text.count("\n", 0, offset)
                self.add(code, message, _Line(line))

    # ---- small helpers

    def is_builtin(self, node: ast.Name) -> bool:
        """The name refers to a Python builtin: bound nowhere in the file's module or enclosing functions."""
        return (node.id not in self.mod.bound and node.id not in self.mod.aliases
                and not self._locally_bound(node))

    def _locally_bound(self, node: ast.Name) -> bool:
        cur = self.parents.get(node)
        while cur is not None:
            if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and (
                node.id in self._function_locals(cur)
            ):
                return True
            cur = self.parents.get(cur)
        return False

    def _function_locals(self, fn: FuncNode) -> frozenset[str]:
        if fn not in self._locals_cache:
            names = {a.arg for a in _all_args(fn)}
            if fn.args.kwarg:
                names.add(fn.args.kwarg.arg)
            for sub in ast.walk(fn):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    names.add(sub.id)
                elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and sub is not fn:
                    names.add(sub.name)
                elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                    names.update((a.asname or a.name).split(".")[0] for a in sub.names)
                elif isinstance(sub, ast.ExceptHandler) and sub.name:
                    names.add(sub.name)
            self._locals_cache[fn] = frozenset(names)
        return self._locals_cache[fn]

    def _is_outermost(self, node: ast.AST) -> bool:
        parent = self.parents.get(node)
        return not (isinstance(parent, ast.Attribute) and parent.value is node)

    def _is_called(self, node: ast.AST) -> bool:
        parent = self.parents.get(node)
        return isinstance(parent, ast.Call) and parent.func is node

    def _in_annotation(self, node: ast.AST) -> bool:
        child, parent = node, self.parents.get(node)
        while parent is not None:
            if isinstance(parent, ast.arg) and parent.annotation is child:
                return True
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and parent.returns is child:
                return True
            if isinstance(parent, ast.AnnAssign) and parent.annotation is child:
                return True
            child, parent = parent, self.parents.get(parent)
        return False

    def _skipped(self, node: ast.AST) -> bool:
        cur: ast.AST | None = node
        while cur is not None:
            if cur in self.skip:
                return True
            cur = self.parents.get(cur)
        return False

    @functools.cached_property
    def identity_names(self) -> set[str]:
        names: set[str] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and any(
                isinstance(s, ast.Call) and (
                    (isinstance(s.func, ast.Name) and s.func.id in _IDENTITY_FUNCS)
                    or (isinstance(s.func, ast.Attribute) and s.func.attr in _IDENTITY_METHODS)
                ) for s in ast.walk(node.value)
            ):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        return names

    @functools.cached_property
    def local_modules(self) -> set[str]:
        """Loop variables over torch module containers (`for layer in self.layers: x = layer(x)`)."""
        names: set[str] = set()
        for node in ast.walk(self.tree):
            if (isinstance(node, ast.For) and isinstance(node.target, ast.Name) and _is_self_attr(node.iter)
                    and any(node.iter.attr in c.torch_modules for c in self.mod.classes.values())):
                names.add(node.target.id)
        return names


@dataclass(frozen=True)
class _Line:
    """A stand-in node carrying only a line number (findings inside string constants)."""

    lineno: int


_THREAD_MODULES = frozenset({"threading", "_thread", "multiprocessing", "concurrent", "asyncio"})
_NON_TENSOR_TORCH = frozenset(
    {"numel", "is_tensor", "is_floating_point", "is_complex", "get_default_dtype", "finfo", "iinfo",
     "promote_types", "result_type", "broadcast_shapes", "typename", "device", "no_grad", "inference_mode",
     "synchronize", "current_stream", "current_device", "get_device_properties", "get_device_capability",
     "is_available", "device_count", "load_inline", "compile", "load", "is_grad_enabled", "enable_grad",
     "set_grad_enabled"}
)


def _import_verdict(name: str, allowed: tuple[str, ...]) -> str | None:
    """None if `name` may be imported; otherwise why not. The most specific matching entry wins."""
    def depth(prefixes: Iterable[str]) -> int:
        return max((p.count(".") + 1 for p in prefixes if name == p or name.startswith(p + ".")), default=0)

    allow, forbid = depth(allowed), depth(FORBIDDEN_IMPORTS)
    if allow > forbid:
        return None
    if forbid:
        key = max((p for p in FORBIDDEN_IMPORTS if name == p or name.startswith(p + ".")), key=len)
        return FORBIDDEN_IMPORTS[key]
    return "not in the policy's allowed imports"


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _is_self_attr(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and _is_self(node.value)


def _param_names(fn: FuncNode) -> list[str]:
    args = fn.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if args.vararg:
        names.append(args.vararg.arg)
    return [n for n in names if n not in ("self", "cls", "ctx")]


def _is_forward(fn: FuncNode) -> bool:
    return getattr(fn, "name", "") == "forward"


def _mentions_cpu(node: ast.Call) -> bool:
    values = [*node.args, *(kw.value for kw in node.keywords)]
    return any("cpu" == _const_str(v)
               or (isinstance(v, ast.Call) and _const_str(v.args[0] if v.args else None) == "cpu")
               for v in values)


def _mentions_reduced_dtype(node: ast.Call, checker: _Checker) -> bool:
    values = [*node.args, *(kw.value for kw in node.keywords)]
    return any((p := checker.resolve(v)) is not None and p.split(".")[-1] in _REDUCED_DTYPES for v in values)


_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
        ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<",
        ast.RShift: ">>", ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Not: "not"}


def _op(op: ast.AST) -> str:
    return _OPS.get(type(op), type(op).__name__)


def _docstring_nodes(tree: ast.Module) -> set[ast.AST]:
    nodes: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and _const_str(first.value) is not None:
                nodes.add(first.value)
    return nodes


# --------------------------------------------------------------------------------------------------
# Tensor-type inference over the forward scope


class _TensorTypes:
    """Names known to hold tensors, per function; parameters seeded from forward signatures and call sites."""

    def __init__(self, checker: _Checker, scope: list[FuncNode]) -> None:
        self.c = checker
        self.scope = scope
        self.tensors: dict[FuncNode, set[str]] = {fn: self._seed(fn) for fn in scope}
        for _ in range(6):  # a fixpoint; six rounds cover helper chains deeper than any real solution
            changed = False
            for fn in scope:
                changed |= self._propagate_locals(fn)
            for fn in scope:
                changed |= self._propagate_calls(fn)
            if not changed:
                break

    def _seed(self, fn: FuncNode) -> set[str]:
        if getattr(fn, "name", None) not in ("forward", "backward"):
            return {a.arg for a in _all_args(fn) if _annotated_tensor(a, self.c)}
        defaults = _defaults_by_name(fn)
        out = set()
        for a in _all_args(fn):
            if a.arg in ("self", "cls", "ctx"):
                continue
            if a.annotation is not None and not _annotated_tensor(a, self.c):
                continue
            d = defaults.get(a.arg)
            if isinstance(d, ast.Constant) and d.value is not None:
                continue
            out.add(a.arg)
        return out

    def _propagate_locals(self, fn: FuncNode) -> bool:
        known = self.tensors[fn]
        before = len(known)
        owner = self.c.owner.get(fn)
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    self._bind(t, node.value, known, owner)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                if self.c.is_tensor(node.value, tensors=known, owner=owner):
                    known.add(node.target.id)
            elif isinstance(node, (ast.For, ast.comprehension)) and self.c.is_tensor(
                node.iter, tensors=known, owner=owner
            ):
                known.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
        return len(known) != before

    def _bind(self, target: ast.AST, value: ast.AST, known: set[str], owner: _ClassInfo | None) -> None:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
            for t, v in zip(target.elts, value.elts, strict=False):
                self._bind(t, v, known, owner)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if self.c.is_tensor(value, tensors=known, owner=owner) and not _is_shape_expr(value):
                known.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(target, ast.Name) and self.c.is_tensor(value, tensors=known, owner=owner):
            known.add(target.id)

    def _propagate_calls(self, fn: FuncNode) -> bool:
        known = self.tensors[fn]
        owner = self.c.owner.get(fn)
        changed = False
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            callee = self._callee(node, owner)
            if callee is None or callee not in self.tensors:
                continue
            params = [a.arg for a in _positional(callee)]
            fed = {params[i] for i, arg in enumerate(node.args)
                   if i < len(params) and self.c.is_tensor(arg, tensors=known, owner=owner)}
            fed |= {kw.arg for kw in node.keywords
                    if kw.arg and self.c.is_tensor(kw.value, tensors=known, owner=owner)}
            if fed - self.tensors[callee]:
                self.tensors[callee] |= fed
                changed = True
        return changed

    def _callee(self, node: ast.Call, owner: _ClassInfo | None) -> FuncNode | None:
        f = node.func
        if isinstance(f, ast.Name) and f.id in self.c.mod.functions:
            return self.c.mod.functions[f.id]
        if owner is not None and _is_self_attr(f) and f.attr in owner.methods:
            return owner.methods[f.attr]
        return None


def _all_args(fn: FuncNode) -> list[ast.arg]:
    a = fn.args
    return [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else [])]


def _positional(fn: FuncNode) -> list[ast.arg]:
    args = [*fn.args.posonlyargs, *fn.args.args]
    return [a for a in args if a.arg not in ("self", "cls", "ctx")]


def _defaults_by_name(fn: FuncNode) -> dict[str, ast.expr]:
    a = fn.args
    pos = [*a.posonlyargs, *a.args]
    out = {arg.arg: d for arg, d in zip(pos[len(pos) - len(a.defaults):], a.defaults, strict=False)}
    out.update({arg.arg: d for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=False) if d is not None})
    return out


def _annotated_tensor(a: ast.arg, checker: _Checker) -> bool:
    ann = a.annotation
    if ann is None:
        return False
    text = ast.unparse(ann)
    return "Tensor" in text or checker.resolve(ann) in _TENSOR_CLASSES


def _is_shape_expr(value: ast.AST) -> bool:
    if isinstance(value, ast.Attribute):
        return value.attr == "shape"
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        return value.func.attr in ("size", "stride")
    return False


# --------------------------------------------------------------------------------------------------
# CUDA / C++ source text


_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_CODE_MARKERS = ("__global__", "__device__", "#include", "extern \"C\"", "torch::", "at::", "PYBIND11",
                 "asm(")

# Allowed torch/ATen C++ calls: allocation, options, guards, the current stream, shape helpers.
_CPP_ALLOWED_LEAVES = frozenset(
    {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
     "from_blob", "getCurrentCUDAStream", "getDefaultCUDAStream", "getCurrentDeviceProperties",
     "getDeviceProperties", "current_device", "device", "dtype", "ceil_div", "elementSize", "toString",
     "kCUDA", "kFloat", "kFloat32", "stream"}
)
_CPP_TENSOR_METHODS = (
    "matmul|mm|bmm|addmm|baddbmm|addbmm|sum|mean|prod|softmax|log_softmax|relu|gelu|silu|sigmoid|tanh|exp|"
    "log|add|add_|mul|mul_|sub|sub_|div|div_|pow|sqrt|rsqrt|clamp|clamp_min|clamp_max|max|min|amax|amin|norm|"
    "var|std|cumsum|sort|topk|argmax|argmin|abs|neg|copy_|clone|index_select|gather|scatter|masked_fill|"
    "where|layer_norm|conv1d|conv2d|conv3d|linear|einsum|dot|mv|outer|logsumexp|maximum|minimum|lerp|addcmul|"
    "addcdiv|round|floor|ceil|fmod|remainder|eq|ne|lt|gt|le|ge"
)
_CPP_PATTERNS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("cuda_library_call",
     re.compile(r"\b(cublas\w*|cudnn\w*|cufft\w*|cusparse\w*|cusolver\w*|cutlass\w*|getCurrentCUDABlasHandle|"
                r"CUDABlas|at::cuda::blas)\b", re.IGNORECASE),
     "uses the vendor library `{0}`"),
    ("stream_created",
     re.compile(r"\b(cudaStreamCreate\w*|cuStreamCreate\w*|getStreamFromPool|getStreamFromExternal)\b"),
     "creates a stream with `{0}`"),
    ("cuda_graph",
     re.compile(r"\b(cudaGraph\w*|cuGraph\w*|cudaStreamBeginCapture\w*|cuStreamBeginCapture\w*)\b"),
     "uses CUDA graphs (`{0}`)"),
    ("thread_created", re.compile(r"\b(std::thread|std::jthread|std::async|pthread_create)\b"),
     "creates a thread with `{0}`"),
    ("process_control", re.compile(r"\b(system|popen|fork|vfork|execv\w*|execl\w*|dlopen|dlsym)\s*\("),
     "calls `{0}`"),
    ("file_io", re.compile(r"\b(fopen|freopen|std::ifstream|std::ofstream|std::fstream|ifstream|ofstream)\b"),
     "file access with `{0}`"),
    ("reduced_precision_cuda",
     re.compile(r"(\b__half2?\b|\b__nv_bfloat16\w*|\b__float2half\w*|\b__half2float\b|\b__float2bfloat16\w*|"
                r"\b__float_to_tf32\b|wmma::precision::tf32|cuda_fp16\.h|cuda_bf16\.h|"
                r"\.(?:f16|f16x2|bf16|bf16x2|tf32)\b)"),
     "computes in reduced precision (`{0}`)"),
)
_CPP_TORCH_CALL = re.compile(r"\b(?:torch|at|c10)((?:::\w+)+)\s*(?:<[^<>()]*>)?\s*\(")
_CPP_USES_TORCH = re.compile(r"\b(?:torch|at)::|torch/extension\.h")
_CPP_METHOD_CALL = re.compile(r"\.\s*(" + _CPP_TENSOR_METHODS + r")\s*\(")


def _looks_like_code(text: str) -> bool:
    return any(m in text for m in _CODE_MARKERS) or ("{" in text and ";" in text)


def _strip_comments(text: str) -> str:
    """C/C++ comments removed, newlines kept so offsets still map to lines."""
    return _C_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def scan_cuda_text(text: str) -> list[tuple[str, str, int]]:
    """(code, message, character offset) findings in one C++/CUDA source string."""
    code_text = _strip_comments(text)
    found: list[tuple[str, str, int]] = []
    for code, pattern, template in _CPP_PATTERNS:
        for m in pattern.finditer(code_text):
            found.append((code, template.format(m.group(1)), m.start()))
    for m in _CPP_TORCH_CALL.finditer(code_text):
        path = m.group(1).strip(":").split("::")
        leaf = path[-1]
        if leaf in _CPP_ALLOWED_LEAVES or leaf[:1].isupper() or leaf.startswith("k") and leaf[1:2].isupper():
            continue
        if "cuda" in path[:-1] and leaf.startswith(("get", "current", "set")):
            continue
        found.append(("torch_compute_op", f"C++ calls `{m.group(0).split('(')[0].strip()}`", m.start()))
    if _CPP_USES_TORCH.search(code_text):  # method names are only evidence in host code using the torch API
        for m in _CPP_METHOD_CALL.finditer(code_text):
            found.append(("torch_compute_op", f"C++ calls tensor method `.{m.group(1)}()`", m.start()))
    return found


# --------------------------------------------------------------------------------------------------
# Entry point


def check_source(source: str, policy: Policy | None = None) -> tuple[Flag, ...]:
    """Every static finding for a solution file, in source order. Never raises."""
    policy = policy or Policy()
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return (make_flag("syntax_error", f"{e.msg} (line {e.lineno})", line=e.lineno),)
    except (ValueError, RecursionError, MemoryError) as e:
        return (make_flag("syntax_error", f"cannot parse: {type(e).__name__}: {e}"),)
    try:
        flags = _Checker(tree, policy).run()
    except Exception as e:  # noqa: BLE001
        # fail closed: a crafted file must not buy a free pass by crashing the checker
        return (make_flag("static_check_failed", f"{type(e).__name__}: {e}"),)
    return _dedupe(flags)


def _dedupe(flags: list[Flag]) -> tuple[Flag, ...]:
    seen: set[tuple[str, int | None, str]] = set()
    out: list[Flag] = []
    for f in sorted(flags, key=lambda f: (f.line or 0, f.code)):
        key = (f.code, f.line, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return tuple(out)
