"""Worker-side handler of the native-code tests: load the attempts library (gcc-built from
escape_attempts.c) with ctypes and run the named attempts inside the worker process itself, as a
load_inline extension's static initialiser would. Loaded by the worker by file path; runs outside any
candidate scope on purpose: only the operating-system boundary stands in the way."""

from __future__ import annotations

import ctypes


def run_attempts(job, report):
    report("correctness")
    library = ctypes.CDLL(job["library"])
    library.cpn_attempt.argtypes = [ctypes.c_char_p]
    results = {name: library.cpn_attempt(name.encode()) for name in job["names"]}
    return {"outcome": None, "results": results}
