"""A task rendered into the first prompt of a refinement: the system message and the task message.

Covers: reading the prompt templates shipped as package files (`agent/prompts/*.md`: one per task kind and
solution format, plus `system.md` and `refine.md`), filling them with the task's source, its input
configurations, its tolerance and the rules the evaluator enforces (the allowed imports come from the
anti-cheat `Policy`, so the prompt and the checker never disagree), and naming what the answer must
define (`ModelNew`, or the C entry point).

Not covered: feedback on an answer (`feedback.py`), the conversation over several turns (`context.py`),
tokenisation (the backend counts tokens).
"""

from __future__ import annotations

import ast
import enum
import functools
import re
import string
from dataclasses import dataclass
from importlib import resources
from typing import Any

from cudaperf.agent.backends.base import ChatMessage
from cudaperf.types import Task, TaskKind, Tolerance

FORMATS = ("fast", "inline")
TASK_OPTIONS_NAME = "CUDAPERF_TASK"  # the task file's harness options: not for the model's eyes
DEFAULT_FLOAT32 = Tolerance(atol=1e-4, rtol=1e-4)  # correctness.DEFAULT_TOLERANCES["float32"]

STRICT_COMPUTE_RULE = (
    "Do the computation in your own CUDA kernels. In `forward`, torch may only allocate "
    "(`torch.empty`, `torch.empty_like`, `torch.zeros`), view or reshape tensors and read shapes: no torch "
    "math (`torch.matmul`, `F.softmax`, `x + y`, `x.sum()`), no nn modules, no `.cpu()`/`.item()`, no "
    "`try/except` fallbacks, never the reference `Model`."
)
LENIENT_COMPUTE_RULE = (
    "Torch operations are allowed in `forward`, but only your own CUDA kernels are likely to beat the "
    "reference; never call the reference `Model`."
)


class EntryKind(str, enum.Enum):
    """What the answer must define to be a solution."""

    CLASS = "class"  # `class ModelNew` (PyTorch tasks)
    FUNCTION = "function"  # `def <entry>(...)` (C tasks)


@dataclass(frozen=True)
class TaskPrompt:
    """The first prompt of a refinement, and the name the extracted code must define."""

    task_id: str
    system: str
    user: str
    format: str  # "fast" | "inline"
    entry: str  # "ModelNew", or the C entry point's name
    entry_kind: EntryKind

    def messages(self) -> tuple[ChatMessage, ...]:
        return (ChatMessage("system", self.system), ChatMessage("user", self.user))


@functools.cache
def load_template(name: str) -> str:
    """The text of `agent/prompts/<name>.md` (package data; cached)."""
    return resources.files("cudaperf.agent").joinpath("prompts", f"{name}.md").read_text(encoding="utf-8")


def fill(template: str, **values: Any) -> str:
    """`${name}` placeholders replaced; `string.Template` because CUDA and Python braces must stay as they
    are. A placeholder without a value raises KeyError: a template and its caller out of step is a bug."""
    return string.Template(template).substitute(**{k: str(v) for k, v in values.items()}).strip() + "\n"


def render_task_prompt(task: Task, fmt: str = "fast", policy: Any = None) -> TaskPrompt:
    """The first prompt for `task` in solution format `fmt` under `policy` (None: the strict default)."""
    if fmt not in FORMATS:
        raise ValueError(f"prompt format {fmt!r}: use one of {FORMATS}")
    from cudaperf.anticheat.policy import Policy

    policy = policy or Policy()
    imports = ", ".join(f"`{m}`" for m in policy.allowed_imports if m != "__future__")
    if task.kind is TaskKind.C:
        user, entry, kind = _c_prompt(task, fmt, imports), str(task.spec.get("entry", "")), EntryKind.FUNCTION
    else:
        user, entry, kind = _pytorch_prompt(task, fmt, imports, policy), "ModelNew", EntryKind.CLASS
    return TaskPrompt(task.task_id, load_template("system").strip(), user, fmt, entry, kind)


def render_refine_message(turn: int, feedback: str, instruction: str) -> str:
    """The user message that carries the feedback on turn `turn` (0-based) and asks for the next answer."""
    return fill(load_template("refine"), turn=turn + 1, feedback=feedback.strip(), instruction=instruction)


# -- PyTorch tasks -----------------------------------------------------------------------------------


def _pytorch_prompt(task: Task, fmt: str, imports: str, policy: Any) -> str:
    rule = LENIENT_COMPUTE_RULE if policy.allow_torch_ops else STRICT_COMPUTE_RULE
    return fill(load_template(f"pytorch_{fmt}"), task_source=without_task_options(task.source).strip(),
                configs=_pytorch_configs(task), compute_rule=rule, allowed_imports=imports,
                tolerance=_pytorch_tolerance(task))


def without_task_options(source: str) -> str:
    """The task source without its module-level `CUDAPERF_TASK = {...}` (harness options, not the problem);
    unchanged when it does not parse or has none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    lines = source.splitlines(keepends=True)
    for node in reversed(tree.body):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == TASK_OPTIONS_NAME for t in targets):
            del lines[node.lineno - 1:node.end_lineno]
    return re.sub(r"\n{3,}", "\n\n", "".join(lines))


def _pytorch_configs(task: Task) -> str:
    """The declared configurations. Derived ones (sizes the loader adds to check generality) are counted,
    not shown: the model should write general code, not code for a list of sizes."""
    rows = []
    for c in task.configs:
        if c.name in derived_config_names(task):
            continue
        params = ", ".join(f"{k}={v!r}" for k, v in c.params.items()) or "no arguments"
        rows.append(f"- `{c.name}`: {params}")
    hidden = len(derived_config_names(task))
    if hidden:
        plural = "s" if hidden > 1 else ""
        rows.append(f"The judge also checks correctness on {hidden} more configuration{plural} (other sizes, "
                    "random parameter values): do not hard-code sizes or rely on initial parameter values.")
    return "\n".join(rows)


def derived_config_names(task: Task) -> frozenset[str]:
    """Configurations the loader derived from the task (`cudaperf.tasks.derived_configs`): other module
    sizes or random parameters, checked for correctness only; the prompt does not list them."""
    return frozenset(c.name for c in task.configs if c.module_values or c.randomize_parameters)


def _pytorch_tolerance(task: Task) -> str:
    tol = task.tolerances.get("float32", DEFAULT_FLOAT32)
    others = [f"{name} atol {t.atol:g}, rtol {t.rtol:g}" for name, t in sorted(task.tolerances.items())
              if name != "float32"]
    text = (f"|out - ref| <= {tol.atol:g}*rms(ref) + {tol.rtol:g}*|ref| per element for float32")
    return text + (f" ({'; '.join(others)})" if others else "")


# -- C tasks -----------------------------------------------------------------------------------------


def _c_prompt(task: Task, fmt: str, imports: str) -> str:
    from cudaperf.tasks.ctask import from_task

    ctask = from_task(task)
    params = "\n".join(
        f"- `{p.name}`: array of {p.length} `{p.ctype}` ({p.kind.value})" if p.is_array
        else f"- `{p.name}`: scalar `{p.ctype}`" for p in ctask.params)
    configs = "\n".join(f"- `{c.name}`: " + ", ".join(f"{k}={v}" for k, v in c.scalars.items())
                        for c in ctask.configs)
    return fill(load_template(f"c_{fmt}"), description=ctask.description, task_source=ctask.source.strip(),
                entry=ctask.entry, params=params, param_names=", ".join(p.name for p in ctask.params),
                configs=configs, allowed_imports=imports, tolerance=_c_tolerance(ctask.tolerance))


def _c_tolerance(tol: Tolerance) -> str:
    ints = "exactly" if tol.int_atol == 0 else f"within {tol.int_atol}"
    return (f"|out - ref| <= {tol.atol:g}*rms(ref) + {tol.rtol:g}*|ref| per element for floating outputs "
            f"(integer outputs {ints})")
