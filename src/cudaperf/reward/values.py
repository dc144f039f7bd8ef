"""Numbers read from evaluation records that may have come from JSON: finite floats or None.

Not covered: any reward logic (see `unified.py`, `structural.py`).
"""

from __future__ import annotations

import math
import numbers


def finite(x: object) -> float | None:
    """A finite float, or None for None / NaN / inf / anything that is not a number."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):  # Real: numpy scalars too
        return None
    return float(x) if math.isfinite(x) else None


def positive(x: object) -> float | None:
    value = finite(x)
    return value if value is not None and value > 0 else None
