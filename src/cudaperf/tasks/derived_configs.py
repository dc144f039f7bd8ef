"""Correctness-only configurations derived from a PyTorch task that declares fewer than three.

A plain KernelBench file is one configuration, so a kernel that bakes in that one shape (sizes as
compile-time constants, a grid sized for exactly those elements, work skipped because the module's
parameters still hold their initial values) would pass. For such a task the loader adds configurations
that re-run the task's own source with its module-level integer constants given other values: smaller ones,
and odd ones (no multiple of 4 or 32, so vector-width and warp-size assumptions fail), with the module's
parameters randomised in at least one of them (`InputConfig.randomize_parameters`). A constant the `Model`
class reads itself (a hidden state sized by the module's `batch_size`) keeps its value: a candidate can
only learn sizes through its constructor arguments and inputs. They are checked for correctness only
(`InputConfig.timed` is False): timing stays on the shapes the task declares.

How a value changes: the literal of the assignment in the source is replaced (`dim = 393216` becomes
`dim = 235929`) and the module is run again, so module-level values computed from it (`bias_shape =
(out_channels, 1, 1)`) follow. A candidate set of values is kept only if the reference runs on it on the
`meta` device (shapes only, no memory); sizes tied by the model (heads dividing a width, a kernel no larger
than its input) are first all changed, then only the constants the inputs use, then one at a time, until
two variants hold. A task whose reference cannot run on `meta` gets no derived configuration and says why.

A task opts out with `CUDAPERF_TASK = {"no_derived_configs": "<reason>"}`.

Not covered: C→CUDA tasks (they declare their configurations), running anything on a real device (the
worker drops a derived configuration whose reference fails there, with a note), choosing which parameters
to randomise (`cudaperf.correctness.randomize_constant_parameters`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import operator
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cudaperf.types import InputConfig, from_dict, to_dict

Size = int | tuple[int, ...]

MIN_CONFIGS = 3
DERIVED_PREFIX = "derived"
# A constant below this is left alone: channel counts of 3, kernel sizes, small head counts. Changing them
# changes the problem rather than its size, and the reference often rejects the result.
_MIN_SIZE = 8
# Two shrink factors: each derived configuration is a smaller problem than the declared one (cheap to
# check), and the two differ from each other, so no single specialised size passes both.
_FACTORS = (0.6, 0.35)
_VERSION = 2  # bump when the derivation changes: cached derivations of another version are not reused
_INT_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
            ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod}


@dataclass(frozen=True)
class Derivation:
    """What the loader derived for a task: the new configurations, and why there are none if so."""

    configs: tuple[InputConfig, ...] = ()
    note: str = ""


def is_derived(config: InputConfig) -> bool:
    """Whether the loader derived `config` (a declared configuration is always timed)."""
    return not config.timed and config.name.startswith(f"{DERIVED_PREFIX}_")


def int_constants(source: str) -> dict[str, Size]:
    """Module-level assignments of a size (an int, or a tuple of ints, written as literals or arithmetic on
    literals: `N = 2048 * 2`, `input_shape = (8192 * 2,)`) whose name is read elsewhere in the module."""
    tree = ast.parse(source)
    found: dict[str, Size] = {}
    for node in tree.body:
        targets, value = _assignment(node)
        size = _size_value(value)
        if size is not None:
            found.update({t.id: size for t in targets if isinstance(t, ast.Name)})
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return {name: v for name, v in found.items() if name in read}


def substitute(source: str, values: dict[str, Size]) -> str:
    """`source` with the value of each named module-level size assignment replaced by a literal (the rest of
    the text kept as it is)."""
    tree = ast.parse(source)
    offsets = _line_offsets(source)
    edits: list[tuple[int, int, str]] = []  # (start byte, end byte, text)
    for node in tree.body:
        targets, value = _assignment(node)
        names = sorted({t.id for t in targets if isinstance(t, ast.Name)} & values.keys())
        if names and _size_value(value) is not None:
            start = offsets[value.lineno - 1] + value.col_offset
            end = offsets[value.end_lineno - 1] + value.end_col_offset
            edits.append((start, end, _literal(values[names[0]])))
    raw = source.encode("utf-8")
    for start, end, text in sorted(edits, reverse=True):
        raw = raw[:start] + text.encode("utf-8") + raw[end:]
    return raw.decode("utf-8")


def derive(source: str, declared: tuple[InputConfig, ...],
           runs: Callable[[InputConfig], str]) -> Derivation:
    """Derived configurations for a task with fewer than `MIN_CONFIGS` declared ones.

    The sizes that change are the module-level size constants and the integer parameters of the first
    declared configuration. `runs(config)` returns "" when the reference runs on that configuration (the
    loader checks on `meta`), else the reason."""
    if len(declared) >= MIN_CONFIGS:
        return Derivation()
    base = declared[0]
    # A constant the model reads itself (not through its constructor or inputs) is left alone: an honest
    # candidate, a copy of the task file, holds its own copy of it and would be wrong on every variant.
    read_by_model = _globals_read_in_class(source, "Model")
    sizes = {("module", k): v for k, v in int_constants(source).items()
             if _largest(v) >= _MIN_SIZE and k not in read_by_model}
    sizes |= {("param", k): v for k, v in base.params.items()
              if type(v) is int and abs(v) >= _MIN_SIZE}
    if not sizes:
        return Derivation(note="no module-level size constant or integer parameter to vary: "
                               "no derived configuration")
    used_by_inputs = _names_read_in(source, ("get_inputs",)) | set(base.params)
    want = MIN_CONFIGS - len(declared)
    kept: list[InputConfig] = []
    reasons: list[str] = []
    for variant in _candidate_values(sizes, used_by_inputs):
        if len(kept) == want:
            break
        config = InputConfig(
            name=f"{DERIVED_PREFIX}_{len(kept) + 1}",
            params={**base.params, **{k: v for (where, k), v in variant.items() if where == "param"}},
            module_values={k: v for (where, k), v in variant.items() if where == "module"},
            timed=False, randomize_parameters=not kept)
        if any((k.params, k.module_values) == (config.params, config.module_values) for k in kept):
            continue
        problem = runs(config)
        if problem:
            reasons.append(problem)
        else:
            kept.append(config)
    if len(kept) < want:
        why = reasons[-1] if reasons else "no variant"
        note = f"{len(kept)} of {want} derived configurations could be built (last failure: {why})"
        return Derivation(configs=tuple(kept), note=note[:400])
    return Derivation(configs=tuple(kept))


def cached_derive(source: str, declared: tuple[InputConfig, ...],
                  runs: Callable[[InputConfig], str]) -> Derivation:
    """`derive`, remembered on disk per task source (the meta-device checks of a recurrent model take
    seconds; a benchmark loads the same files again and again). The cache lives under
    `$CUDAPERF_CACHE_DIR/derived_configs/` (default `~/.cache/cudaperf`); a file that cannot be read or
    written is simply recomputed."""
    key = hashlib.sha256(json.dumps([_VERSION, source, [to_dict(c) for c in declared]]).encode()).hexdigest()
    path = _cache_dir() / f"{key[:32]}.json"
    try:
        data = json.loads(path.read_text())
        configs = tuple(from_dict(InputConfig, c) for c in data["configs"])
        return Derivation(configs=configs, note=data["note"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    derivation = derive(source, declared, runs)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"configs": [to_dict(c) for c in derivation.configs],
                                   "note": derivation.note}))
        tmp.replace(path)  # atomic: concurrent loaders never read half a file
    except OSError:
        pass
    return derivation


def _cache_dir() -> Path:
    return Path(os.environ.get("CUDAPERF_CACHE_DIR", Path.home() / ".cache" / "cudaperf")) / "derived_configs"


def _candidate_values(sizes: dict[tuple[str, str], Size], used_by_inputs: set[str]):
    """Size sets to try, most thorough first: every size changed, then only the inputs' sizes, then one
    size at a time; each at both shrink factors."""
    groups = [dict(sizes), {k: v for k, v in sizes.items() if k[1] in used_by_inputs}]
    groups += [{k: v} for k, v in sizes.items()]
    for factor in _FACTORS:
        for group in groups:
            if group:
                yield {k: _shrunk(v, factor) for k, v in group.items()}


def _shrunk(size: Size, factor: float) -> Size:
    if isinstance(size, tuple):
        return tuple(_odd_smaller(v, factor) if abs(v) >= _MIN_SIZE else v for v in size)
    return _odd_smaller(size, factor)


def _largest(size: Size) -> int:
    return max(abs(v) for v in size) if isinstance(size, tuple) else abs(size)


def _odd_smaller(value: int, factor: float) -> int:
    """An odd value about `factor` times `value` (odd: no multiple of 2, 4 or 32), at least 3, sign kept."""
    size = max(3, int(abs(value) * factor))
    size -= 1 - size % 2  # the odd number at or below
    size = max(3, size)
    return size if value > 0 else -size


def _assignment(node: ast.stmt) -> tuple[list[ast.expr], ast.expr | None]:
    if isinstance(node, ast.Assign):
        return list(node.targets), node.value
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [node.target], node.value
    return [], None


def _globals_read_in_class(source: str, name: str) -> set[str]:
    """Names the methods of module-level class `name` read without binding them (module globals)."""
    tree = ast.parse(source)
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            for fn in (n for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                args = fn.args
                bound = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
                names = [n for n in ast.walk(fn) if isinstance(n, ast.Name)]
                bound |= {n.id for n in names if isinstance(n.ctx, ast.Store)}
                found |= {n.id for n in names if isinstance(n.ctx, ast.Load) and n.id not in bound}
    return found


def _names_read_in(source: str, functions: tuple[str, ...]) -> set[str]:
    tree = ast.parse(source)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in functions:
            names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return names


def _size_value(node: ast.expr | None) -> Size | None:
    """The value of a size expression: int literals and + - * // ** % on them, or a tuple of such."""
    if isinstance(node, ast.Tuple):
        items = [_int_value(e) for e in node.elts]
        return tuple(items) if items and all(i is not None for i in items) else None
    return _int_value(node)


def _int_value(node: ast.expr | None) -> int | None:
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_value(node.operand)
        return -inner if inner is not None else None
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
        left, right = _int_value(node.left), _int_value(node.right)
        if left is None or right is None or (isinstance(node.op, ast.Pow) and not 0 <= right <= 64):
            return None
        try:
            return _INT_OPS[type(node.op)](left, right)
        except ZeroDivisionError:
            return None
    return None


def _literal(size: Size) -> str:
    if isinstance(size, tuple):
        return "(" + ", ".join(map(str, size)) + ("," if len(size) == 1 else "") + ")"
    return str(size)


def _line_offsets(source: str) -> list[int]:
    """Byte offset of the start of each line (`ast` columns are UTF-8 byte offsets)."""
    offsets, total = [], 0
    for line in source.encode("utf-8").splitlines(keepends=True):
        offsets.append(total)
        total += len(line)
    return offsets + [total]
