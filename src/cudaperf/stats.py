"""Summary statistics shared by the evaluator, the dataset statistics and the reports.

Covers: `geomean` of positive finite values (missing, zero, negative and non-finite values are left
out, so one failed configuration does not make a mean undefined). Not covered: medians and spreads of
timing samples (`cudaperf.timing` keeps those beside the samples they summarise).
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def geomean(values: Iterable[float | None]) -> float | None:
    """The geometric mean of the positive finite values; None when there is none."""
    xs = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(math.fsum(math.log(v) for v in xs) / len(xs)) if xs else None
