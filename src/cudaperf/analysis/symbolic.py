"""A small symbolic algebra for index expressions: Laurent polynomials with rational coefficients.

Covers: sums and products of symbols (`threadIdx.x`, `blockDim.x`, kernel parameters, loop variables),
exact division by a monomial (so a grid-stride trip count `n / (blockDim.x*gridDim.x)` times the thread
count `blockDim.x*gridDim.x` cancels to `n`), differentiation (the stride of an address along
`threadIdx.x`), numeric evaluation under bindings, and interval bounds. `Unknown` stands for what the
algebra cannot express (indirect indices, division by a sum), remembering whether it varies per thread.

Not covered: integer floor semantics (the caller decides how `/` and `%` behave within a warp), sums
divided by sums, simplification beyond collecting like terms.

Why hand-written: sympy is installed here (via torch) but costs ~0.4 s to import and ~50 us per
operation; the analysis needs a few hundred operations per kernel at >= 50 kernels/s, only on polynomials,
and must also run where sympy is absent. The arithmetic needed is a hundred lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

Mono = tuple[tuple[str, int], ...]  # sorted (symbol, nonzero exponent) pairs; () is the constant term


def _mono_mul(a: Mono, b: Mono) -> Mono:
    exps = dict(a)
    for s, e in b:
        exps[s] = exps.get(s, 0) + e
    return tuple(sorted((s, e) for s, e in exps.items() if e != 0))


@dataclass(frozen=True)
class Poly:
    """A Laurent polynomial: sum of coefficient * product of symbol**exponent (exponents may be negative)."""

    terms: tuple[tuple[Mono, Fraction], ...] = ()

    @staticmethod
    def of(mapping: dict[Mono, Fraction]) -> Poly:
        return Poly(tuple(sorted((m, c) for m, c in mapping.items() if c != 0)))

    @staticmethod
    def const(value: float | Fraction) -> Poly:
        return Poly.of({(): Fraction(value)})

    @staticmethod
    def sym(name: str) -> Poly:
        return Poly(((((name, 1),), Fraction(1)),))

    # arithmetic ---------------------------------------------------------------------------------------
    def __add__(self, other: Poly) -> Poly:
        if not isinstance(other, Poly):
            return NotImplemented
        acc = dict(self.terms)
        for m, c in other.terms:
            acc[m] = acc.get(m, Fraction(0)) + c
        return Poly.of(acc)

    def __neg__(self) -> Poly:
        return Poly(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: Poly) -> Poly:
        if not isinstance(other, Poly):
            return NotImplemented
        return self + (-other)

    def __mul__(self, other: Poly) -> Poly:
        if not isinstance(other, Poly):
            return NotImplemented
        acc: dict[Mono, Fraction] = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                m = _mono_mul(m1, m2)
                acc[m] = acc.get(m, Fraction(0)) + c1 * c2
        return Poly.of(acc)

    def divide(self, other: Poly) -> Poly | None:
        """Exact division by a single-term divisor; None when the divisor is a sum or zero."""
        if len(other.terms) != 1:
            return None
        mono, coef = other.terms[0]
        inverse = Poly(((tuple((s, -e) for s, e in mono), 1 / coef),))
        return self * inverse

    # inspection ---------------------------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return all(m == () for m, _ in self.terms)

    @property
    def value(self) -> Fraction:
        """The constant term (the whole value when `is_const`)."""
        return dict(self.terms).get((), Fraction(0))

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(s for m, _ in self.terms for s, _ in m)

    def depends_on(self, name: str) -> bool:
        return name in self.symbols

    def derivative(self, name: str) -> Poly:
        acc: dict[Mono, Fraction] = {}
        for m, c in self.terms:
            exps = dict(m)
            e = exps.get(name, 0)
            if e == 0:
                continue
            exps[name] = e - 1
            mono = tuple(sorted((s, x) for s, x in exps.items() if x != 0))
            acc[mono] = acc.get(mono, Fraction(0)) + c * e
        return Poly.of(acc)

    def without(self, name: str) -> Poly:
        """The terms that do not mention `name`."""
        return Poly(tuple((m, c) for m, c in self.terms if name not in dict(m)))

    def substitute(self, bindings: dict[str, Poly]) -> Poly:
        out = Poly()
        for m, c in self.terms:
            term = Poly.const(c)
            for s, e in m:
                base = bindings.get(s)
                if base is None:
                    term = term * Poly(((((s, e),), Fraction(1)),))
                    continue
                factor = _power(base, e)
                if factor is None:
                    return Poly.sym("?undefined")
                term = term * factor
            out = out + term
        return out

    def evaluate(self, bindings: dict[str, float]) -> float | None:
        """A number when every symbol is bound (and no zero is raised to a negative power)."""
        total = 0.0
        for m, c in self.terms:
            term = float(c)
            for s, e in m:
                v = bindings.get(s)
                if v is None or (v == 0 and e < 0):
                    return None
                term *= float(v) ** e
            total += term
        return total

    def interval(self, ranges: dict[str, tuple[float, float]]) -> tuple[float, float] | None:
        """Bounds of the value when each symbol lies in its (lo, hi) range (interval arithmetic)."""
        lo_total = hi_total = 0.0
        for m, c in self.terms:
            lo = hi = float(c)
            for s, e in m:
                r = ranges.get(s)
                if r is None or e < 0:
                    return None
                for _ in range(e):
                    cands = (lo * r[0], lo * r[1], hi * r[0], hi * r[1])
                    lo, hi = min(cands), max(cands)
            lo_total += lo
            hi_total += hi
        return lo_total, hi_total

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m, c in sorted(self.terms, key=lambda t: (len(t[0]) == 0, t[0])):
            factors = [s if e == 1 else f"{s}^{e}" for s, e in m]
            if not factors:
                parts.append(_num(c))
            elif c == 1:
                parts.append("*".join(factors))
            elif c == -1:
                parts.append("-" + "*".join(factors))
            else:
                parts.append(_num(c) + "*" + "*".join(factors))
        return " + ".join(parts).replace("+ -", "- ")


def _num(c: Fraction) -> str:
    return str(c.numerator) if c.denominator == 1 else f"{c.numerator}/{c.denominator}"


def _power(base: Poly, e: int) -> Poly | None:
    if e < 0:
        inv = Poly.const(1).divide(base)
        return None if inv is None else _power(inv, -e)
    out = Poly.const(1)
    for _ in range(e):
        out = out * base
    return out


@dataclass(frozen=True)
class Unknown:
    """A value the algebra cannot express. `varying`: it may differ between threads of a warp."""

    varying: bool
    reason: str = ""


Value = Poly | Unknown


def is_power_of_two(x: Fraction) -> bool:
    return x.denominator == 1 and x.numerator > 0 and (x.numerator & (x.numerator - 1)) == 0


def log2_int(x: Fraction) -> int:
    return int(math.log2(x.numerator)) if is_power_of_two(x) else 0
