"""Developer profiles of sandboxed jobs (`execute.job_profile`): with CUDAPERF_PROFILE_JOBS set, a real
worker's job comes back as a pstats file naming the handler's own functions; oversized or malformed
profile messages are not written."""

from __future__ import annotations

import pstats
from pathlib import Path

from cudaperf.execute import Limits, StageTimeouts, WorkerPool, job_profile

HANDLERS = str(Path(__file__).with_name("sandbox_handlers.py"))


def test_a_profiled_workers_job_is_written_as_pstats(tmp_path, monkeypatch):
    monkeypatch.setenv(job_profile.ENV_VAR, str(tmp_path / "prof"))
    with WorkerPool(None, Limits(boundary=False), timeouts=StageTimeouts(start_s=60.0), preload=()) as pool:
        reply = pool.run({"handler": f"{HANDLERS}:ok", "echo": 3})
    assert reply.outcome is None and reply.payload["echo"] == 3
    files = list((tmp_path / "prof").glob("job-*.prof"))
    assert len(files) == 1
    names = {func for (_, _, func) in pstats.Stats(str(files[0])).stats}  # type: ignore[attr-defined]
    assert "ok" in names


def test_profiles_are_off_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(job_profile.ENV_VAR, raising=False)
    assert job_profile.profile_dir() is None


def test_malformed_or_oversized_profiles_are_not_written(tmp_path):
    assert job_profile.write_profile(tmp_path, 1, "not base64!") is None
    assert job_profile.write_profile(tmp_path, 1, "A" * (job_profile.MAX_PROFILE_BYTES + 4)) is None
    assert job_profile.write_profile(tmp_path, 1, {"stats": 1}) is None
    assert list(tmp_path.iterdir()) == []
