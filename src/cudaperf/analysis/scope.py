"""What one kernel's names mean: parameters, locals, shared arrays, their definitions, thread dependence,
and the symbolic value of integer expressions.

Covers:
- symbol tables for a kernel (parameters with element sizes, locals with types and array dimensions,
  `__shared__` arrays, file-scope constants and object-like macros, template parameters);
- every definition of every local (declarations, `=`, compound assignments, `++`/`--`);
- thread-dependence taint: a local is thread-dependent when a definition reads `threadIdx`, a lane id, a
  shuffle or atomic result, a thread-dependent local, or when it is assigned under a thread-dependent
  condition (control dependence); iterated over all assignments to a fixpoint;
- `value(node)`: an integer expression as a `Poly` over symbols after substituting local definitions.
  A local with several definitions keeps its `threadIdx.x` part when all definitions agree on it and the
  updates (`i += stride`) are uniform (grid-stride loops), and is otherwise `Unknown`. Inside a warp,
  `e / c` and `e % c` follow the lanes: `threadIdx.x / 32` is warp-uniform, `threadIdx.x % 32` keeps the
  lane stride. A select (`c ? a : b`, `min`, `max`) is its common value, or the only branch that varies
  along the warp (`interior`: the clamp's inside, which all but the boundary lanes take). A call to a
  `__device__` helper is the value it returns with its parameters bound to the arguments (`InlineScope`,
  up to `MAX_INLINE_DEPTH` nested calls): index helpers such as `clamp(i, 0, n - 1)` or `at(r, c)`.

Not covered: pointers (memory.py resolves them), aliasing, helpers that reassign their parameters (the
argument's value is kept), recursion, C++ overloads and classes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction

from tree_sitter import Node

from cudaperf.analysis import cst
from cudaperf.analysis.symbolic import Poly, Unknown, Value

TX = "threadIdx.x"
BUILTIN_VECTORS = ("threadIdx", "blockIdx", "blockDim", "gridDim")

# type name -> (bytes, lanes). `T`/`scalar_t`-style template types are assumed 4-byte floats (see type_info).
_TYPES: dict[str, tuple[int, int]] = {
    "float": (4, 1), "double": (8, 1), "int": (4, 1), "unsigned": (4, 1), "unsigned int": (4, 1),
    "uint32_t": (4, 1), "int32_t": (4, 1), "long": (8, 1), "long long": (8, 1), "unsigned long": (8, 1),
    "unsigned long long": (8, 1), "int64_t": (8, 1), "uint64_t": (8, 1), "size_t": (8, 1),
    "short": (2, 1), "unsigned short": (2, 1), "int16_t": (2, 1), "uint16_t": (2, 1), "char": (1, 1),
    "signed char": (1, 1), "unsigned char": (1, 1), "int8_t": (1, 1), "uint8_t": (1, 1), "bool": (1, 1),
    "half": (2, 1), "__half": (2, 1), "__nv_bfloat16": (2, 1), "nv_bfloat16": (2, 1), "bfloat16": (2, 1),
    "__nv_fp8_e4m3": (1, 1), "__nv_fp8_e5m2": (1, 1),
    "half2": (4, 2), "__half2": (4, 2), "__nv_bfloat162": (4, 2), "nv_bfloat162": (4, 2),
    "float2": (8, 2), "float3": (12, 3), "float4": (16, 4), "double2": (16, 2), "double4": (32, 4),
    "int2": (8, 2), "int3": (12, 3), "int4": (16, 4), "uint2": (8, 2), "uint4": (16, 4),
    "char2": (2, 2), "char4": (4, 4), "uchar4": (4, 4), "short2": (4, 2), "short4": (8, 4),
    "longlong2": (16, 2), "ulonglong2": (16, 2), "long2": (16, 2),
}
FLOAT_TYPES = {"float", "double", "half", "__half", "__nv_bfloat16", "nv_bfloat16", "bfloat16", "half2",
               "__half2", "__nv_bfloat162", "float2", "float3", "float4", "double2", "double4"}
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|struct|signed(?= )|__shared__|"
                         r"__device__|__constant__|extern|static|register|constexpr|__align__\(\d+\))\b")
_CALL_SEEDS = re.compile(r"^(__shfl\w*|atomic\w+|clock|clock64|__activemask|__ballot_sync|__match\w+|"
                         r"curand\w*|__lane_id|lane_id|laneid|get_lane_id|__reduce\w+_sync)$")
_THREAD_METHODS = re.compile(r"\b(thread_rank|thread_index|meta_group_rank)\b")


@dataclass(frozen=True)
class TypeInfo:
    name: str  # normalised type name, no qualifiers
    bytes: int
    lanes: int
    assumed: bool  # size assumed (template or unknown type)

    @property
    def is_float(self) -> bool:
        return self.name in FLOAT_TYPES or self.assumed


def type_info(type_text: str, template_types: frozenset[str] = frozenset()) -> TypeInfo:
    name = " ".join(_QUALIFIERS.sub(" ", type_text).replace("*", " ").split())
    name = name.split("::")[-1]
    if name in _TYPES:
        b, lanes = _TYPES[name]
        return TypeInfo(name, b, lanes, False)
    return TypeInfo(name, 4, 1, True)  # template parameter (T, scalar_t) or unknown struct: assume float


@dataclass(frozen=True)
class Var:
    """A parameter or a local."""

    name: str
    type: TypeInfo
    pointer_depth: int = 0
    dims: tuple[Node, ...] = ()  # array dimensions, outermost first (size nodes; None-like for `[]`)
    unsized: bool = False  # `extern __shared__ T s[]`
    shared: bool = False
    is_param: bool = False
    line: int = 0
    reference: bool = False
    key: str = ""  # unique within a kernel: name@byte offset of the declaration (params: name@param)

    @property
    def is_array(self) -> bool:
        return bool(self.dims) or self.unsized


@dataclass(frozen=True)
class Definition:
    """One write of a local: op is '=', '+=', ..., '++' or '--'; rhs is None for ++/-- and `T x;`."""

    key: str  # the written variable (Var.key)
    op: str
    rhs: Node | None
    node: Node


@dataclass
class FileScope:
    """File-level names shared by all kernels of a source."""

    macros: dict[str, str] = field(default_factory=dict)  # object-like #define name -> replacement text
    constants: dict[str, Node] = field(default_factory=dict)  # const/constexpr globals -> value node
    device_arrays: dict[str, Var] = field(default_factory=dict)  # __device__ globals (global memory)
    constant_arrays: dict[str, Var] = field(default_factory=dict)  # __constant__ globals
    shared_globals: dict[str, Var] = field(default_factory=dict)
    device_functions: dict[str, Node] = field(default_factory=dict)
    thread_dependent_functions: set[str] = field(default_factory=set)
    _barrier_functions: set[str] | None = None  # filled by sync.barrier_functions


def declarator_parts(decl: Node) -> tuple[str, int, list[Node | None], bool, Node | None]:
    """(name, pointer depth, array size nodes outermost first, reference, init value) of a declarator."""
    depth, sizes, reference, value = 0, [], False, None
    node = decl
    while node is not None:
        if node.type == "init_declarator":
            value = node.child_by_field_name("value")
            node = node.child_by_field_name("declarator")
        elif node.type == "pointer_declarator":
            depth += 1
            node = node.child_by_field_name("declarator")
        elif node.type == "reference_declarator":
            reference = True
            node = node.named_children[0] if node.named_children else None
        elif node.type == "array_declarator":
            sizes.append(node.child_by_field_name("size"))
            node = node.child_by_field_name("declarator")
        elif node.type in ("parenthesized_declarator",):
            node = node.named_children[0] if node.named_children else None
        elif node.type in ("identifier", "field_identifier"):
            return cst.text(node), depth, list(reversed(sizes)), reference, value
        else:
            node = node.child_by_field_name("declarator")
    return "", depth, list(reversed(sizes)), reference, value


def _has_token(node: Node, token: str) -> bool:
    return any(cst.text(c) == token or (c.type in ("type_qualifier", "storage_class_specifier")
                                        and cst.text(c) == token) for c in node.children)


def declared_vars(decl: Node, template_types: frozenset[str], is_param: bool = False) -> list[Var]:
    """The variables a `declaration` or `parameter_declaration` introduces."""
    type_node = decl.child_by_field_name("type")
    type_text = cst.text(type_node)
    shared = _has_token(decl, "__shared__")
    extern = _has_token(decl, "extern")
    tinfo = type_info(type_text, template_types)
    out = []
    declarators = [c for i, c in enumerate(decl.children) if decl.field_name_for_child(i) == "declarator"]
    for d in declarators:
        name, depth, sizes, ref, _ = declarator_parts(d)
        if not name:
            continue
        unsized = bool(sizes) and sizes[0] is None
        dims = tuple(s for s in sizes if s is not None)
        key = f"{name}@param" if is_param else f"{name}@{decl.start_byte}"
        out.append(Var(name, tinfo, depth, dims, unsized or (extern and shared and not dims), shared,
                       is_param, cst.line(decl), ref, key))
    return out


def collect_file_scope(root: Node) -> FileScope:
    scope = FileScope()
    for node in cst.walk(root):
        if node.type == "preproc_def":
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
            if name is not None and value is not None:
                scope.macros[cst.text(name)] = _strip_comments(cst.text(value)).strip()
        elif node.type == "function_definition" and _is_device_fn(node):
            scope.device_functions[cst.function_name(node)] = node
    for node in _file_level_declarations(root):
        text = cst.text(node)
        for var in declared_vars(node, frozenset()):
            if "__constant__" in text:
                scope.constant_arrays[var.name] = var
            elif "__shared__" in text:
                scope.shared_globals[var.name] = var
            elif "__device__" in text:
                scope.device_arrays[var.name] = var
        if re.search(r"\b(const|constexpr)\b", text):
            for d in node.children:
                if d.type == "init_declarator":
                    name, _, _, _, value = declarator_parts(d)
                    if value is not None:
                        scope.constants[name] = value
    scope.thread_dependent_functions = {
        name for name, fn in scope.device_functions.items()
        if re.search(r"\bthreadIdx\b|%laneid|%tid|thread_rank", cst.text(fn))
    }
    return scope


def _is_device_fn(node: Node) -> bool:
    return any(cst.text(c) == "__device__" for c in node.children) and not any(
        cst.text(c) == "__global__" for c in node.children)


def _file_level_declarations(root: Node):
    stack = list(root.children)
    while stack:
        n = stack.pop()
        if n.type == "declaration":
            yield n
        elif n.type in ("namespace_definition", "linkage_specification", "declaration_list",
                        "template_declaration"):
            stack.extend(n.named_children)


# --------------------------------------------------------------------------------------------------


class KernelScope:
    """Names, definitions, taint and values for one kernel (or device function) body.

    Locals are keyed by declaration (`Var.key`), found by C++ block scoping: the `i` of one `for` loop is
    not the `i` of the next."""

    def __init__(self, fn: Node, file: FileScope, template_bindings: dict[str, Poly] | None = None):
        self.fn = fn
        self.body = fn.child_by_field_name("body")
        self.file = file
        self.template_params = _template_params(fn)
        self.template_bindings = template_bindings or {}
        tt = frozenset(self.template_params)
        self.params: dict[str, Var] = {}
        for p in cst.function_params(fn):
            for v in declared_vars(p, tt, is_param=True):
                self.params[v.name] = v
        self.locals: dict[str, Var] = {}  # key -> Var
        self._block_decls: dict[int, list[tuple[int, str, str]]] = {}  # scope node id -> (start, name, key)
        self.defs: dict[str, list[Definition]] = {}  # key -> writes
        self.loops: dict[str, Node] = {}  # loop variable key -> its for_statement
        self._resolved: dict[tuple[str, int], str | None] = {}
        self._collect(tt)
        names = [v.name for v in self.locals.values()]
        self._ambiguous = {n for n in names if names.count(n) > 1}
        self._cond_cache: dict[int, tuple[Node, ...]] = {}
        self.tainted: set[str] = self._taint_fixpoint()
        self._memo: dict[str, Value] = {}
        self._busy: set[str] = set()
        self._fresh = 0
        self._inline_depth = 0

    # collection ---------------------------------------------------------------------------------------
    def _collect(self, template_types: frozenset[str]) -> None:
        if self.body is None:
            return
        for node in cst.walk(self.body):
            if node.type == "declaration":
                holder = _scope_holder(node)
                for v in declared_vars(node, template_types):
                    self.locals[v.key] = v
                    self._block_decls.setdefault(holder.id, []).append((node.start_byte, v.name, v.key))
        for node in cst.walk(self.body):
            if node.type == "declaration":
                for d in node.children:
                    if d.type == "init_declarator":
                        name, _, _, _, value = declarator_parts(d)
                        if name:
                            self._add_def(Definition(f"{name}@{node.start_byte}", "=", value, node))
                if node.parent is not None and node.parent.type == "for_statement":
                    name = _init_var(node)
                    if name:
                        self.loops.setdefault(f"{name}@{node.start_byte}", node.parent)
            elif node.type == "assignment_expression":
                left = node.child_by_field_name("left")
                if left is not None and left.type == "identifier":
                    key = self.resolve(cst.text(left), left)
                    if key is not None:
                        op = cst.text(node.child_by_field_name("operator"))
                        self._add_def(Definition(key, op, node.child_by_field_name("right"), node))
                        if node.parent is not None and node.parent.type == "for_statement" and \
                                node.parent.child_by_field_name("initializer") == node:
                            self.loops.setdefault(key, node.parent)
            elif node.type == "update_expression":
                arg = node.child_by_field_name("argument")
                if arg is not None and arg.type == "identifier":
                    key = self.resolve(cst.text(arg), arg)
                    if key is not None:
                        op = "++" if "++" in cst.text(node) else "--"
                        self._add_def(Definition(key, op, None, node))

    def _add_def(self, d: Definition) -> None:
        self.defs.setdefault(d.key, []).append(d)

    def resolve(self, name: str, node: Node) -> str | None:
        """The key of the local or parameter `name` refers to at `node` (None: not a local/param)."""
        cache_key = (name, node.id)
        if cache_key in self._resolved:
            return self._resolved[cache_key]
        found = None
        child, parent = node, node.parent
        while parent is not None and found is None:
            for start, decl_name, key in self._block_decls.get(parent.id, ()):
                if decl_name == name and start <= child.start_byte:
                    found = key  # a later shadowing declaration in the same block would be an error
            if parent.id == self.fn.id:
                break
            child, parent = parent, parent.parent
        if found is None and name in self.params:
            found = self.params[name].key
        self._resolved[cache_key] = found
        return found

    def lookup(self, name: str, node: Node) -> Var | None:
        key = self.resolve(name, node)
        if key is None:
            return None
        return self.locals.get(key) or self.params.get(name)

    def symbol(self, key: str) -> str:
        """The display name of a local in expressions: its name, or name@line when the name is reused."""
        var = self.locals.get(key)
        if var is None:
            return key.split("@")[0]
        return var.name if var.name not in self._ambiguous else f"{var.name}@L{var.line}"

    def loop_key(self, loop: Node) -> str | None:
        return next((k for k, n in self.loops.items() if n.id == loop.id), None)

    # control dependence --------------------------------------------------------------------------------
    def conditions(self, node: Node) -> tuple[Node, ...]:
        """Conditions that decide whether `node` executes, innermost first (up to the function body)."""
        key = node.id
        if key in self._cond_cache:
            return self._cond_cache[key]
        out: list[Node] = []
        child, parent = node, node.parent
        while parent is not None and parent.id != self.fn.id:
            cond = _guarding_condition(parent, child)
            if cond is not None:
                out.append(cond)
            child, parent = parent, parent.parent
        self._cond_cache[key] = tuple(out)
        return self._cond_cache[key]

    # taint ---------------------------------------------------------------------------------------------
    def _taint_fixpoint(self) -> set[str]:
        deps: list[tuple[str, set[str], bool]] = []
        for key, defs in self.defs.items():
            var = self.locals.get(key)
            if var is not None and var.shared:
                continue  # shared memory is read back by index, not by thread: see memory accesses
            for d in defs:
                nodes = [d.rhs] if d.rhs is not None else []
                if d.op not in ("=",):
                    nodes.append(d.node)
                nodes.extend(self.conditions(d.node))
                ids, seed = set(), False
                for n in nodes:
                    i, s = self._reads(n)
                    ids |= i
                    seed = seed or s
                deps.append((key, ids, seed))
        tainted = {name for name, _, seed in deps if seed}
        changed = True
        while changed:  # monotone over a finite set of names: terminates
            changed = False
            for name, ids, _ in deps:
                if name not in tainted and ids & tainted:
                    tainted.add(name)
                    changed = True
        return tainted

    def _reads(self, node: Node) -> tuple[set[str], bool]:
        """(keys of the locals read, reads a thread-dependent source directly)."""
        ids, seed = set(), False
        for n in cst.walk(node):
            t = n.type
            if t == "identifier":
                name = cst.text(n)
                if name == "threadIdx":
                    seed = True
                key = self.resolve(name, n)
                if key is not None:
                    ids.add(key)
            elif t == "call_expression":
                fname = _call_name(n)
                if _CALL_SEEDS.match(fname) or fname in self.file.thread_dependent_functions:
                    seed = True
                if _THREAD_METHODS.search(cst.text(n.child_by_field_name("function"))):
                    seed = True
            elif t == "gnu_asm_expression" and re.search(r"%laneid|%tid|%warpid", cst.text(n)):
                seed = True
        return ids, seed

    def is_thread_dependent(self, node: Node) -> bool:
        ids, seed = self._reads(node)
        return seed or bool(ids & self.tainted)

    # values --------------------------------------------------------------------------------------------
    def fresh(self, hint: str) -> Poly:
        self._fresh += 1
        return Poly.sym(f"{hint}#{self._fresh}")

    def value(self, node: Node | None) -> Value:
        """The integer value of an expression as seen by the lanes of one warp."""
        if node is None:
            return Unknown(False, "missing")
        try:
            return self._value(node)
        except RecursionError:
            return Unknown(True, "too deep")

    def _opaque(self, node: Node, reason: str) -> Value:
        if self.is_thread_dependent(node):
            return Unknown(True, reason)
        return self.fresh("u")

    def _value(self, node: Node) -> Value:
        t = node.type
        if t == "number_literal":
            return _number(cst.text(node))
        if t in ("parenthesized_expression", "condition_clause"):
            inner = node.named_children
            return self._value(inner[-1]) if inner else Unknown(False, "empty")
        if t == "identifier":
            return self._identifier(cst.text(node), node)
        if t == "field_expression":
            return self._field(node)
        if t == "binary_expression":
            return self._binary(node)
        if t == "unary_expression":
            op = cst.text(node.child_by_field_name("operator"))
            arg = self._value(node.child_by_field_name("argument"))
            if op == "-" and isinstance(arg, Poly):
                return -arg
            if op == "+":
                return arg
            return self._opaque(node, f"unary {op}")
        if t == "cast_expression":
            return self._value(node.child_by_field_name("value"))
        if t == "call_expression":
            return self._call(node)
        if t == "sizeof_expression":
            inner = node.child_by_field_name("type") or (
                node.named_children[0] if node.named_children else None)
            return Poly.const(type_info(cst.text(inner)).bytes)
        if t in ("true", "false"):
            return Poly.const(1 if t == "true" else 0)
        if t == "conditional_expression":
            branches = [node.child_by_field_name("consequence"), node.child_by_field_name("alternative")]
            return interior([self._value(b) for b in branches]) or self._opaque(node, t)
        return self._opaque(node, t)

    def _field(self, node: Node) -> Value:
        arg, fld = node.child_by_field_name("argument"), node.child_by_field_name("field")
        base = cst.text(arg)
        if base in BUILTIN_VECTORS:
            return Poly.sym(f"{base}.{cst.text(fld)}")
        return self._opaque(node, "field")

    def _call(self, node: Node) -> Value:
        name = _call_name(node)
        args = node.child_by_field_name("arguments")
        argv = [a for a in (args.named_children if args else []) if a.type != "comment"]
        if name in ("static_cast", "int", "unsigned", "size_t", "int64_t", "long") and len(argv) == 1:
            return self._value(argv[0])
        if name in ("__mul24", "__umul24") and len(argv) == 2:
            a, b = self._value(argv[0]), self._value(argv[1])
            return a * b if isinstance(a, Poly) and isinstance(b, Poly) else self._opaque(node, name)
        if name in _MIN_MAX and len(argv) == 2:
            return interior([self._value(a) for a in argv]) or self._opaque(node, f"call {name}")
        if name in self.file.device_functions and self._inline_depth < MAX_INLINE_DEPTH:
            inlined = self._inline(self.file.device_functions[name], argv)
            if inlined is not None:
                return inlined
        return self._opaque(node, f"call {name}")

    def _inline(self, fn: Node, argv: list[Node]) -> Value | None:
        """The value a `__device__` helper returns, its parameters bound to the arguments' values (an index
        helper such as `clamp(i, 0, n - 1)` or `idx(r, c)`); None when it cannot be read."""
        params = [v for p in cst.function_params(fn) for v in declared_vars(p, frozenset(), is_param=True)]
        if len(params) != len(argv) or any(p.pointer_depth or p.is_array for p in params):
            return None
        values = [self._value(a) for a in argv]
        if any(isinstance(v, Unknown) for v in values):
            return Unknown(any(isinstance(v, Unknown) and v.varying for v in values), "helper argument")
        callee = InlineScope(fn, self.file, dict(zip((p.name for p in params), values)), self)
        returned = [r.named_children[0] for r in cst.walk(callee.body) if r.type == "return_statement"
                    and r.named_children] if callee.body is not None else []
        if not returned:
            return None
        return interior([callee.value(r) for r in returned])

    def _binary(self, node: Node) -> Value:
        op = cst.text(node.child_by_field_name("operator"))
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if op in ("+", "-", "*"):
            a, b = self._value(left), self._value(right)
            if isinstance(a, Poly) and isinstance(b, Poly):
                return a + b if op == "+" else (a - b if op == "-" else a * b)
            return _join_unknown(a, b, op)
        if op in ("/", "%", ">>", "<<", "&"):
            a, b = self._value(left), self._value(right)
            if not (isinstance(a, Poly) and isinstance(b, Poly)):
                return _join_unknown(a, b, op)
            return self._integer_op(op, a, b, node)
        return self._opaque(node, f"operator {op}")

    def _integer_op(self, op: str, a: Poly, b: Poly, node: Node) -> Value:
        if op == "<<":
            return (a * Poly.const(2 ** int(b.value)) if b.is_const and 0 <= b.value < 63
                    else self._opaque(node, op))
        if op == ">>":
            if not (b.is_const and 0 <= b.value < 63):
                return self._opaque(node, op)
            op, b = "/", Poly.const(2 ** int(b.value))
        if op == "&":
            if b.is_const and _is_low_mask(b.value):
                op, b = "%", Poly.const(b.value + 1)
            elif a.is_const and _is_low_mask(a.value):
                op, a, b = "%", b, Poly.const(a.value + 1)
            else:
                return self._opaque(node, "bitwise and")
        if a.is_const and b.is_const and b.value != 0:
            q = int(a.value / b.value) if op == "/" else int(a.value % b.value)  # C truncation
            return Poly.const(q if op == "/" else a.value - b.value * int(a.value / b.value))
        return self._warp_div_mod(op, a, b, node)

    def _warp_div_mod(self, op: str, a: Poly, b: Poly, node: Node) -> Value:
        """`e / c` and `e % c` seen across the 32 lanes of a warp (lanes differ only in threadIdx.x)."""
        slope = a.derivative(TX)
        if not a.depends_on(TX):
            if op == "/":
                exact = a.divide(b)
                return exact if exact is not None else self.fresh("q")
            return self.fresh("r")
        if not (slope.is_const and b.is_const and b.value > 0):
            # symbolic divisor: assume it is at least a warp's span (row = idx / n, col = idx % n)
            if op == "/":
                return self.fresh("q")
            return (slope * Poly.sym(TX) + self.fresh("r") if not slope.depends_on(TX)
                    else Unknown(True, "mod"))
        s, c = slope.value, b.value
        if op == "%":
            return Poly.const(s) * Poly.sym(TX) + self.fresh("r")
        if c % (32 * abs(s)) == 0:
            return self.fresh("w")  # warp-uniform: threadIdx.x / 32 and its multiples
        return Poly.const(s / c) * Poly.sym(TX) + self.fresh("q")

    def _identifier(self, name: str, node: Node) -> Value:
        if name in self.template_bindings:
            return self.template_bindings[name]
        key = self.resolve(name, node)
        if key is not None and key in self.locals:
            return self._local(key)
        if name in self.params:
            if self.params[name].key in self.defs:  # a parameter reassigned in the body
                return self._local(self.params[name].key)
            return Poly.sym(name)
        if name in self.template_params:
            return Poly.sym(name)
        if name in self.file.constants:
            return self._named_value(name, lambda: self._value(self.file.constants[name]))
        if name in self.file.macros:
            return self._named_value(name, lambda: self.macro_value(name))
        if name == "warpSize":
            return Poly.const(32)
        return Poly.sym(name)

    def _named_value(self, name: str, compute) -> Value:
        key = "::" + name
        if key not in self._memo:
            if key in self._busy:
                return Poly.sym(name)
            self._busy.add(key)
            self._memo[key] = compute()
            self._busy.discard(key)
        return self._memo[key]

    def macro_value(self, name: str) -> Value:
        replacement = self.file.macros.get(name, "")
        tree = cst.parse(f"int __cudaperf_macro = ({replacement});")
        decl = tree.root_node.named_children[0] if tree.root_node.named_children else None
        init = next((c for c in (decl.children if decl else []) if c.type == "init_declarator"), None)
        value = init.child_by_field_name("value") if init is not None else None
        if value is None or tree.root_node.has_error:
            return Poly.sym(name)
        v = self._value(value)
        return v if isinstance(v, Poly) else Poly.sym(name)

    def _local(self, key: str) -> Value:
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:
            return Unknown(key in self.tainted, "recursive definition")
        self._busy.add(key)
        result = self._local_uncached(key)
        self._busy.discard(key)
        self._memo[key] = result
        return result

    def _local_uncached(self, key: str) -> Value:
        defs = self.defs.get(key, [])
        plain = [d for d in defs if d.op == "=" and d.rhs is not None]
        if len(defs) == 1 and len(plain) == 1:
            return self._value(plain[0].rhs)
        if not defs:
            return Poly.sym(self.symbol(key)) if key not in self.tainted else Unknown(True, "undefined")
        return self._multi_def(key, defs, plain)

    def _multi_def(self, key: str, defs: list[Definition], plain: list[Definition]) -> Value:
        """A local written several times: keep its per-lane slope when every write agrees on it."""
        name = self.symbol(key)
        slopes = set()
        for d in plain:
            v = self._value(d.rhs)
            if isinstance(v, Unknown):
                return Unknown(v.varying or key in self.tainted, f"{name}: {v.reason}")
            slopes.add(v.derivative(TX))
        for d in defs:
            if d.op in ("++", "--"):
                continue
            if d.rhs is None and d.op == "=":
                continue
            if d.op in ("+=", "-="):
                v = self._value(d.rhs)
                if isinstance(v, Unknown) or v.depends_on(TX):
                    return Unknown(key in self.tainted, f"{name} updated per lane")
                continue
            if d.op == "=":
                continue
            # *=, /=, <<=, >>= ...: a uniform slope of zero survives, anything else is lost
            v = self._value(d.rhs)
            if (isinstance(v, Unknown) or v.depends_on(TX)
                    or any(not s.is_const or s.value != 0 for s in slopes)):
                return Unknown(key in self.tainted, f"{name} scaled")
        if len(slopes) > 1:
            return Unknown(key in self.tainted, f"{name} has definitions with different lane strides")
        slope = slopes.pop() if slopes else Poly()
        if slope.depends_on(TX):
            return Unknown(True, f"{name} is not linear in threadIdx.x")
        base = Poly.sym(name) if key in self.loops else self.fresh(name)
        return slope * Poly.sym(TX) + base


MAX_INLINE_DEPTH = 4  # helpers calling helpers; deeper (or recursive) calls stay opaque
_MIN_MAX = {"min", "max", "umin", "umax", "llmin", "llmax", "ullmin", "ullmax"}


class InlineScope(KernelScope):
    """A `__device__` helper's body read in place of a call: its parameters bound to the caller's values.
    Fresh symbols come from the caller (one namespace), and a parameter bound to a value that varies
    across the warp taints what the helper computes from it."""

    def __init__(self, fn: Node, file: FileScope, bound: dict[str, Value], caller: KernelScope):
        self._caller = caller
        self._varying = {f"{n}@param" for n, v in bound.items() if _varies_along_warp(v)}
        self._unknown = {n: v for n, v in bound.items() if isinstance(v, Unknown)}
        super().__init__(fn, file, {n: v for n, v in bound.items() if isinstance(v, Poly)})
        self._inline_depth = caller._inline_depth + 1

    def _identifier(self, name: str, node: Node) -> Value:
        if name in self._unknown and name in self.params and self.params[name].key not in self.defs:
            return self._unknown[name]
        return super()._identifier(name, node)

    def fresh(self, hint: str) -> Poly:
        return self._caller.fresh(hint)

    def _reads(self, node: Node) -> tuple[set[str], bool]:
        ids, seed = super()._reads(node)
        return ids, seed or bool(ids & self._varying)


def _varies_along_warp(v: Value) -> bool:
    return (isinstance(v, Poly) and v.depends_on(TX)) or (isinstance(v, Unknown) and v.varying)


def interior(values: list[Value]) -> Value | None:
    """One value for a select between `values` (`c ? a : b`, `min`, `max`, a helper's returns): the common
    value when they agree; else the only one that varies along threadIdx.x when the others are uniform —
    the interior of a clamp (`min(i, n - 1)`, `i < 0 ? 0 : i`), which all but the boundary lanes take;
    None when neither holds."""
    if not values or any(not isinstance(v, Poly) for v in values):
        return None
    distinct = []
    for v in values:
        if all(v != d for d in distinct):
            distinct.append(v)
    if len(distinct) == 1:
        return distinct[0]
    varying = [v for v in distinct if v.depends_on(TX)]
    return varying[0] if len(varying) == 1 else None


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.DOTALL)


def _scope_holder(decl: Node) -> Node:
    """The node whose block a declaration belongs to: its compound statement, or the `for` it starts."""
    parent = decl.parent
    return parent if parent is not None else decl


def _is_low_mask(v: Fraction) -> bool:
    n = int(v) + 1
    return v.denominator == 1 and v >= 0 and n & (n - 1) == 0


def _join_unknown(a: Value, b: Value, op: str) -> Unknown:
    varying = any(isinstance(x, Unknown) and x.varying for x in (a, b)) or any(
        isinstance(x, Poly) and x.depends_on(TX) for x in (a, b))
    reasons = [x.reason for x in (a, b) if isinstance(x, Unknown)]
    return Unknown(varying, reasons[0] if reasons else op)


def _number(text: str) -> Value:
    t = text.lower().replace("'", "")
    try:
        if t.startswith("0x"):
            return Poly.const(int(t.rstrip("ul"), 16))
        if t.startswith("0b"):
            return Poly.const(int(t.rstrip("ul"), 0))
        stripped = t.rstrip("ulf") if not ("." in t or "e" in t) else t.rstrip("lf")
        if "." in stripped or "e" in stripped:
            return Poly.const(Fraction(float(stripped)))
        return Poly.const(int(stripped, 8) if len(stripped) > 1 and stripped.startswith("0")
                          else int(stripped))
    except ValueError:
        return Unknown(False, f"literal {text}")


def _call_name(node: Node) -> str:
    fn = node.child_by_field_name("function")
    if fn is None:
        return ""
    if fn.type == "template_function":
        fn = fn.child_by_field_name("name")
    if fn is not None and fn.type in ("qualified_identifier",):
        return cst.text(fn).split("::")[-1]
    if fn is not None and fn.type == "field_expression":
        return cst.text(fn.child_by_field_name("field"))
    return cst.text(fn)


call_name = _call_name


def _guarding_condition(parent: Node, child: Node) -> Node | None:
    t = parent.type
    if t == "if_statement":
        cond = parent.child_by_field_name("condition")
        return cond if cond is not None and cond.id != child.id else None
    if t in ("while_statement", "do_statement"):
        cond = parent.child_by_field_name("condition")
        return cond if cond is not None and cond.id != child.id else None
    if t == "for_statement":
        cond = parent.child_by_field_name("condition")
        init = parent.child_by_field_name("initializer")
        if cond is None or child.id in (cond.id, getattr(init, "id", -1)):
            return None
        return cond
    if t == "conditional_expression":
        cond = parent.child_by_field_name("condition")
        return cond if cond is not None and cond.id != child.id else None
    if t == "switch_statement":
        cond = parent.child_by_field_name("condition")
        return cond if cond is not None and cond.id != child.id else None
    if t == "binary_expression" and cst.text(parent.child_by_field_name("operator")) in ("&&", "||"):
        left = parent.child_by_field_name("left")
        return left if left is not None and left.id != child.id else None
    return None


def _init_var(init: Node | None) -> str:
    if init is None:
        return ""
    if init.type == "declaration":
        for d in init.children:
            if d.type == "init_declarator":
                return declarator_parts(d)[0]
    if init.type == "assignment_expression":
        left = init.child_by_field_name("left")
        return cst.text(left) if left is not None and left.type == "identifier" else ""
    return ""


init_var = _init_var


def _template_params(fn: Node) -> list[str]:
    parent = fn.parent
    if parent is None or parent.type != "template_declaration":
        return []
    plist = parent.child_by_field_name("parameters")
    names = []
    for p in plist.named_children if plist else []:
        ident = [c for c in cst.walk(p) if c.type in ("identifier", "type_identifier")]
        if ident:
            names.append(cst.text(ident[-1]) if p.type != "type_parameter_declaration"
                         else cst.text(ident[0]))
    return names
