"""Static analysis of one CUDA translation unit: every kernel's accesses, barriers, atomics and work.

Covers: parsing (tree-sitter-cuda; the C preprocessor first when macros hide kernels), the kernels of
the unit with their template parameters and `__launch_bounds__`, host launch sites `k<<<grid, block,
smem>>>` (block and grid as values, template arguments), and per kernel the results of `memory`,
`sync` and `intensity`, and for each atomic the share of a block's threads that reach it (`predication`).
A kernel whose analysis fails is reported with a diagnostic; the others stand.

Not covered: compiler facts (`compiler.py`), solution formats (`sources.py`), turning the findings into
`KernelFeatures` and feedback (`analyze.py`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tree_sitter import Node

from cudaperf.analysis import cst
from cudaperf.analysis.intensity import WorkEstimate, estimate, guard_bounds
from cudaperf.analysis.lanes import LaneEnv
from cudaperf.analysis.memory import Access, SharedArray, collect_accesses, shared_arrays
from cudaperf.analysis.predication import thread_shares
from cudaperf.analysis.scope import FileScope, KernelScope, call_name, collect_file_scope
from cudaperf.analysis.symbolic import Poly, Value
from cudaperf.analysis.sync import Barrier, analyze_barriers


@dataclass(frozen=True)
class StaticKernel:
    name: str
    line: int
    template_params: tuple[str, ...] = ()
    launch_bounds: tuple[int, ...] = ()  # (max threads per block, min blocks per SM) when numeric
    accesses: tuple[Access, ...] = ()
    shared_arrays: tuple[SharedArray, ...] = ()
    local_arrays: tuple[tuple[str, int], ...] = ()  # (name, line) of per-thread arrays
    barriers: tuple[Barrier, ...] = ()
    atomics: int = 0
    work: WorkEstimate | None = None
    uses_dims: frozenset[str] = frozenset()
    guards: dict[str, Poly] = field(default_factory=dict)  # dimension -> N of a guard `i < N`
    thread_dependent_conditions: tuple[int, ...] = ()  # lines of branch/loop conditions that vary by thread
    diagnostics: tuple[str, ...] = ()
    scope: KernelScope | None = field(default=None, compare=False, repr=False)  # for launch-time bounds


@dataclass(frozen=True)
class LaunchSite:
    kernel: str
    line: int
    template_args: tuple[str, ...]
    grid: tuple[Value, Value, Value]
    block: tuple[Value, Value, Value]
    smem_bytes: Value | None


@dataclass(frozen=True)
class StaticUnit:
    kernels: tuple[StaticKernel, ...]
    launches: tuple[LaunchSite, ...] = ()
    error_lines: tuple[int, ...] = ()
    diagnostics: tuple[str, ...] = ()
    line_map: tuple[int, ...] | None = None  # set when preprocessed: analysed line -> original line


def analyze_cuda(text: str, *, template_args: dict[str, tuple[str, ...]] | None = None,
                 preprocess: bool | None = None, sizes: dict[str, float] | None = None,
                 blocks: dict[str, tuple[int, int, int]] | None = None) -> StaticUnit:
    """Analyse every kernel of a CUDA source. `template_args`: kernel -> one instantiation's arguments;
    `sizes` and `blocks` (kernel -> block shape) make the concrete warp of `lanes.py` exact."""
    diagnostics: list[str] = []
    tree = cst.parse(text)
    kernels = cst.kernel_nodes(tree.root_node)
    line_map = None
    if not kernels and "__global__" in text:
        repaired = _close_truncated(text)
        if repaired is not None:
            tree, text = repaired
            kernels = cst.kernel_nodes(tree.root_node)
            diagnostics.append("source ends inside a kernel: closed its open braces to analyse what is there")
    if preprocess or (preprocess is None and cst.needs_preprocessing(text, len(kernels))):
        pre = cst.preprocess(text)
        if pre is None:
            diagnostics.append("macros may hide kernels but no C preprocessor is available")
        else:
            tree, line_map = cst.parse(pre.text), pre.line_map
            kernels = cst.kernel_nodes(tree.root_node)
            diagnostics.append(f"macros expanded with {pre.tool} before parsing")
    root = tree.root_node
    errors = tuple(cst.error_lines(root)) if root.has_error else ()
    if errors:
        diagnostics.append(f"parse errors at lines {', '.join(map(str, errors[:8]))}: analysis is partial")
    file_scope = collect_file_scope(root)
    launches = tuple(_launch_sites(root, file_scope))
    bindings = dict(template_args or {})
    for site in launches:
        bindings.setdefault(site.kernel, site.template_args)
    out = []
    for node in kernels:
        env = LaneEnv(dict(sizes or {}), (blocks or {}).get(cst.function_name(node)))
        out.append(_analyze_kernel_safely(node, file_scope, bindings, env))
    if not kernels:
        diagnostics.append("no __global__ kernel found")
    return StaticUnit(tuple(out), launches, errors, tuple(diagnostics), line_map)


def _close_truncated(text: str):
    """A source cut off mid-kernel (a truncated model answer): append what closes it, if that parses."""
    depth = max(1, text.count("{") - text.count("}"))
    for tail in ("}" * depth, ";" + "}" * depth, " 0;" + "}" * depth, ")" + "}" * depth):
        tree = cst.parse(text + "\n" + tail)
        if cst.kernel_nodes(tree.root_node):
            return tree, text + "\n" + tail
    return None


def _analyze_kernel_safely(node: Node, file_scope: FileScope, bindings: dict[str, tuple[str, ...]],
                           env: LaneEnv) -> StaticKernel:
    name = cst.function_name(node)
    try:
        return analyze_kernel(node, file_scope, bindings.get(name, ()), env)
    except Exception as exc:  # noqa: BLE001 - bad input must not sink the other kernels (issue: bad input)
        return StaticKernel(name, cst.line(node),
                            diagnostics=(f"static analysis failed: {type(exc).__name__}: {exc}",))


def analyze_kernel(node: Node, file_scope: FileScope, template_args: tuple[str, ...] = (),
                   env: LaneEnv | None = None) -> StaticKernel:
    probe = KernelScope(node, file_scope)
    bindings = _template_bindings(probe, template_args)
    scope = KernelScope(node, file_scope, bindings) if bindings else probe
    accesses = _with_thread_shares(scope, collect_accesses(scope, env), env or LaneEnv({}))
    effects = [a.node for a in accesses]
    barriers = analyze_barriers(scope, effects)
    body_text = cst.text(scope.body)
    uses_dims = frozenset(d for d in "xyz" if f"threadIdx.{d}" in body_text or f"blockIdx.{d}" in body_text)
    diagnostics: list[str] = []
    work = None
    try:
        work = estimate(scope, accesses, set(uses_dims), env)
        diagnostics.extend(work.diagnostics)
    except Exception as exc:  # noqa: BLE001 - the work estimate is optional; say why it is missing
        diagnostics.append(f"work estimate failed: {type(exc).__name__}: {exc}")
    unbound = [p for p in scope.template_params if p not in bindings]
    if unbound:
        diagnostics.append(f"template parameters {', '.join(unbound)} not instantiated: kept symbolic")
    return StaticKernel(
        name=cst.function_name(node),
        line=cst.line(node),
        template_params=tuple(scope.template_params),
        launch_bounds=_launch_bounds(scope, node),
        accesses=tuple(accesses),
        shared_arrays=tuple(shared_arrays(scope)),
        local_arrays=tuple((v.name, v.line) for v in scope.locals.values() if v.is_array and not v.shared),
        barriers=tuple(barriers),
        atomics=sum(1 for a in accesses if a.kind == "atomic"),
        work=work,
        uses_dims=uses_dims,
        guards=guard_bounds(scope, accesses),
        thread_dependent_conditions=_thread_dependent_conditions(scope),
        diagnostics=tuple(diagnostics),
        scope=scope,
    )


def _with_thread_shares(scope: KernelScope, accesses: list[Access], env: LaneEnv) -> list[Access]:
    """Atomics with the share of a block's threads their enclosing `if`s let through (`predication`)."""
    atomics = [i for i, a in enumerate(accesses) if a.kind == "atomic"]
    shares = dict(zip(atomics, thread_shares(scope, [accesses[i].node for i in atomics], env)))
    return [dataclasses.replace(a, thread_share=shares[i]) if i in shares else a
            for i, a in enumerate(accesses)]


_BRANCHES = ("if_statement", "for_statement", "while_statement", "do_statement", "conditional_expression",
             "switch_statement")


def _thread_dependent_conditions(scope: KernelScope) -> tuple[int, ...]:
    """Lines of the conditions where threads of a block may take different paths (taint of `scope`)."""
    lines = set()
    for node in cst.walk(scope.body) if scope.body is not None else ():
        if node.type in _BRANCHES:
            cond = node.child_by_field_name("condition")
            if cond is not None and scope.is_thread_dependent(cond):
                lines.add(cst.line(cond))
    return tuple(sorted(lines))


def _template_bindings(scope: KernelScope, args: tuple[str, ...]) -> dict[str, Poly]:
    out = {}
    for name, arg in zip(scope.template_params, args):
        v = expression_value(scope, arg)
        if isinstance(v, Poly) and v.is_const:
            out[name] = v
    return out


def expression_value(scope: KernelScope, text: str) -> Value:
    """The value of an expression given as text, in a kernel's scope (template arguments, sizes)."""
    tree = cst.parse(f"int __cudaperf_expr = ({text});")
    decl = tree.root_node.named_children[0] if tree.root_node.named_children else None
    init = next((c for c in (decl.children if decl is not None else []) if c.type == "init_declarator"), None)
    value = init.child_by_field_name("value") if init is not None else None
    return scope.value(value)


def _launch_bounds(scope: KernelScope, node: Node) -> tuple[int, ...]:
    lb = next((c for c in node.children if c.type == "launch_bounds"), None)
    if lb is None:
        return ()
    out = []
    for arg in lb.named_children:
        v = scope.value(arg)
        if isinstance(v, Poly) and v.is_const:
            out.append(int(v.value))
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# Host launch sites


def _launch_sites(root: Node, file_scope: FileScope):
    scopes: dict[int, KernelScope] = {}
    for node in cst.walk(root):
        if node.type != "call_expression":
            continue
        config = next((c for c in node.children if c.type == "kernel_call_syntax"), None)
        if config is None:
            continue
        fn = node.child_by_field_name("function")
        targs: tuple[str, ...] = ()
        if fn is not None and fn.type == "template_function":
            arglist = fn.child_by_field_name("arguments")
            targs = tuple(cst.text(a) for a in (arglist.named_children if arglist else []))
            fn = fn.child_by_field_name("name")
        host = _enclosing_function(node)
        if host is None:
            continue
        scope = scopes.setdefault(host.id, KernelScope(host, file_scope))
        args = [a for a in config.named_children if a.type != "comment"]
        grid = _dim3(scope, args[0]) if args else _ones()
        block = _dim3(scope, args[1]) if len(args) > 1 else _ones()
        smem = scope.value(args[2]) if len(args) > 2 else None
        yield LaunchSite(cst.text(fn).split("::")[-1], cst.line(node), targs, grid, block, smem)


def _ones() -> tuple[Value, Value, Value]:
    return Poly.const(1), Poly.const(1), Poly.const(1)


def _enclosing_function(node: Node) -> Node | None:
    parent = node.parent
    while parent is not None and parent.type != "function_definition":
        parent = parent.parent
    return parent


def _dim3(scope: KernelScope, node: Node) -> tuple[Value, Value, Value]:
    args = _dim3_args(scope, node)
    if args is None:
        return scope.value(node), Poly.const(1), Poly.const(1)
    values = [scope.value(a) for a in args[:3]]
    while len(values) < 3:
        values.append(Poly.const(1))
    return values[0], values[1], values[2]


def _dim3_args(scope: KernelScope, node: Node) -> list[Node] | None:
    if node.type == "call_expression" and call_name(node) == "dim3":
        args = node.child_by_field_name("arguments")
        return [a for a in (args.named_children if args else [])]
    if node.type in ("argument_list", "initializer_list"):
        return list(node.named_children)
    if node.type == "identifier":
        var = scope.lookup(cst.text(node), node)
        defs = scope.defs.get(var.key, []) if var is not None else []
        if len(defs) == 1 and defs[0].rhs is not None and var is not None and var.type.name == "dim3":
            return _dim3_args(scope, defs[0].rhs)
    return None
