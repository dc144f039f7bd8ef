"""The HTML results page: its numbers and structure checked in Python, and the page rendered by Debian's
headless Chromium (screenshot non-blank, the page's own script ran without error).

To refresh the committed screenshot:
`REPORT_HTML_SAVE_DIR=benchmarks/results/2026-12-04-session13/report-html python3 -m pytest -q
tests/unit/test_report_html.py -k chromium -p no:cacheprovider`.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from cudaperf.report import fast_p
from cudaperf.report_html import (
    best_so_far_fast_p,
    best_speedup_per_turn,
    diff_html,
    group_turns,
    mean_reward_per_turn,
    read_inputs,
    render_html,
    turn_from_dict,
    write_html,
)
from cudaperf.types import EvalResult, Outcome, to_dict

KERNEL_V1 = """import torch
from cudaperf.cuda import load_kernel

SOURCE = r'''
extern "C" __global__ void relu(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0 ? x[i] : 0;
}
'''
"""
KERNEL_V2 = KERNEL_V1.replace(
    "    if (i < n) y[i] = x[i] > 0 ? x[i] : 0;",
    "    for (; i < n; i += gridDim.x * blockDim.x)\n        y[i] = fmaxf(x[i], 0.0f);")
HOSTILE = "</script><script>alert('x')</script><img src=http://example.com/a.png>"


def _result(task: str, outcome: Outcome, eager: float | None = None, message: str = "") -> EvalResult:
    return EvalResult(task, f"agent/{task}", outcome, message=message, speedup_vs_eager=eager,
                      speedup_vs_compile=None if eager is None else eager * 0.8)


def _turn(task: str, sample: int, turn: int, code: str | None, result: EvalResult, reward: float,
          speedup: float | None = None) -> dict:
    return {
        "task_id": task, "sample": sample, "turn": turn,
        "prompt": [{"role": "system", "content": "You write CUDA."},
                   {"role": "user", "content": f"Task {task}"}],
        "response": f"Here is my kernel:\n```python\n{code}\n```" if code else "I am not sure.",
        "code": code, "result": to_dict(result), "reward": reward,
        "feedback": f"turn {turn}: {result.outcome.value}. {result.message}", "speedup": speedup,
        "baseline": "eager", "finish_reason": "stop", "prompt_tokens": 300 + 50 * turn,
        "completion_tokens": 120, "durations_s": {"generate": 1.5, "evaluate": 0.4},
    }


def sample_turns() -> list[dict]:
    """Three trajectories: one improves to a 2x kernel, one is never correct, one hits a compile error."""
    return [
        _turn("relu", 0, 0, KERNEL_V1.replace("x[i] : 0;", "x[i] : 1;"), _result("relu", Outcome.INCORRECT,
              message="config 0: max abs error 1.0 at index 3"), 0.0),
        _turn("relu", 0, 1, KERNEL_V1, _result("relu", Outcome.CORRECT, 1.25), 1.55, 1.25),
        _turn("relu", 0, 2, KERNEL_V2, _result("relu", Outcome.CORRECT, 2.0), 2.3, 2.0),
        _turn("softmax", 0, 0, None, _result("softmax", Outcome.INVALID_SOLUTION, message="no code"), 0.0),
        _turn("softmax", 0, 1, KERNEL_V1 + HOSTILE, _result("softmax", Outcome.INCORRECT), 0.0),
        _turn("matmul", 1, 0, KERNEL_V1, _result("matmul", Outcome.COMPILE_ERROR, message="error: x"), -0.1),
    ]


def sample_results() -> list[EvalResult]:
    return [_result("relu", Outcome.CORRECT, 1.4), _result("gelu", Outcome.CORRECT, 0.7),
            _result("matmul", Outcome.INCORRECT, 0.5), _result("conv", Outcome.COMPILE_ERROR),
            _result("layernorm", Outcome.CORRECT, 3.1)]


def _write_inputs(tmp_path: Path) -> list[Path]:
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(to_dict(r)) + "\n" for r in sample_results()))
    turns = tmp_path / "trajectories.jsonl"
    turns.write_text("".join(json.dumps(t) + "\n" for t in sample_turns()) + '{"task_id": "torn')
    return [results, turns]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    return parser


@pytest.fixture
def page(tmp_path) -> str:
    return render_html(read_inputs(_write_inputs(tmp_path)), title="sample")


# -- reading -----------------------------------------------------------------------------------------


def test_mixed_files_are_split_into_results_and_turns_with_bad_lines_named(tmp_path):
    inputs = read_inputs(_write_inputs(tmp_path))
    assert (len(inputs.results), len(inputs.turns), inputs.bad_lines) == (5, 6, ("trajectories.jsonl:7",))


def test_rewritten_turn_of_a_resumed_run_wins():
    first, again = sample_turns()[0], dict(sample_turns()[0], reward=0.5)
    (trajectory,) = group_turns([turn_from_dict(first), turn_from_dict(again)])
    assert [t.reward for t in trajectory.turns] == [0.5]


def test_turn_without_its_own_speedup_uses_the_eager_speedup_of_a_correct_result():
    record = dict(sample_turns()[1], speedup=None)
    assert turn_from_dict(record).speedup == 1.25


def test_agent_trajectory_store_output_is_read(tmp_path):
    trajectory = pytest.importorskip("cudaperf.agent.trajectory")
    from cudaperf.agent.backends.base import ChatMessage

    store = trajectory.TrajectoryStore(tmp_path / "t.jsonl")
    store.append(trajectory.TurnRecord("relu", 0, 0, (ChatMessage("user", "go"),), "reply", KERNEL_V1,
                                       _result("relu", Outcome.CORRECT, 1.5), 1.8, "fast", speedup=1.5))
    (turn,) = read_inputs([store.path]).turns
    assert (turn.task_id, turn.code, turn.speedup, turn.reward, turn.prompt) == (
        "relu", KERNEL_V1, 1.5, 1.8, (("user", "go"),))


# -- numbers -----------------------------------------------------------------------------------------


def test_best_so_far_rates_carry_a_trajectory_best_forward():
    trajectories = group_turns(turn_from_dict(t) for t in sample_turns())
    # relu: wrong, 1.25x, 2x; softmax: never correct; matmul: one turn, compile error
    assert best_so_far_fast_p(trajectories, 0.0) == [0.0, 1 / 3, 1 / 3]
    assert best_so_far_fast_p(trajectories, 1.5) == [0.0, 0.0, 1 / 3]


def test_best_speedup_per_turn_is_over_correct_trajectories_only():
    trajectories = group_turns(turn_from_dict(t) for t in sample_turns())
    assert best_speedup_per_turn(trajectories) == [None, 1.25, 2.0]


def test_mean_reward_per_turn_counts_the_turns_that_exist():
    trajectories = group_turns(turn_from_dict(t) for t in sample_turns())
    assert mean_reward_per_turn(trajectories) == pytest.approx([-0.1 / 3, 1.55 / 2, 2.3])


# -- the page ----------------------------------------------------------------------------------------


def test_page_fetches_nothing(page):
    sources = [a.get(k, "") for tag, a in _parse(page).tags for k in ("src", "href")
               if tag in ("script", "link", "img", "iframe", "a", "image", "use")]
    assert [s for s in sources if s and not s.startswith("#")] == []
    assert "@import" not in page and "url(" not in page


def test_page_escapes_kernel_text(page):
    assert HOSTILE not in page and html_escaped(HOSTILE) in page


def html_escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_fast_p_bars_carry_the_report_numbers(page):
    bars = {(a["data-series"], a["data-category"]): float(a["data-value"])
            for tag, a in _parse(page).tags if tag == "rect" and "data-value" in a}
    results = sample_results()
    assert bars[("vs eager", "p=1")] == pytest.approx(fast_p(results, 1.0, "eager"))
    assert bars[("vs compile", "p=0")] == pytest.approx(fast_p(results, 0.0, "compile"))


def test_every_trajectory_is_drawn_with_each_turn(page):
    tags = _parse(page).tags
    trajectories = [a for tag, a in tags if tag == "details" and a.get("class") == "trajectory"]
    turns = [a for tag, a in tags if tag == "div" and (a.get("class") or "").startswith("turn ")]
    assert (len(trajectories), len(turns)) == (3, 6)


def test_turn_shows_feedback_and_reward(page):
    assert "turn 2: correct." in page and "reward <b>2.300</b>" in page


def test_diff_marks_added_and_removed_lines():
    diff = _parse(diff_html(KERNEL_V1, KERNEL_V2))
    classes = [a.get("class") for tag, a in diff.tags if tag == "span"]
    assert (classes.count("add"), classes.count("del")) == (2, 1)


def test_diff_of_the_first_kernel_says_so():
    assert "first kernel" in diff_html(None, KERNEL_V1)


def test_trajectory_table_links_to_each_trajectory(page):
    tags = _parse(page).tags
    ids = {a["id"] for tag, a in tags if tag == "details" and "id" in a}
    links = {a["href"][1:] for tag, a in tags if tag == "a" and a.get("href", "").startswith("#")}
    assert links == ids


def test_detail_limit_keeps_every_trajectory_in_the_table(tmp_path):
    page = render_html(read_inputs(_write_inputs(tmp_path)), max_trajectories=1)
    tags = _parse(page).tags
    rows = [a for tag, a in tags if tag == "a" and a.get("href", "").startswith("#traj-")]
    drawn = [a for tag, a in tags if tag == "details" and a.get("class") == "trajectory"]
    assert (len(rows), len(drawn), "2 more trajectories" in page) == (3, 1, True)


def test_empty_input_is_a_page_that_says_so(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert "No results and no trajectories" in render_html(read_inputs([empty]))


# -- a real browser ----------------------------------------------------------------------------------

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
               *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=90)


def png_size_and_distinct_bytes(path: Path) -> tuple[int, int, int]:
    """(width, height, distinct byte values of the decompressed scanlines) of a PNG, with the stdlib only.
    A blank page compresses to a handful of distinct values (filter bytes and one colour); text and charts
    give dozens."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    chunks, offset = [], 8
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        if kind == b"IDAT":
            chunks.append(data[offset + 8:offset + 8 + length])
        offset += 12 + length
    return width, height, len(set(zlib.decompress(b"".join(chunks))))


@pytest.mark.skipif(_chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_page_renders_in_headless_chromium_without_script_errors(tmp_path):
    out = write_html(tmp_path / "report.html", read_inputs(_write_inputs(tmp_path)), title="cudaperf sample")
    url = out.resolve().as_uri()
    dom = _run_chromium(_chromium(), tmp_path / "profile-dom", "--dump-dom", url)
    shot = tmp_path / "report.png"
    _run_chromium(_chromium(), tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1400,4200",
                  "--hide-scrollbars", url)
    root = next(a for tag, a in _parse(dom.stdout).tags if tag == "html")
    save = os.environ.get("REPORT_HTML_SAVE_DIR")
    if save:
        Path(save).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(save) / "report.html")
        shutil.copy(shot, Path(save) / "report.png")
    assert (root.get("data-report-ready"), root.get("data-js-error"), root.get("data-trajectories")) == (
        "1", None, "3")
    assert "Uncaught" not in dom.stderr
    width, height, distinct = png_size_and_distinct_bytes(shot)
    assert (width, height, distinct > 40) == (1400, 4200, True)
