"""A replay, not a measurement: how often each rule for the RL mode's live-anchor drift would have made a
task's next timed candidate a carrier, on the live anchors an `eval_modes.py` run recorded (its JSON's
`schedule.live_drift.records`: before session 22 against the carrier's medians; since, against the live
reference, each with the carrier's median beside it, `carrier_ms`, and the reference's own records in
`schedule.anchor_offset`).

Rules: "carrier" (any configuration's anchor past the tolerance from the carrier's median: the rule
before session 22), "reference" (the median over the configurations of the ratios to the task's live
reference, the first anchored candidate after a carrier, past the tolerance), and "reference, twice"
(that, on the same side for two anchored candidates in a row: `eval_modes.BaselineCache.observe`). After
a trip the replay starts a new reference, as a carrier would. Records of runs since session 22 keep the
two lists apart, so their order across a task's carriers is not known: for those only the "carrier"
rule (one candidate at a time) is replayed, beside the carriers the run itself made. Printed: a Markdown
table of trips per anchored candidate, per rule and tolerance.

    python benchmarks/anchor_drift_replay.py \
        benchmarks/results/2026-12-05-s20/call4-eval-modes-append/eval_modes.json  # both runs of s20
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys


def anchored_sequences(paths: list[str]) -> list[list[dict[str, tuple[float, float]]]]:
    """Per task and RL run, its anchored candidates in order: config -> (carrier's median, live median)."""
    sequences = []
    for path in paths:
        with open(path) as f:
            rows = json.load(f)["rows"]
        for row in rows:
            if row.get("mode") != "rl":
                continue
            candidates: dict[tuple[str, float], dict] = collections.OrderedDict()
            schedule = row["schedule"]
            records = list((schedule.get("anchor_offset") or {}).get("records", ())) + list(
                schedule["live_drift"]["records"])
            for rec in records:  # one candidate's share one age
                key = (rec["task_id"], rec["age_s"])
                carrier = rec.get("carrier_ms") if rec.get("reference") == "live" else rec["cached_ms"]
                if carrier is not None:
                    candidates.setdefault(key, {})[rec["config"]] = (carrier, rec["fresh_ms"])
            per_task = collections.defaultdict(list)
            for (task, _), configs in candidates.items():
                per_task[task].append(configs)
            sequences += per_task.values()
    return sequences


def _side(ratio: float, tolerance: float) -> int:
    return 0 if abs(ratio - 1) <= tolerance else (1 if ratio > 1 else -1)


def trips(sequences: list, rule: str, tolerance: float) -> tuple[int, int]:
    """(candidates whose anchor made the next timed candidate carry, anchored candidates judged)."""
    tripped = judged = 0
    for sequence in sequences:
        reference, last = None, 0
        for configs in sequence:
            if rule == "carrier":
                judged += 1
                tripped += any(_side(live / carrier, tolerance) for carrier, live in configs.values())
                continue
            if reference is None:
                reference, last = {c: live for c, (_, live) in configs.items()}, 0
                continue
            judged += 1
            ratios = [live / reference[c] for c, (_, live) in configs.items() if c in reference]
            ratio = statistics.median(ratios)
            side = _side(ratio, tolerance)
            tripped_now = side != 0 and (rule == "reference" or side == last)
            last = side
            if tripped_now:
                tripped += 1
                reference = None
    return tripped, judged


def recorded_since_s22(paths: list[str]) -> bool:
    """Whether the runs' records are of the like-with-like rule (their order across carriers unknown)."""
    for path in paths:
        with open(path) as f:
            for row in json.load(f)["rows"]:
                if row.get("mode") == "rl" and "anchor_offset" in row.get("schedule", {}):
                    return True
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="eval_modes.py JSON files")
    args = parser.parse_args(argv)
    sequences = anchored_sequences(args.results)
    print(f"{len(sequences)} task runs, {sum(map(len, sequences))} anchored candidates\n")
    print("| rule | tolerance | trips / anchored candidates judged |\n|---|---|---|")
    rules = ("carrier",) if recorded_since_s22(args.results) else ("carrier", "reference", "reference, twice")
    for rule in rules:
        for tolerance in (0.10, 0.15):
            hit, judged = trips(sequences, rule.replace(", twice", "-twice"), tolerance)
            print(f"| {rule} | {tolerance:.0%} | {hit} / {judged} ({hit / max(judged, 1):.0%}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
