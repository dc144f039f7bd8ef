"""The GPU tests on pytest-xdist workers: one xdist group per module-scoped fixture instance.

A module-scoped fixture is set up once per module *per worker*: with `--dist loadgroup` and no group, a
file's tests spread over every worker, and each of them builds its own copy of the file's evaluator (worker
and referee processes, bubblewrap, builds, torch.compile warm-ups). Session 14's log shows the hostile
batch's 72 s set-up four times; session 19's suite (12 workers) spent its time on the host with the GPU
idle. So a test that uses a module-scoped fixture is grouped with the other tests of its file that share
the same instance (the file, plus the parameter where the fixture is parametrized), and that instance is
built once. Tests that name their own group keep it; tests with no module-scoped fixture spread freely.

Covered: tests under tests/gpu when xdist runs with `--dist loadgroup` (gpu_check.sh's steps). Not
covered: session-scoped fixtures (one per worker whatever the grouping) and tests/adversarial (many cheap
evaluations of one evaluator: spreading them wins there).
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent


def module_fixture_keys(item: pytest.Item) -> list[str]:
    """The module-scoped fixture instances a test uses: a name, with its parameter where it has one."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    params = getattr(getattr(item, "callspec", None), "params", {})
    keys = []
    for name in info.names_closure:
        defs = info.name2fixturedefs.get(name) or ()
        if defs and defs[-1].scope == "module":
            keys.append(f"{name}={params[name]}" if name in params else name)
    return sorted(keys)


def shared_instance_groups(keys_by_item: dict[str, list[str]]) -> dict[str, str]:
    """Per test (of one file), the group of every test sharing an instance with it, transitively: tests
    that use `a` and `b`, and tests that use `b` alone, are one group (both instances built once)."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    for keys in keys_by_item.values():
        for key in keys[1:]:
            parent[root(key)] = root(keys[0])
    members: dict[str, list[str]] = {}
    for key in list(parent) + [k for keys in keys_by_item.values() for k in keys]:
        members.setdefault(root(key), []).append(key)
    name = {r: min(ks) for r, ks in members.items()}
    return {item: name[root(keys[0])] for item, keys in keys_by_item.items() if keys}


@pytest.hookimpl(tryfirst=True)  # before xdist's worker hook reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    by_file: dict[str, dict[str, pytest.Item]] = {}
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents and not item.get_closest_marker("xdist_group"):
            by_file.setdefault(Path(str(item.path)).stem, {})[item.nodeid] = item
    for stem, tests in by_file.items():
        groups = shared_instance_groups({nodeid: module_fixture_keys(it) for nodeid, it in tests.items()})
        for nodeid, group in groups.items():
            # no brackets: xdist reads a group only from an "@" after the node id's last "]"
            name = f"{stem}/{group}".replace("[", "(").replace("]", ")")
            tests[nodeid].add_marker(pytest.mark.xdist_group(name))
