"""CPU filters that leave out tasks which cannot judge kernels (degenerate, rounding-sensitive)."""
