"""The index algebra: Laurent polynomials, their derivative along threadIdx.x, evaluation and bounds."""

from __future__ import annotations

from fractions import Fraction

from cudaperf.analysis.symbolic import Poly

TX, N = Poly.sym("threadIdx.x"), Poly.sym("n")


def test_like_terms_collect():
    assert (TX + TX - Poly.const(2) * TX) == Poly()


def test_product_distributes():
    p = (TX + Poly.const(1)) * N
    assert p.derivative("threadIdx.x") == N


def test_derivative_of_row_major_index_is_the_row_stride():
    row, col = Poly.sym("blockIdx.y"), Poly.sym("blockIdx.x") * Poly.sym("blockDim.x") + TX
    assert (col * N + row).derivative("threadIdx.x") == N


def test_exact_division_by_a_monomial_cancels():
    trip = N.divide(Poly.sym("blockDim.x") * Poly.sym("gridDim.x"))
    threads = Poly.sym("gridDim.x") * Poly.sym("blockDim.x")
    assert trip * threads == N


def test_division_by_a_sum_is_refused():
    assert N.divide(N + Poly.const(1)) is None


def test_evaluate_needs_every_symbol():
    assert (N * TX).evaluate({"n": 3}) is None
    assert (N * TX).evaluate({"n": 3, "threadIdx.x": 2}) == 6


def test_interval_of_a_linear_form():
    assert (Poly.const(4) * TX + N).interval({"threadIdx.x": (0, 31), "n": (10, 10)}) == (10, 134)


def test_constant_term_and_rational_coefficients():
    p = Poly.const(Fraction(1, 2)) * TX + Poly.const(3)
    assert p.value == 3 and not p.is_const
    assert str(p) == "1/2*threadIdx.x + 3"
