"""Kernel names from the source, mangled symbols and profiler names meet on one identifier."""

from __future__ import annotations

import pytest

from cudaperf.kernel_names import demangle, kernel_identifier


@pytest.mark.parametrize(("symbol", "name"), [("_Z3addPfi", "add"), ("_ZN2ns6kernelILi4EEvPf", "kernel"),
                                              ("_Z4tileILi16EEvPKfPf", "tile"), ("plain_c", "plain_c")])
def test_mangled_symbols_give_the_function_name(symbol, name):
    assert kernel_identifier(symbol) == name


@pytest.mark.parametrize("demangled, ident", [
    ("relu", "relu"),
    ("void relu_vec4<256>(float const*, float*, int)", "relu_vec4"),
    ("void ns::inner::tile_gemm<float, 64, 64>(float const*, float const*, float*, int, int, int)",
     "tile_gemm"),
    ("void (anonymous namespace)::helper<(int)4>(float*)", "helper"),
])
def test_profiler_names_give_the_identifier(demangled, ident):
    assert kernel_identifier(demangled) == ident


@pytest.mark.parametrize("name", [
    "my_kernel", "_Z9my_kernelPfS_i", "_ZN2ns9my_kernelEPfi", "void my_kernel(float*, float*, int)",
    "void ns::my_kernel<float, 128>(float const*, int)", "my_kernel<256>",
])
def test_every_form_of_one_kernel_meets_on_its_identifier(name):
    assert kernel_identifier(name) == "my_kernel"


def test_demangle_returns_readable_names_or_the_input():
    names = demangle(["_Z5scaleIfLi256EEvPT_S0_i", "add"])
    assert names["add"] == "add"
    assert names["_Z5scaleIfLi256EEvPT_S0_i"] in ("void scale<float, 256>(float*, float, int)",
                                                  "_Z5scaleIfLi256EEvPT_S0_i")  # c++filt may be absent
