"""Job handlers for tests/unit/test_referee_timed_rechecks.py (no tests here): the real evaluation
(`dispatch.run_eval_job`, shipping to the referee), with the keys of the re-checked timing outputs it ships
recorded, or with timed announcements added that the worker's own code never sends (what native code in
the worker could send on its output channel)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def record_timed_keys(job, report):
    """The real evaluation; the payload's `timed_keys`: the wire key of every re-checked timing output
    shipped, in order."""
    from cudaperf.execute import dispatch
    from cudaperf.execute.outputs import Shipper

    keys: list[list] = []
    original = Shipper.ship

    def ship(self, key, item, kind="output"):
        if kind == "timed":
            keys.append(key.wire())
        return original(self, key, item, kind)

    Shipper.ship = ship
    try:
        payload = dispatch.run_eval_job(job, report)
    finally:
        Shipper.ship = original
    payload["timed_keys"] = keys
    return payload


def _with_extra(extra: Callable[[Any, str, Any, Callable], None]):
    """A handler: the real evaluation, where each configuration's re-checked outputs are shipped by
    `extra(shipper, config, first, ship_real)`: `first` the candidate's first output on input set 0,
    `ship_real()` the worker's own shipping of them."""

    def handler(job, report):
        from cudaperf.execute import dispatch
        from cudaperf.execute.outputs import Shipper

        original = Shipper.ship_timed

        def ship_timed(self, config, outputs):
            first = outputs.get(("candidate", 0, 0))
            extra(self, config, first, lambda: original(self, config, outputs))

        Shipper.ship_timed = ship_timed
        try:
            return dispatch.run_eval_job(job, report)
        finally:
            Shipper.ship_timed = original

    return handler


def _later(shipper, config: str, value: Any, recheck: int, function: str = "candidate") -> None:
    """One later re-checked output of input set 0 with index `recheck`, sent at once."""
    from cudaperf.execute.outputs import TimedKey

    shipper.ship(TimedKey(config, 0, function, recheck), {"output": value, "inputs_after": None}, "timed")
    shipper.flush()
    shipper.kind = "output"


def _within_the_cap(shipper, config, first, ship_real):
    from cudaperf.execute.outputs import KEPT_RECHECKS

    ship_real()
    for recheck in range(1, KEPT_RECHECKS + 1):
        _later(shipper, config, first, 1000 + recheck)


def _over_the_cap(shipper, config, first, ship_real):
    from cudaperf.execute.outputs import KEPT_RECHECKS

    ship_real()
    for recheck in range(1, KEPT_RECHECKS + 2):
        _later(shipper, config, first, 1000 + recheck)


def _twice(shipper, config, first, ship_real):
    ship_real()
    _later(shipper, config, first, 1001)
    _later(shipper, config, first, 1001)


def _before_the_first(shipper, config, first, ship_real):
    _later(shipper, config, first, 1)
    ship_real()


def _of_a_baseline(shipper, config, first, ship_real):
    from cudaperf.execute.outputs import TimedKey

    ship_real()
    key = TimedKey(config, 0, "eager", 0)
    shipper.ship(key, {"output": first, "inputs_after": None}, "timed")  # a first one: within the rules
    _later(shipper, config, first, 1001, "eager")


def _negative(shipper, config, first, ship_real):
    ship_real()
    _later(shipper, config, first, -1)


# Well formed: KEPT_RECHECKS later outputs of set 0 (copies of the first), each sent once after it.
later_outputs_within_the_cap = _with_extra(_within_the_cap)
# Not what the worker's code sends: one more than it keeps, a re-check index twice, a later one before
# its set's first, a negative index, a later one of a baseline.
later_outputs_over_the_cap = _with_extra(_over_the_cap)
a_later_output_twice = _with_extra(_twice)
a_later_output_before_the_first = _with_extra(_before_the_first)
a_negative_recheck = _with_extra(_negative)
a_later_output_of_a_baseline = _with_extra(_of_a_baseline)
