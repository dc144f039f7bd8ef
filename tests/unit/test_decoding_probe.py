"""The decoding probe (`agent.backends.decoding_probe`) and its use by the rollout's sampler
(`ModelGenerator`'s `probe_to`, `RlConfig.profile_decoding`) and by the local backend (`HFLocalBackend`'s
`probe_to`): every step of a real `generate` call timed, a few profiled with the real `torch.profiler`, on
a small random Llama on the CPU (the device side runs in `tests/gpu/test_rollout_generation_gpu.py`)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from cudaperf.agent.backends.decoding_probe import DECODING_PROBE_FILE, DecodingReport
from cudaperf.train.config import RlConfig
from cudaperf.train.rollout import ModelGenerator, MultiTurnRollout, TurnProgress

NEW_TOKENS = 40  # past the probe's 16 skipped + 1 warm-up + 8 profiled steps


@pytest.fixture(scope="module")
def policy():
    """A 2-layer random Llama that never emits its end-of-turn token (so every call runs its full length)
    and the tiny ChatML tokenizer."""
    from cudaperf.agent.backends.tiny import tiny_chat_model

    model, tokenizer = tiny_chat_model(hidden_size=64)
    eos = torch.tensor([tokenizer.eos_token_id])
    model.lm_head.register_forward_hook(lambda module, args, out: out.index_fill(-1, eos, float("-inf")))
    return model, tokenizer


def prompts(tokenizer):
    return [tokenizer(text, add_special_tokens=False)["input_ids"]
            for text in ("__global__ void k(float* x) { x[0] = 1; }", "int main() { return 0; }")]


def test_the_first_call_writes_every_steps_time_and_a_profile(policy, tmp_path):
    model, tokenizer = policy
    path = tmp_path / "probe.txt"
    ModelGenerator(model, tokenizer, 1.0, 1.0, probe_to=str(path)).generate(prompts(tokenizer), NEW_TOKENS)
    text = path.read_text()
    assert "device: cpu" in text and "rows: 2;" in text and f"new tokens: {NEW_TOKENS}" in text
    assert "decoding step, last third" in text and "profiled steps: 8; per step: host" in text
    assert "aten::" in text  # the profiler's operator table


def test_only_the_first_call_is_probed(policy, tmp_path):
    model, tokenizer = policy
    path = tmp_path / "probe.txt"
    generator = ModelGenerator(model, tokenizer, 1.0, 1.0, probe_to=str(path))
    generator.generate(prompts(tokenizer), NEW_TOKENS)
    path.unlink()
    generator.generate(prompts(tokenizer), NEW_TOKENS)
    assert generator.probe_to is None and not path.exists()


def test_probing_leaves_the_sampled_tokens_as_they_are(policy, tmp_path):
    model, tokenizer = policy
    torch.manual_seed(7)
    plain = ModelGenerator(model, tokenizer, 1.0, 1.0).generate(prompts(tokenizer), NEW_TOKENS)
    torch.manual_seed(7)
    probed = ModelGenerator(model, tokenizer, 1.0, 1.0, probe_to=str(tmp_path / "p.txt")).generate(
        prompts(tokenizer), NEW_TOKENS)
    assert [g.ids for g in probed] == [g.ids for g in plain]


def test_a_call_too_short_for_the_profile_says_so(policy, tmp_path):
    model, tokenizer = policy
    path = tmp_path / "probe.txt"
    ModelGenerator(model, tokenizer, 1.0, 1.0, probe_to=str(path)).generate(prompts(tokenizer), 5)
    assert "(no profile: the call ended after 5 steps" in path.read_text()


def test_the_rollout_probes_into_its_output_folder_when_asked(policy, tmp_path):
    model, tokenizer = policy
    config = RlConfig(model="tiny", output_dir=str(tmp_path), profile_decoding=True)
    generator = MultiTurnRollout(config, [], None, tokenizer)._generator(model)
    assert generator.probe_to == str(tmp_path / DECODING_PROBE_FILE)


def test_the_rollout_does_not_probe_by_default(policy, tmp_path):
    model, tokenizer = policy
    generator = MultiTurnRollout(RlConfig(model="tiny", output_dir=str(tmp_path)), [], None,
                                 tokenizer)._generator(model)
    assert generator.probe_to is None


def test_the_padding_fraction_is_the_share_of_pad_tokens_in_the_prompt_batch():
    report = DecodingReport("cpu", 2, (10, 30), 4, (1.0, 1.0, 1.0), 0, None, None, "")
    assert report.padding_fraction == pytest.approx(20 / 60)


def test_the_step_times_are_summarised_by_thirds_after_the_first_step():
    steps = (100.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0)
    text = DecodingReport("cpu", 1, (5,), 8, steps, 0, None, None, "").text()
    assert "first third (2 steps): median 1.00 ms" in text and "last third (2 steps): median 3.00 ms" in text


def test_a_turns_progress_line_gives_the_time_of_a_decoding_step():
    progress = TurnProgress(0, 16, 8000, 92.0, 30.0, {"correct": 16}, longest_reply_tokens=920)
    assert "(longest 920: 100.0 ms a step)" in progress.line()


def test_a_call_ending_inside_the_profiled_steps_reports_no_profile(policy, tmp_path):
    model, tokenizer = policy
    path = tmp_path / "probe.txt"
    ModelGenerator(model, tokenizer, 1.0, 1.0, probe_to=str(path)).generate(prompts(tokenizer), 20)
    assert "(no profile: the call ended after 20 steps" in path.read_text()


def test_a_profiler_that_fails_stops_the_profile_not_the_generation(policy, tmp_path, monkeypatch):
    model, tokenizer = policy

    def broken(*args, **kwargs):
        raise RuntimeError("CUPTI unavailable")

    monkeypatch.setattr(torch.profiler, "profile", broken)
    path = tmp_path / "probe.txt"
    replies = ModelGenerator(model, tokenizer, 1.0, 1.0, probe_to=str(path)).generate(prompts(tokenizer),
                                                                                      NEW_TOKENS)
    assert [len(r.ids) for r in replies] == [NEW_TOKENS, NEW_TOKENS]
    text = path.read_text()
    assert "(no profile: the profiler failed: RuntimeError: CUPTI unavailable)" in text
    assert "decoding step, last third" in text  # the step times are still there


def test_the_local_backend_probes_its_next_call_once(policy, tmp_path):
    from cudaperf.agent.backends.base import ChatMessage, GenerationConfig
    from cudaperf.agent.backends.hf_local import HFLocalBackend

    model, tokenizer = policy
    backend = HFLocalBackend(model, tokenizer, "hf:tiny")
    backend.probe_to = str(tmp_path / "probe.txt")
    conversation = [ChatMessage("user", "Write a CUDA kernel.")]
    (reply,) = backend.generate([conversation], GenerationConfig(max_new_tokens=NEW_TOKENS, seed=0))
    assert reply.error is None and reply.completion_tokens == NEW_TOKENS
    assert "rows: 1;" in (tmp_path / "probe.txt").read_text() and backend.probe_to is None


class _Event:
    """One row of `torch.profiler`'s key averages, as much of it as the probe reads."""

    def __init__(self, key: str, cpu_us: float, device_us: float) -> None:
        self.key, self.self_cpu_time_total, self.self_device_time_total = key, cpu_us, device_us


class _Events(list):
    def table(self, **kwargs) -> str:
        return "operators"


def test_the_per_step_device_time_leaves_out_the_profilers_own_step_rows():
    from cudaperf.agent.backends.decoding_probe import DecodingProbe

    probe = DecodingProbe("cuda:0", [4], skip_steps=1, active_steps=2)
    probe._clock = [0.0, 1.0, 2.0, 3.0]
    probe._events = _Events([_Event("ProfilerStep*", 0.0, 200_000.0), _Event("aten::mm", 3_000.0, 1_000.0),
                             _Event("void gemm_kernel", 0.0, 3_000.0)])
    report = probe.report()
    assert report.device_ms_per_profiled_step == 2.0 and report.host_ms_per_profiled_step == 1.5
