"""compile() reports a model_new.py that is not Python, lacks ModelNew(nn.Module) or imports what its format
forbids, with the line, in every format, without running the file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cudagym.judge.build import BuildCache, build
from cudagym.judge.build.pycheck import check_model_new
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import BuildStatus, Severity
from cudagym.observation import render_build
from cudagym.solution import FORMATS, Solution, get_format
from cudagym.templates import example_task

HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()
TASK = example_task("test")

GOOD_CLASS = "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"


def errors(source: str, fmt: str = "extension") -> list[tuple[int, str]]:
    return [(d.line, d.message) for d in check_model_new(source, fmt) if d.severity is Severity.ERROR]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_shipped_example_passes_the_checks(fmt: str) -> None:
    assert check_model_new(get_format(fmt).example_files()["model_new.py"], fmt) == ()


def test_text_that_is_not_python_is_an_error_at_its_line() -> None:
    ((line, message),) = errors("import torch\n\nthis is not python at all (((\n")
    assert line == 3 and "does not compile as Python" in message and "SyntaxError" in message


def test_an_error_only_the_bytecode_compiler_sees_is_reported() -> None:
    ((line, message),) = errors(GOOD_CLASS + "return 1\n")
    assert line == GOOD_CLASS.count("\n") + 1 and "'return' outside function" in message


def test_a_nul_byte_is_an_error_not_a_crash() -> None:
    ((_, message),) = errors("x = 1\x00\n")
    assert "does not compile as Python" in message


def test_a_file_without_modelnew_says_so() -> None:
    ((_, message),) = errors("import torch\n\nclass Model2(torch.nn.Module):\n    pass\n")
    assert "defines no module-level `class ModelNew(nn.Module)`" in message


def test_modelnew_that_is_not_a_module_is_an_error_at_the_class() -> None:
    ((line, message),) = errors("import torch\n\n\nclass ModelNew:\n    pass\n")
    assert line == 4 and "does not subclass torch.nn.Module" in message
    ((line, _),) = errors("class Base(object):\n    pass\n\nclass ModelNew(Base):\n    pass\n")
    assert line == 4


@pytest.mark.parametrize("source", [
    "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n",
    "from torch import nn\nclass ModelNew(nn.Module):\n    pass\n",
    "from torch.nn import Module as M\nclass Base(M):\n    pass\nclass ModelNew(Base):\n    pass\n",
    "import torch.nn as nn\nif True:\n    class ModelNew(nn.Sequential):\n        pass\n",
    "from mylib import Base\nclass ModelNew(Base):\n    pass\n",  # cannot be told without running it
    "ModelNew = type('ModelNew', (), {})\n",
])
def test_module_subclasses_and_what_cannot_be_told_statically_pass(source: str) -> None:
    assert errors(source) == []


@pytest.mark.parametrize(("fmt", "line", "banned"), [
    ("extension", "from cudagym import runtime", "cudagym.runtime"),
    ("extension", "from torch.utils.cpp_extension import load_inline", "torch.utils.cpp_extension"),
    ("raw", "import cuda_extension", "cuda_extension"),
    ("raw", "from torch.utils import cpp_extension", "torch.utils.cpp_extension"),
    ("inline", "import cuda_extension", "cuda_extension"),
    ("inline", "import cudagym.runtime as rt", "cudagym.runtime"),
])
def test_imports_the_format_forbids_are_errors_at_their_line(fmt: str, line: str, banned: str) -> None:
    source = f"import torch\n{line}\n" + GOOD_CLASS
    ((at, message),) = errors(source, fmt)
    assert at == 2 and f"imports {banned}, which the {fmt} format does not load" in message


def test_rule_imports_are_left_to_the_guards() -> None:
    assert errors("from model import Model\nimport cuda_extension\n" + GOOD_CLASS) == []


def test_syntax_warnings_are_warnings() -> None:
    found = check_model_new(GOOD_CLASS + 'pattern = "\\d+"\n', "extension")
    assert [d.severity for d in found] == [Severity.WARNING] and "invalid escape sequence" in found[0].message


def test_the_file_is_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    source = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\nclass ModelNew:\n    pass\n"
    assert errors(source)
    assert not marker.exists()


def test_inline_build_of_broken_python_is_invalid_and_builds_nothing(tmp_path: Path) -> None:
    result = build(TASK, Solution("inline", {"model_new.py": "this is not python at all (((\n"}),
                   DEFAULT_PROTOCOL, BuildCache(tmp_path / "cache"))
    assert result.status is BuildStatus.INVALID and not result.artifact_path
    text = render_build(result)
    assert "model_new.py:1" in text and "does not compile as Python" in text


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")
@pytest.mark.parametrize("fmt", ["raw", "extension"])
def test_kernels_that_build_do_not_hide_a_broken_model_new(fmt: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAGYM_RAW_BACKEND", "nvcc")
    files = {**get_format(fmt).example_files(), "model_new.py": "import torch\n\ndef forward(x):\n    return x\n"}
    result = build(TASK, Solution(fmt, files), DEFAULT_PROTOCOL, BuildCache(tmp_path / "cache"))
    assert result.status is BuildStatus.INVALID, render_build(result)
    text = render_build(result)
    assert "defines no module-level `class ModelNew(nn.Module)`" in text and "model_new.py" in text


def test_inline_recording_still_runs_when_only_modelnew_is_missing(tmp_path: Path) -> None:
    src = "import torch\nraise ValueError('broken at import')\n"
    result = build(TASK, Solution("inline", {"model_new.py": src}), DEFAULT_PROTOCOL, BuildCache(tmp_path / "c"))
    assert result.status is BuildStatus.INVALID and "broken at import" in result.message  # the recorder's verdict
    assert "defines no module-level `class ModelNew(nn.Module)`" in render_build(result)  # and the check's
