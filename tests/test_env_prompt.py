"""The reset prompt: sections, the judge's GPU and protocol, precision, thresholds, the worked example."""

from __future__ import annotations

import pytest

from cudagym.judge.protocol import get_protocol
from cudagym.judge.records import Hardware
from cudagym.prompt import EpisodeLimits, build_prompt
from cudagym.reward import RewardConfig
from cudagym.solution import SolutionFormat, get_format
from cudagym.task import make_task
from cudagym.toolcalls import TOOL_NAMES, signature

SOURCE = (
    "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
    "        return torch.relu(x)\n\n\ndef get_inputs():\n    return [torch.rand(4, 4)]\n\n\n"
    "def get_init_inputs():\n    return []\n"
)
TASK = make_task(SOURCE, id="L1/19_ReLU", suite="kernelbench", level=1, name="19_ReLU", origin="test")
H200 = Hardware(gpu="NVIDIA H200", compute_capability="9.0")
LIMITS = EpisodeLimits(max_turns=200, token_budget=131072, token_counter="tiktoken:o200k_base")


def prompt(**overrides: object) -> str:
    args: dict[str, object] = {"fmt": get_format("extension"), "protocol": get_protocol(None), "hardware": H200,
                               "reward": RewardConfig(), "limits": LIMITS}
    args.update(overrides)
    return build_prompt(TASK, **args)  # type: ignore[arg-type]


def test_sections_in_order_and_the_reference() -> None:
    text = prompt()
    heads, fenced = [], False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        if line.startswith("#") and not fenced:
            heads.append(line)
    assert heads == ["# Task: make `19_ReLU` fast in CUDA", "## Rules", "## Tools", "## Solution format: extension",
                     "## How it is judged", "## Limits", "## Reference: `model.py`"]
    assert text.rstrip().endswith(f"```python\n{SOURCE.rstrip()}\n```")
    for name in TOOL_NAMES:
        assert f"`{signature(name)}`" in text
    assert "<tool_call>" in text and '"arguments"' in text


def test_gpu_protocol_and_precision_are_stated() -> None:
    text = prompt()
    assert "GPU: NVIDIA H200 (compute capability 9.0)." in text
    assert "Protocol `cudagym-v6`" in text
    assert "95% interval too" not in text  # the reward's word, not the protocol's: RewardConfig() does not ask it
    asked = prompt(reward=RewardConfig(interval=True))
    assert "Each step up must hold beyond the timing's own 95% interval too" in asked
    assert "x4" in text and "unpublished seed" in text
    assert "5 input sets from seeds (42, 43, 44, 45, 46)" in text
    assert "|out - ref| <= 0.0001 + 0.0001 * |ref|" in text
    assert "Baselines are plain fp32, TF32 off" in text
    assert "CUDA events around forward()" in text and "L2 cache flushed" in text
    agent = prompt(protocol=get_protocol("cuda-agent"))
    assert "|out - ref| <= 0.01 + 0.01 * |ref|" in agent and "10 timed runs" in agent
    assert "kernels' device time under the profiler" in agent
    tf32 = prompt(protocol=get_protocol(None).with_changes(id="tf32", baseline_precision="tf32"))
    assert "TF32 is allowed" in tf32 and "TF32 off" not in tf32
    assert "timed at their device work" in text and "(up to 2000 us)" in text
    assert "is queued whole before the clock starts, so it is timed at its device work too" in text
    assert "that wait and the host work after it are timed" in text and "gives yours a 100 us cover" in text
    assert "kept busy" not in prompt(protocol=get_protocol("cudagym-v0"))
    fixed = prompt(protocol=get_protocol("cudagym-v0").with_changes(id="covered", launch_cover_us=100.0))
    assert "the GPU is kept busy 100 us before the start event" in fixed


def test_no_gpu_is_said_plainly() -> None:
    text = prompt(hardware=Hardware())
    assert "No GPU is available to this judge: `compile` runs for real" in text


def test_reward_text_follows_the_config() -> None:
    assert "more than 5% faster than eager PyTorch; 3 if also more than 5% faster than torch.compile" in prompt()
    custom = prompt(reward=RewardConfig(threshold_vs_eager=0.1, threshold_vs_compile=0.2, scoring="best"))
    assert "more than 10% faster than eager" in custom and "more than 20% faster than torch.compile" in custom
    assert "best state you evaluated" in custom
    assert "torch.compile time / your time" in prompt(reward=RewardConfig(mode="speedup"))


def test_limits_and_protected_files() -> None:
    text = prompt(limits=EpisodeLimits(50, 1000, "cudagym:code-bpe-16k"))
    assert "after 50 tool calls or 1000 tokens" in text and "counted with cudagym:code-bpe-16k" in text
    assert "`binding.cpp`" in text and "`binding_registry.h`" in text
    inline = prompt(fmt=get_format("inline"))
    assert "## Solution format: inline" in inline and "binding.cpp" not in inline


def test_the_worked_example_never_computes_the_tasks_operator() -> None:
    text = prompt()  # the task is ReLU: the ReLU example would be its answer
    assert "A worked example for another task (the absolute value, y = |x|;" in text
    assert "`kernels/abs.cu`:\n```cuda\n" in text and "cuda_extension.abs_forward" in text
    assert "relu_forward" not in text and "fmaxf" not in text
    sigmoid = make_task(SOURCE.replace("torch.relu", "torch.sigmoid"), id="L1/21_Sigmoid", suite="kernelbench",
                        level=1, name="21_Sigmoid", origin="test")
    args = {"fmt": get_format("raw"), "protocol": get_protocol(None), "hardware": H200, "reward": RewardConfig(),
            "limits": LIMITS}
    assert "(ReLU, y = max(x, 0);" in build_prompt(sigmoid, **args)  # type: ignore[arg-type]


def test_no_example_when_every_one_computes_an_operator_of_the_task() -> None:
    every = make_task(SOURCE.replace("torch.relu(x)", "torch.flip(torch.abs(torch.relu(x)), dims=[0])"),
                      id="t/every", suite="t", level=1, name="every", origin="test")
    args = {"fmt": get_format("extension"), "protocol": get_protocol(None), "hardware": H200,
            "reward": RewardConfig(), "limits": LIMITS}
    text = build_prompt(every, **args)  # type: ignore[arg-type]
    assert "(No worked example is shown: every shipped example computes an operator this task uses.)" in text


def test_missing_worked_example_is_tolerated(monkeypatch: pytest.MonkeyPatch) -> None:
    def absent(self: SolutionFormat, example: str = "relu") -> dict[str, str]:
        raise FileNotFoundError("no example folder")

    monkeypatch.setattr(SolutionFormat, "example_files", absent)
    assert "(No worked example is shipped for this format.)" in prompt()


def test_deterministic_and_free_of_paths() -> None:
    assert prompt() == prompt()
    assert "/tmp" not in prompt()
