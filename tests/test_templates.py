"""The worked examples: each one solves its task in every format, and the prompt picks one whose operators the
task does not use."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cudagym.judge.build import BuildCache, build
from cudagym.judge.build.pycheck import check_model_new
from cudagym.judge.interface import EvalMode
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import BuildStatus, EvalStatus
from cudagym.solution import FORMATS, Solution, get_format
from cudagym.task import make_task
from cudagym.templates import EXAMPLES, example_task, pick_example, task_operators

HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()
KERNELBENCH = Path(__file__).resolve().parent.parent / ".data/kb"


def task_of(forward: str, *, ops: list[str] | None = None):
    source = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Model(nn.Module):\n"
              f"    def forward(self, x):\n        return {forward}\n\n\ndef get_inputs():\n"
              "    return [torch.randn(8)]\n\n\ndef get_init_inputs():\n    return []\n")
    return make_task(source, id="t/x", suite="t", level=1, name="x", origin="test",
                     metadata={"ops": ops} if ops is not None else None)


@pytest.mark.parametrize("example", [e.name for e in EXAMPLES])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_example_has_every_format_and_passes_the_python_checks(example: str, fmt: str) -> None:
    files = get_format(fmt).example_files(example)
    assert "model_new.py" in files and Solution(fmt, files).files  # only files the format allows
    assert check_model_new(files["model_new.py"], fmt) == ()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_each_example_task_uses_its_own_operator_and_no_other_examples(example) -> None:
    used = task_operators(example_task("test", example.name))
    assert used & example.operators
    assert not any(used & other.operators for other in EXAMPLES if other is not example)


@pytest.mark.parametrize(("forward", "ops", "expected"), [
    ("torch.relu(x)", None, "abs"),
    ("nn.ReLU()(x)", None, "abs"),
    ("x.clamp(min=0.0)", None, "abs"),
    ("F.leaky_relu(torch.abs(x))", None, "flip"),
    ("torch.sigmoid(x)", ["ReLU"], "abs"),  # an Ops-6K row's ops column counts too
    ("torch.abs(torch.relu(x))[::-1]", None, None),
    ("torch.sigmoid(x)", None, "relu"),
])
def test_pick_example_skips_every_example_whose_operator_the_task_uses(forward: str, ops, expected) -> None:
    picked = pick_example(task_of(forward, ops=ops))
    assert (picked.name if picked else None) == expected


@pytest.mark.skipif(not (KERNELBENCH / "KernelBench/level1").is_dir(), reason="no KernelBench checkout in .data/kb")
def test_no_kernelbench_task_gets_an_example_of_its_own_operator() -> None:
    from cudagym.sources.kernelbench import KernelBenchSource

    tasks = KernelBenchSource(None, root=KERNELBENCH).tasks()
    picks = {t.id: pick_example(t) for t in tasks}
    assert all(picks[t.id] is not None and not (picks[t.id].operators & task_operators(t)) for t in tasks)
    assert picks["L1/19_ReLU"].name != "relu" and picks["L1/20_LeakyReLU"].name != "relu"


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")
@pytest.mark.parametrize("example", [e.name for e in EXAMPLES])
def test_every_raw_example_builds(example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAGYM_RAW_BACKEND", "nvcc")
    result = build(example_task("test", example), Solution("raw", get_format("raw").example_files(example)),
                   DEFAULT_PROTOCOL, BuildCache(tmp_path / "cache"))
    assert result.status is BuildStatus.OK, result.message + result.log


@pytest.mark.slow
@pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")
@pytest.mark.parametrize("example", [e.name for e in EXAMPLES])
@pytest.mark.parametrize("fmt", ["extension", "inline"])
def test_every_extension_and_inline_example_builds(example: str, fmt: str, tmp_path: Path) -> None:
    # a cold torch build on a loaded CI host can pass the default 180 s limit; these check the code, not speed
    patient = DEFAULT_PROTOCOL.with_changes(id="test-patient-build", build_timeout_s=1800)
    result = build(example_task("test", example), Solution(fmt, get_format(fmt).example_files(example)),
                   patient, BuildCache(tmp_path / "cache"))
    assert result.status is BuildStatus.OK, result.message + result.log


@pytest.fixture(scope="module")
def gpu_judge(tmp_path_factory: pytest.TempPathFactory):
    from cudagym.judge.local import LocalJudge

    with LocalJudge(cache_dir=tmp_path_factory.mktemp("judge")) as judge:  # one judge: workers start once
        yield judge


@pytest.mark.gpu
@pytest.mark.parametrize("example", [e.name for e in EXAMPLES])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_example_solves_its_task_on_the_gpu(example: str, fmt: str, gpu_judge) -> None:
    solution = Solution(fmt, get_format(fmt).example_files(example))
    result = gpu_judge.evaluate(example_task("test", example), solution, EvalMode.VERIFY)
    assert result.status is EvalStatus.OK, result.message
