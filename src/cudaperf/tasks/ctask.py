"""C→CUDA task format: a serial C function to parallelise, its declared signature, input generators,
configurations and tolerance; the candidate contract; and a CPU-only compile check for candidates.

A `CTask` holds:
  * `source`: a self-contained serial C function `entry` (C11, `<math.h>` allowed);
  * `params`: its signature in order — scalars (sizes and constants) and arrays with a `kind`
    (`in` / `out` / `inout`) and a `length` expression over the scalar parameters (e.g. `"n*m"`);
  * `inputs`: how each `in`/`inout` array is drawn (`ArrayGen`: distribution and bounds);
  * `configs`: ≥ 3 `CConfig`s (scalar values; optional per-config generator or tolerance overrides),
    conventionally `small`, `large` and `odd` (sizes that are not multiples of any block size);
  * `tolerance`: allclose bounds on the outputs (integer outputs exact, or within `int_atol` units).
It round-trips through JSON (`to_json` / `from_json`); files are named `<task_id>.ctask.json`.

The candidate contract (C→CUDA "fast" format, the same one PyTorch→CUDA fast solutions use):
  a Python module whose CUDA lives in string constants holding `extern "C" __global__` kernels, built by
  NVRTC through `cudaperf.cuda`, and a function named like the C entry point taking the C parameters
  by name — arrays as contiguous 1-D CUDA `torch.Tensor`s of the C element type, scalars as Python
  numbers. It writes its results into the `out`/`inout` tensors and returns nothing. Temporary device
  buffers may be allocated with `torch.empty`; compute must be in the candidate's own kernels.
  Why this and not an nvcc-built `extern "C" void entry(...)` host library: NVRTC builds it in ~50 ms
  instead of seconds (the RL loop builds thousands), the build needs no host compiler on the GPU node,
  multi-pass algorithms (scans, sorting networks, two-pass reductions) keep a real host loop, and the
  evaluator, anti-cheat and structural analysis already handle this format for PyTorch tasks.

Loading: `load_task_file(path)` gives the shared `Task` record (`Task.spec` holds the CTask document and
the naive CUDA port read from `naive_port_path(path)`, see `to_task`); `from_task` reads the CTask
back.

Not covered here: running the C reference (`cref.py`), running candidates on the GPU (the worker),
comparing outputs (`cudaperf.correctness`), the task generators and the naive ports they make
(`cudaperf.datasets`, which imports this module; this module never imports it).
"""

from __future__ import annotations

import ast
import enum
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cudaperf.types import InputConfig, Task, TaskKind, Tolerance, from_dict, to_dict

CTASK_SUFFIX = ".ctask.json"
FORMAT_VERSION = 1

# C element type -> numpy dtype name. Only fixed-width-on-Linux types, so ctypes and CUDA agree.
C_TYPES: dict[str, str] = {
    "float": "float32",
    "double": "float64",
    "int": "int32",
    "unsigned int": "uint32",
    "long long": "int64",
    "unsigned char": "uint8",
}


class ParamKind(str, enum.Enum):
    SCALAR = "scalar"  # passed by value
    IN = "in"  # read-only array (`const T*`)
    OUT = "out"  # written array; its prior content is unspecified (the harness may fill a sentinel)
    INOUT = "inout"  # read and written array


@dataclass(frozen=True)
class CParam:
    """One parameter of the C entry point. `length` (arrays only) is an integer expression over scalars."""

    name: str
    ctype: str  # a key of C_TYPES
    kind: ParamKind
    length: str | None = None

    @property
    def is_array(self) -> bool:
        return self.kind is not ParamKind.SCALAR

    def c_decl(self) -> str:
        if not self.is_array:
            return f"{self.ctype} {self.name}"
        const = "const " if self.kind is ParamKind.IN else ""
        return f"{const}{self.ctype}* {self.name}"


@dataclass(frozen=True)
class ArrayGen:
    """How one input array is drawn. Distributions (see `_draw`):

    uniform(low, high) · normal(mean=low, std=high) · randint(low, high) (high exclusive) ·
    permutation (of 0..length-1) · csr_row_ptr (needs scalars `rows`, `nnz`) ·
    csr_col_idx (needs array `row_ptr` drawn before it and scalar `cols`).
    """

    distribution: str
    low: float = 0.0
    high: float = 1.0


@dataclass(frozen=True)
class CConfig:
    """One input configuration: scalar values, and optional overrides of generators and tolerance."""

    name: str
    scalars: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, ArrayGen] = field(default_factory=dict)
    tolerance: Tolerance | None = None


@dataclass(frozen=True)
class CTask:
    """A serial C function to parallelise (see the module docstring)."""

    task_id: str
    family: str
    entry: str
    source: str
    params: tuple[CParam, ...]
    inputs: dict[str, ArrayGen]
    configs: tuple[CConfig, ...]
    tolerance: Tolerance
    description: str = ""
    tags: tuple[str, ...] = ()
    version: int = FORMAT_VERSION

    def param(self, name: str) -> CParam:
        return next(p for p in self.params if p.name == name)

    @property
    def arrays(self) -> tuple[CParam, ...]:
        return tuple(p for p in self.params if p.is_array)

    @property
    def outputs(self) -> tuple[CParam, ...]:
        return tuple(p for p in self.params if p.kind in (ParamKind.OUT, ParamKind.INOUT))

    def config(self, name: str) -> CConfig:
        return next(c for c in self.configs if c.name == name)

    @property
    def timed_names(self) -> tuple[str, ...]:
        """The configurations a C evaluation times: every one (the C worker's timing stage and the
        referee's check of what it reports both read this)."""
        return tuple(c.name for c in self.configs)

    def tolerance_for(self, config: CConfig) -> Tolerance:
        return config.tolerance or self.tolerance

    def signature(self) -> str:
        return f"void {self.entry}({', '.join(p.c_decl() for p in self.params)})"


class CTaskError(ValueError):
    """A malformed task (a fault of the task author, reported by `validate`)."""


def to_json(task: CTask) -> str:
    return json.dumps(to_dict(task), indent=1, sort_keys=True)


def from_json(text: str) -> CTask:
    return from_dict(CTask, json.loads(text))


def validate(task: CTask) -> tuple[str, ...]:
    """Problems with the task's declaration (empty when it is well formed)."""
    problems: list[str] = []
    scalars = {p.name for p in task.params if not p.is_array}
    for p in task.params:
        if p.ctype not in C_TYPES:
            problems.append(f"{p.name}: unsupported C type {p.ctype!r}")
        if p.is_array and not p.length:
            problems.append(f"{p.name}: array without a length expression")
        if p.is_array and p.length:
            missing = _names(p.length) - scalars
            if missing:
                problems.append(f"{p.name}: length {p.length!r} uses non-scalar names {sorted(missing)}")
        if p.kind in (ParamKind.IN, ParamKind.INOUT) and p.name not in task.inputs:
            problems.append(f"{p.name}: input array without a generator")
    if not task.outputs:
        problems.append("no out/inout parameter")
    if len(task.configs) < 3:
        problems.append(f"{len(task.configs)} configurations (need >= 3)")
    for c in task.configs:
        missing = scalars - set(c.scalars)
        if missing:
            problems.append(f"config {c.name}: scalars {sorted(missing)} not set")
    if f"{task.entry}(" not in task.source:
        problems.append(f"source does not define {task.entry}")
    return tuple(problems)


# ------------------------------------------------------------------------------------------------
# Lengths and inputs


_ALLOWED_NODES = (ast.Expression, ast.BinOp, ast.Name, ast.Load, ast.Constant, ast.Add, ast.Sub,
                  ast.Mult, ast.FloorDiv, ast.Div, ast.Mod, ast.UnaryOp, ast.USub)


def _names(expr: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)}


def eval_length(expr: str, scalars: dict[str, Any]) -> int:
    """Value of a length expression like `"n*m"` or `"(n+1)"`; `/` is C integer division.

    Hand-written (a dozen lines) rather than `eval` so a task file cannot run code.
    """
    tree = ast.parse(expr, mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise CTaskError(f"length {expr!r}: {type(node).__name__} not allowed")

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return int(node.value)
        if isinstance(node, ast.Name):
            return int(scalars[node.id])
        if isinstance(node, ast.UnaryOp):
            return -ev(node.operand)
        a, b = ev(node.left), ev(node.right)  # type: ignore[attr-defined]
        op = type(node.op)  # type: ignore[attr-defined]
        return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b, ast.Mod: a % b if b else 0}.get(
            op, a // b if b else 0)

    return ev(tree)


def array_lengths(task: CTask, config: CConfig) -> dict[str, int]:
    return {p.name: eval_length(p.length or "0", config.scalars) for p in task.arrays}


def config_seed(task_id: str, config: str, seed: int) -> list[int]:
    """A numpy seed sequence entropy that depends on the task, the configuration and the public seed."""
    digest = hashlib.sha256(f"{task_id}\0{config}".encode()).digest()
    return [int(seed) & 0xFFFFFFFF, int.from_bytes(digest[:8], "little")]


def make_inputs(task: CTask, config: CConfig, seed: int) -> dict[str, Any]:
    """Scalars and freshly drawn arrays (numpy, C-contiguous) for one configuration and seed.

    `out` arrays are allocated zero-filled here; a GPU harness should fill them with a sentinel instead.
    """
    rng = np.random.default_rng(config_seed(task.task_id, config.name, seed))
    lengths = array_lengths(task, config)
    values: dict[str, Any] = {}
    for p in task.params:
        if not p.is_array:
            values[p.name] = _scalar(p, config.scalars[p.name])
        elif p.kind is ParamKind.OUT:
            values[p.name] = np.zeros(lengths[p.name], dtype=C_TYPES[p.ctype])
        else:
            gen = config.inputs.get(p.name) or task.inputs[p.name]
            values[p.name] = _draw(gen, p, lengths[p.name], rng, config.scalars, values)
    return values


def _scalar(p: CParam, value: Any) -> Any:
    return float(value) if p.ctype in ("float", "double") else int(value)


def _draw(gen: ArrayGen, p: CParam, n: int, rng: np.random.Generator, scalars: dict[str, Any],
          drawn: dict[str, Any]) -> np.ndarray:
    dtype = np.dtype(C_TYPES[p.ctype])
    d = gen.distribution
    if d == "uniform":
        x = rng.uniform(gen.low, gen.high, n)
    elif d == "normal":
        x = rng.normal(gen.low, gen.high, n)
    elif d == "randint":
        x = rng.integers(int(gen.low), int(gen.high), n)
    elif d == "permutation":
        x = rng.permutation(n)
    elif d == "csr_row_ptr":
        x = _csr_row_ptr(rng, int(scalars["rows"]), int(scalars["nnz"]))
    elif d == "csr_col_idx":
        x = _csr_col_idx(rng, drawn["row_ptr"], int(scalars["cols"]))
    else:
        raise CTaskError(f"{p.name}: unknown distribution {d!r}")
    return np.ascontiguousarray(x, dtype=dtype)


def _csr_row_ptr(rng: np.random.Generator, rows: int, nnz: int) -> np.ndarray:
    """Row offsets with uneven rows (nnz split by a random multinomial), first 0, last nnz."""
    counts = rng.multinomial(nnz, rng.dirichlet(np.full(rows, 0.7)))
    return np.concatenate([[0], np.cumsum(counts)])


def _csr_col_idx(rng: np.random.Generator, row_ptr: np.ndarray, cols: int) -> np.ndarray:
    """Column indices, sorted within each row (duplicates allowed: they are summed by any SpMV)."""
    idx = rng.integers(0, cols, int(row_ptr[-1]))
    for r in range(len(row_ptr) - 1):
        idx[row_ptr[r]:row_ptr[r + 1]].sort()
    return idx


# ------------------------------------------------------------------------------------------------
# Bridge to the shared records


BASELINE_SOURCES_KEY = "baseline_sources"  # in `Task.spec`: baseline name -> fast-format module text
NAIVE_CUDA = "naive_cuda"  # the naive one-thread-per-iteration port (the C→CUDA GPU baseline)


def to_task(task: CTask, path: str | None = None, naive_cuda: str | None = None) -> Task:
    """The shared `Task` record: `source` is the C function (what a prompt shows); `spec` is the CTask
    document (`to_dict(task)`, read back with `from_task`) plus, when known, the text of the naive CUDA
    port under `spec["baseline_sources"]["naive_cuda"]` (the worker times it as a baseline)."""
    spec = to_dict(task)
    if naive_cuda:
        spec[BASELINE_SOURCES_KEY] = {NAIVE_CUDA: naive_cuda}
    return Task(
        task_id=task.task_id,
        kind=TaskKind.C,
        source=task.source,
        configs=tuple(InputConfig(c.name, dict(c.scalars)) for c in task.configs),
        path=path,
        family=task.family,
        tolerances={"default": task.tolerance},
        description=task.description,
        spec=spec,
    )


def from_task(task: Task) -> CTask:
    """The CTask inside a C `Task` record; CTaskError when `spec` does not hold one."""
    if task.kind is not TaskKind.C or not task.spec.get("entry"):
        raise CTaskError(f"task {task.task_id}: no C task declaration in Task.spec")
    try:
        return from_dict(CTask, task.spec)
    except (TypeError, ValueError, KeyError) as exc:
        raise CTaskError(f"task {task.task_id}: malformed C task declaration: {exc}") from None


def baseline_source(task: Task, name: str = NAIVE_CUDA) -> str | None:
    return (task.spec.get(BASELINE_SOURCES_KEY) or {}).get(name)


def load_task_file(path: str | Path) -> Task:
    """A `<task_id>.ctask.json` file as a `Task`, with its naive CUDA port when the file
    `naive_port_path(path)` exists. Raises CTaskError (or OSError) for an unusable file."""
    p = Path(path)
    try:
        task = from_json(p.read_text(encoding="utf-8"))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CTaskError(f"not a C task document: {exc}") from None
    problems = validate(task)
    if problems:
        raise CTaskError("; ".join(problems))
    port = naive_port_path(p)
    return to_task(task, str(p), port.read_text(encoding="utf-8") if port.is_file() else None)


def naive_port_path(task_path: str | Path) -> Path:
    """Where the naive CUDA port of a task file lives: `naive/<task_id>.py` in the task file's directory
    (hand-written tasks ship it; `cudaperf dataset build` writes one for every C task). A subdirectory,
    so that loading a directory of task files (`tasks.load_tasks`) does not take the ports for tasks."""
    p = Path(task_path)
    return p.parent / "naive" / (p.name.removesuffix(CTASK_SUFFIX) + ".py")


def prompt_text(task: CTask) -> str:
    """The task as a model sees it: the C function, the signature contract and the configurations."""
    lines = [
        ("Parallelise this serial C function with CUDA for an NVIDIA H200 (sm_90). "
         f"{task.description}").strip(),
        "", "```c", task.source.strip(), "```", "",
        "Parameters:",
    ]
    for p in task.params:
        what = f"array of {p.length} {p.ctype} ({p.kind.value})" if p.is_array else f"scalar {p.ctype}"
        lines.append(f"- `{p.name}`: {what}")
    sizes = "; ".join(f"{c.name}: " + ", ".join(f"{k}={v}" for k, v in c.scalars.items())
                      for c in task.configs)
    lines += ["", f"Input configurations: {sizes}.", "", CANDIDATE_CONTRACT.format(entry=task.entry)]
    return "\n".join(lines)


CANDIDATE_CONTRACT = """\
Answer with one Python module. Put your CUDA in a string constant of `extern "C" __global__` kernels,
build it with `from cudaperf import cuda; mod = cuda.load(SOURCE)` and define `def {entry}(...)` taking
the same parameter names: arrays arrive as contiguous 1-D CUDA torch tensors of the C element type,
scalars as Python numbers. Launch your kernels with `mod.<kernel>(grid, block, *args, smem_bytes=...)`
and write the results into the output arrays; return nothing. Do not call torch compute ops."""


# ------------------------------------------------------------------------------------------------
# Candidates: extract their CUDA and compile it on the CPU


class CheckStatus(str, enum.Enum):
    OK = "ok"
    NO_CUDA = "no_cuda"  # no CUDA source with a __global__ kernel could be found
    COMPILE_ERROR = "compile_error"
    UNAVAILABLE = "unavailable"  # cuda-core / NVRTC not importable here


@dataclass(frozen=True)
class CompileCheck:
    """Result of building every CUDA unit of a candidate to a cubin (no GPU needed)."""

    status: CheckStatus
    units: int = 0
    cubin_bytes: int = 0
    duration_s: float = 0.0
    log: str = ""

    @property
    def ok(self) -> bool:
        return self.status is CheckStatus.OK


def cuda_units(candidate: str) -> tuple[str, ...]:
    """CUDA sources in a candidate: module-level string constants holding `__global__`, or the whole
    text when it is not Python (a bare .cu). Static only: nothing of the candidate is executed."""
    try:
        tree = ast.parse(candidate)
    except SyntaxError:
        return (candidate,) if "__global__" in candidate else ()
    units = []
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and "__global__" in value.value:
            units.append(value.value)
    return tuple(units)


def compile_check(candidate: str, *, arch: str = "sm_90", fast_math: bool = False) -> CompileCheck:
    """Build each CUDA unit of `candidate` with NVRTC (cuda-core) to a cubin for `arch`."""
    units = cuda_units(candidate)
    if not units:
        return CompileCheck(CheckStatus.NO_CUDA, log="no string constant with a __global__ kernel")
    try:
        from cuda.core import Program, ProgramOptions
    except ImportError as exc:
        return CompileCheck(CheckStatus.UNAVAILABLE, units=len(units), log=str(exc))
    start, size = time.perf_counter(), 0
    for unit in units:
        try:
            program = Program(unit, "c++", options=ProgramOptions(arch=arch, use_fast_math=fast_math))
            size += len(program.compile("cubin").code)
        # NVRTCError (log inside) has no public base class; a failure is a value
        except Exception as exc:  # noqa: BLE001
            return CompileCheck(CheckStatus.COMPILE_ERROR, len(units), size,
                                time.perf_counter() - start, str(exc)[-4000:])
    return CompileCheck(CheckStatus.OK, len(units), size, time.perf_counter() - start)
