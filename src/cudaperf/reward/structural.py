"""The structural score: a number in [0, 1] from static (and, when measured, dynamic) kernel features.

What it claims: for the same task, kernels that coalesce their global accesses, avoid shared-memory bank
conflicts, spills and local memory, keep enough warps resident, use vector loads, reach a large share of
their roofline and use tensor cores where the work is compute-bound are *usually* faster. What it does not
claim: that a higher score means a faster kernel (the measured speedup is the judge), that the static classes
are exact (an access the analysis cannot classify is neutral, not bad), or anything about kernels that never
ran (a kernel the profiler says never launched contributes 0).

Not covered: the weights' defaults (`config.StructuralWeights`), the reward that uses the score
(`unified.py`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence

from cudaperf.kernel_names import kernel_identifier
from cudaperf.reward.config import COMPONENT_NAMES, StructuralWeights
from cudaperf.reward.values import finite
from cudaperf.types import CoalescingClass, KernelFeatures, MemoryAccess

# Keys this module reads from `KernelFeatures.dynamic` and `KernelFeatures.sass` (agreed with the analysis
# side; a key that is absent simply leaves the component missing, i.e. neutral).
DYNAMIC_GPU_TIME_MS = "gpu_time_ms"  # GPU time of this kernel in the timed run (0: never launched)
DYNAMIC_LAUNCHES = "launches"  # number of launches seen by a profiler (0: never launched)
DYNAMIC_ROOFLINE_FRACTION = "roofline_fraction"  # achieved / attainable throughput at its intensity, [0, 1]
SASS_LOCAL_KEYS: tuple[str, ...] = ("local", "ldl", "stl")
SASS_TENSOR_KEYS: tuple[str, ...] = ("hmma", "hgmma", "imma", "qgmma", "wgmma")
SASS_VECTOR_KEYS: tuple[str, ...] = ("ldg128", "stg128", "ldg64", "stg64")


DEFAULT_WEIGHTS = StructuralWeights()  # frozen: one shared default is safe


class _Absent(enum.Enum):
    MISSING = "missing"  # the input is unknown: the component takes the neutral value
    NOT_APPLICABLE = "not_applicable"  # the component says nothing about this kernel: left out


_Value = float | _Absent


def structural_score(
    features: Sequence[KernelFeatures],
    weights: StructuralWeights | Mapping[str, float] = DEFAULT_WEIGHTS,
    *,
    kernel_time_ms: Mapping[str, float] | None = None,
    require_launch_evidence: bool = False,
) -> tuple[float, dict[str, float]]:
    """A score in [0, 1] for the kernels of one solution, and its parts.

    Each kernel gets the weighted mean of its components (see `StructuralWeights`), times
    `divergent_barrier_factor` when it has a divergent barrier. Kernels are averaged weighted by their GPU
    time when every kernel's time is known, else uniformly; kernels sharing a name (`kernel_identifier`:
    units, namespaces, overloads and instantiations alike) count as one, scored by the lowest of them. A
    kernel known never to have launched (absent from a non-empty `kernel_time_ms`, or zero time / launches
    in its `dynamic` features) scores 0, as does one with no launch evidence when
    `require_launch_evidence`. No kernels: 0.
    Parts: "kernels", "never_launched", "launch_unknown", the mean of each component over the kernels that
    ran, and "missing.<component>" = number of kernels whose input for it was missing.
    """
    w = weights if isinstance(weights, StructuralWeights) else StructuralWeights(**weights)
    kernels = [f for f in features if isinstance(f, KernelFeatures)]
    parts: dict[str, float] = {"kernels": float(len(kernels)), "never_launched": 0.0, "launch_unknown": 0.0}
    if not kernels:
        return 0.0, parts
    times: dict[str, float] = {}
    for name, ms in (kernel_time_ms or {}).items():  # instantiations of one template share a base name
        if finite(ms) is not None:
            times[kernel_identifier(name)] = times.get(kernel_identifier(name), 0.0) + float(ms)
    scored: dict[str, list[tuple[float, float | None]]] = {}  # (score, GPU time or None) per kernel, by name
    kernel_parts: list[dict[str, float]] = []
    for f in kernels:
        launched, time_ms = _launch_evidence(f, times)
        parts["launch_unknown"] += float(launched is None)
        named = scored.setdefault(kernel_identifier(str(f.kernel)), [])
        if launched is False or (launched is None and require_launch_evidence):
            parts["never_launched"] += float(launched is False)
            named.append((0.0, 0.0 if launched is False else time_ms))
            continue
        score, kparts = kernel_structural_score(f, w)
        kernel_parts.append(kparts)
        named.append((score, time_ms))
    parts.update(_summarise(kernel_parts))
    return _combine([_one_per_name(group) for group in scored.values()]), parts


def _one_per_name(group: list[tuple[float, float | None]]) -> tuple[float, float | None]:
    """The kernels that share a name, as one: the profiler's time is per name, so which of them ran is not
    known. Scored by the lowest of them, its time counted once: otherwise well-shaped copies that never
    launch (another unit, a namespace, an overload) would each take the name's whole time as their weight
    and pull the score up."""
    times = [t for _, t in group]
    return min(s for s, _ in group), (None if None in times else max(times))


def _summarise(kernel_parts: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each component over the scored kernels; counts for the "missing.*" and other markers."""
    out: dict[str, float] = {}
    for name in COMPONENT_NAMES:
        values = [p[name] for p in kernel_parts if name in p]
        if values:
            out[name] = sum(values) / len(values)
    for p in kernel_parts:
        for key, value in p.items():
            if key not in COMPONENT_NAMES:
                out[key] = out.get(key, 0.0) + value
    return out


def _combine(scored: list[tuple[float, float | None]]) -> float:
    known = [t for _, t in scored if t is not None]
    if len(known) == len(scored) and sum(known) > 0:  # every kernel's GPU time is known: weight by it
        value = sum(s * (t or 0.0) for s, t in scored) / sum(known)
    else:
        value = sum(s for s, _ in scored) / len(scored)
    return min(1.0, max(0.0, value))


def kernel_structural_score(feature: KernelFeatures,
                            weights: StructuralWeights) -> tuple[float, dict[str, float]]:
    """The structural score of one kernel in [0, 1], with its component values and "missing.*" markers."""
    parts: dict[str, float] = {}
    num = den = 0.0
    for name, component in _COMPONENTS.items():
        value = component(feature, weights)
        if value is _Absent.NOT_APPLICABLE:
            continue
        if value is _Absent.MISSING:
            parts[f"missing.{name}"] = 1.0
            value = weights.neutral
        parts[name] = value
        num += getattr(weights, name) * value
        den += getattr(weights, name)
    score = num / den if den > 0 else weights.neutral
    if feature.divergent_barriers:
        parts["divergent_barriers"] = float(len(tuple(feature.divergent_barriers)))
        score *= weights.divergent_barrier_factor
    return min(1.0, max(0.0, score)), parts


def _global_accesses(f: KernelFeatures) -> list[MemoryAccess]:
    return [a for a in f.accesses or () if isinstance(a, MemoryAccess) and a.space == "global"]


def _coalescing(f: KernelFeatures, w: StructuralWeights) -> _Value:
    accesses = _global_accesses(f)
    if not accesses:
        return _Absent.MISSING
    return (sum(_access_efficiency(a.coalescing, a.stride_elements, w.neutral, a.window) for a in accesses)
            / len(accesses))


def _access_efficiency(cls: CoalescingClass | None, stride: int | None, neutral: float,
                       window: int = 1) -> float:
    """Useful share of the bytes a warp's access moves, by coalescing class. A strided request of a
    per-thread window (`window` > 1: thread t reads base + t*W + k for k < W) moves sectors that the
    window's other requests use from L1, so the window as a whole wastes nothing: as coalesced."""
    if cls in (CoalescingClass.COALESCED, CoalescingClass.BROADCAST) or window > 1:
        return 1.0
    if cls is CoalescingClass.UNCOALESCED:
        return 0.0
    if cls is CoalescingClass.STRIDED:
        # stride c elements: each 32-byte sector serves ~1/c of what it moves
        return 1.0 / abs(stride) if isinstance(stride, int) and abs(stride) >= 1 else 0.25
    return neutral  # UNKNOWN or unclassified: the analysis could not tell


def _occupancy(f: KernelFeatures, w: StructuralWeights) -> _Value:
    occ = finite(getattr(f.occupancy, "occupancy", None))
    if occ is None:
        return _Absent.MISSING
    return min(1.0, max(0.0, occ) / w.occupancy_saturation)


def _bank_conflicts(f: KernelFeatures, w: StructuralWeights) -> _Value:
    shared = [a for a in f.accesses or () if isinstance(a, MemoryAccess) and a.space == "shared"]
    if not shared:
        return _Absent.NOT_APPLICABLE
    degrees = [a.bank_conflict_degree for a in shared if isinstance(a.bank_conflict_degree, int)]
    if not degrees:
        return _Absent.MISSING
    return sum(1.0 / min(32, max(1, d)) for d in degrees) / len(degrees)


def _synchronization(f: KernelFeatures, w: StructuralWeights) -> _Value:
    redundant = len(f.redundant_barriers or ())
    barriers = max(_num(f.barriers), redundant)
    if barriers <= 0:
        return _Absent.NOT_APPLICABLE
    return 1.0 - redundant / barriers


def _spills(f: KernelFeatures, w: StructuralWeights) -> _Value:
    sass_local = sum(_count(f.sass, k) for k in SASS_LOCAL_KEYS)
    if f.resources is None and not any(k in (f.sass or {}) for k in SASS_LOCAL_KEYS):
        return _Absent.MISSING
    r = f.resources
    spilled = (max(0.0, _num(r.spill_store_bytes)) + max(0.0, _num(r.spill_load_bytes)) if r is not None
               else 0.0)
    local = sass_local > 0 or (r is not None and _num(r.stack_frame_bytes) > 0)
    value = 1.0 / (1.0 + spilled / w.spill_scale_bytes)
    return min(value, w.local_memory_factor) if local else value


def _vectorization(f: KernelFeatures, w: StructuralWeights) -> _Value:
    accesses = _global_accesses(f)
    if accesses:
        vectorised = sum(1 for a in accesses if _num(a.vector_width) > 1)
        return min(len(accesses), max(vectorised, _num(f.vectorized_accesses))) / len(accesses)
    if any(_count(f.sass, k) > 0 for k in SASS_VECTOR_KEYS):
        return 1.0
    return _Absent.MISSING


def _intensity(f: KernelFeatures, w: StructuralWeights) -> _Value:
    fraction = finite((f.dynamic or {}).get(DYNAMIC_ROOFLINE_FRACTION))
    return _Absent.MISSING if fraction is None else min(1.0, max(0.0, fraction))


def _tensor_cores(f: KernelFeatures, w: StructuralWeights) -> _Value:
    used = any(_count(f.sass, k) > 0 for k in SASS_TENSOR_KEYS)
    if f.roofline_regime == "memory":
        return _Absent.NOT_APPLICABLE
    if f.roofline_regime == "compute":
        return 1.0 if used else (0.0 if f.sass else _Absent.MISSING)  # SASS read, no tensor op
    return 1.0 if used else _Absent.MISSING  # regime unknown: credit visible use, assume nothing else


_COMPONENTS: dict[str, Callable[[KernelFeatures, StructuralWeights], _Value]] = {
    "coalescing": _coalescing,
    "occupancy": _occupancy,
    "bank_conflicts": _bank_conflicts,
    "synchronization": _synchronization,
    "spills": _spills,
    "vectorization": _vectorization,
    "intensity": _intensity,
    "tensor_cores": _tensor_cores,
}


def _count(counts: Mapping[str, object] | None, key: str) -> float:
    return _num((counts or {}).get(key))


def _num(x: object) -> float:
    """A finite number, or 0 for None / NaN / non-numbers (fields of records decoded from bad JSON)."""
    value = finite(x)
    return value if value is not None else 0.0


def _launch_evidence(f: KernelFeatures, times: Mapping[str, float]) -> tuple[bool | None, float | None]:
    """(ran?, GPU time in ms) — None where unknown. A non-empty profiler table lists every kernel that ran."""
    if times:
        time_ms = times.get(kernel_identifier(str(f.kernel)), 0.0)
        return time_ms > 0, time_ms
    dynamic = f.dynamic or {}
    time_ms = finite(dynamic.get(DYNAMIC_GPU_TIME_MS))
    if time_ms is not None:
        return time_ms > 0, time_ms
    launches = finite(dynamic.get(DYNAMIC_LAUNCHES))
    if launches is not None:
        return launches > 0, None
    return None, None
