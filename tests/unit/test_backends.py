"""The backend contract: `load_backend`'s registry and the replay backend (no model, no network)."""

from __future__ import annotations

import json
import threading

import pytest

from cudaperf.agent.backends.base import (
    BackendSpecError,
    ChatMessage,
    GenerationConfig,
    ModelBackend,
    load_backend,
)
from cudaperf.agent.backends.replay import RecordedReply, ReplayBackend

USER = [ChatMessage("user", "write a kernel")]


def _replay_file(tmp_path, records):
    path = tmp_path / "replies.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_replay_spec_loads_a_model_backend(tmp_path):
    backend = load_backend(f"replay:{_replay_file(tmp_path, [{'text': 'a'}])}")
    assert isinstance(backend, ModelBackend)


def test_replay_returns_replies_in_file_order_across_calls(tmp_path):
    backend = load_backend(f"replay:{_replay_file(tmp_path, [{'text': t} for t in 'abc'])}")
    first = backend.generate([USER, USER], GenerationConfig())
    second = backend.generate([USER], GenerationConfig())
    assert [g.text for g in first + second] == ["a", "b", "c"]


def test_replay_reads_a_trajectory_response_key(tmp_path):
    backend = load_backend(f"replay:{_replay_file(tmp_path, [{'response': 'kernel', 'turn': 0}])}")
    assert backend.generate([USER], GenerationConfig())[0].text == "kernel"


def test_replay_passes_recorded_counts_and_finish_reason_through(tmp_path):
    record = {"text": "x", "prompt_tokens": 7, "completion_tokens": 3, "finish_reason": "length"}
    (g,) = load_backend(f"replay:{_replay_file(tmp_path, [record])}").generate([USER], GenerationConfig())
    assert (g.prompt_tokens, g.completion_tokens, g.finish_reason) == (7, 3, "length")


def test_replay_exhausted_is_an_error_generation_not_an_exception(tmp_path):
    backend = load_backend(f"replay:{_replay_file(tmp_path, [{'text': 'only'}])}")
    g = backend.generate([USER, USER], GenerationConfig())[1]
    assert (g.text, g.finish_reason, "exhausted" in (g.error or "")) == ("", "error", True)


def test_replay_hands_each_reply_out_once_under_threads():
    backend = ReplayBackend([RecordedReply(str(i)) for i in range(200)])
    seen: list[str] = []
    lock = threading.Lock()

    def worker():
        for _ in range(50):
            (g,) = backend.generate([USER], GenerationConfig())
            with lock:
                seen.append(g.text)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen, key=int) == [str(i) for i in range(200)]


def test_replay_malformed_line_is_rejected_with_its_line_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\n[1, 2]\n')
    with pytest.raises(BackendSpecError, match=r"bad.jsonl:2"):
        load_backend(f"replay:{path}")


def test_replay_missing_file_is_a_spec_error(tmp_path):
    with pytest.raises(BackendSpecError, match="does not exist"):
        load_backend(f"replay:{tmp_path / 'none.jsonl'}")


def test_unknown_spec_is_a_spec_error_naming_the_choices():
    with pytest.raises(BackendSpecError, match="replay"):
        load_backend("nosuchbackend")


ECHO_MODULE = """
from cudaperf.agent.backends.base import Generation

class Echo:
    name = "echo"

    def __init__(self, prefix=""):
        self.prefix = prefix

    def generate(self, conversations, config):
        return [Generation(self.prefix + c[-1].content, 0, 0, "stop", 0.0) for c in conversations]

    def count_tokens(self, text):
        return len(text)

    def close(self):
        pass

def make(**options):
    return Echo(**options)
"""


def test_dotted_path_spec_calls_the_factory_with_the_options(tmp_path, monkeypatch):
    (tmp_path / "echopkg").mkdir()
    (tmp_path / "echopkg" / "__init__.py").write_text("")
    (tmp_path / "echopkg" / "echo.py").write_text(ECHO_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    backend = load_backend("echopkg.echo:make", prefix="> ")
    assert backend.generate([USER], GenerationConfig())[0].text == "> write a kernel"


def test_dotted_path_to_a_missing_module_is_a_spec_error():
    with pytest.raises(BackendSpecError, match="cannot be loaded"):
        load_backend("no_such_pkg.mod:factory")
