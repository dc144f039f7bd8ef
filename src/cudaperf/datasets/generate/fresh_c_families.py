"""C→CUDA families held out of the dataset: a fresh held-out set for the ranker (issue 20).

None of these families is in `registry.all_families()`, so the dataset, its splits and everything trained
on it stay as they were; `registry.fresh_families()` lists them, and their tasks' split is "fresh". They
are written, measured and then read once, by a protocol committed before their first measurement.

Not covered: the dataset's own families (c_parallel_families.py, c_dependent_families.py).
"""

from __future__ import annotations

from cudaperf.datasets.records import Family

FRESH_C_FAMILIES: tuple[Family, ...] = ()
