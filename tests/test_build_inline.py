"""The inline builder: recording load_inline calls (CPU torch) and building them with the fast pipeline."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from cudagym.judge.build import BuildCache, build
from cudagym.judge.build.inline import call_key, normalize_call
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import BuildResult, BuildStatus, Severity, to_dict
from cudagym.solution import Solution, get_format
from cudagym.templates import example_task

pytestmark = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(), reason="nvcc not installed")

TASK = example_task("test")

EXAMPLE = get_format("inline").example_files()["model_new.py"]
SLOW_PROTOCOL = DEFAULT_PROTOCOL.with_changes(id="test-inline", build_timeout_s=1800)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> BuildCache:
    return BuildCache(tmp_path_factory.getbasetemp() / "cudagym-build-cache")


@pytest.fixture(scope="module")
def example_build(cache: BuildCache) -> BuildResult:
    return build(TASK, Solution("inline", {"model_new.py": EXAMPLE}), SLOW_PROTOCOL, cache)


def test_normalize_call_is_canonical() -> None:
    a = normalize_call({"name": "m", "cpp_sources": "int f();", "functions": ["f"], "extra_cflags": [""],
                        "extra_cuda_cflags": None})
    b = normalize_call({"name": "m", "cpp_sources": ["int f();"], "functions": {"f": "f"}})
    assert a == b and call_key(a) == call_key(b)
    assert a["cuda_sources"] == [] and a["extra_cflags"] == [] and a["is_python_module"] is True
    assert call_key(a) != call_key({**a, "extra_cuda_cflags": ["-O3"]})


def test_recorder_invalid_without_a_call(cache: BuildCache) -> None:
    src = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    result = build(TASK, Solution("inline", {"model_new.py": src}), DEFAULT_PROTOCOL, cache)
    assert result.status is BuildStatus.INVALID and "never called" in result.message


def test_recorder_reports_an_import_error(cache: BuildCache) -> None:
    src = "import torch\nraise ValueError('broken at import')\n"
    result = build(TASK, Solution("inline", {"model_new.py": src}), DEFAULT_PROTOCOL, cache)
    assert result.status is BuildStatus.INVALID and "broken at import" in result.message


def test_recorder_timeout(cache: BuildCache) -> None:
    src = "import time\nwhile True:\n    time.sleep(0.1)\n"
    protocol = DEFAULT_PROTOCOL.with_changes(id="test-rec-timeout", build_timeout_s=3)
    result = build(TASK, Solution("inline", {"model_new.py": src}), protocol, cache)
    assert result.status is BuildStatus.TIMEOUT and "record" in result.message


def test_recorder_runs_candidate_code_without_secrets_or_the_parents_home(
        cache: BuildCache, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    parent_home = tmp_path / "parent-home"
    parent_home.mkdir()
    monkeypatch.setenv("HOME", str(parent_home))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-parent-secret")
    monkeypatch.setenv("HF_TOKEN", "hf-parent-secret")
    # model_new.py reports what it saw by raising before any load_inline call (INVALID carries the traceback)
    src = textwrap.dedent("""
        import json, os
        with open("/proc/self/environ", "rb") as fh:
            environ_file = fh.read().decode(errors="replace")
        seen = {"aws": os.environ.get("AWS_SECRET_ACCESS_KEY"), "hf": os.environ.get("HF_TOKEN"),
                "home": os.environ.get("HOME"), "expanduser": os.path.expanduser("~"),
                "home_is_dir": os.path.isdir(os.environ.get("HOME", "")),
                "tmpdir": os.environ.get("TMPDIR"),
                "secret_in_proc_environ": "parent-secret" in environ_file}
        raise RuntimeError("SEEN " + json.dumps(seen))
    """)
    result = build(TASK, Solution("inline", {"model_new.py": src}), DEFAULT_PROTOCOL, cache)
    assert result.status is BuildStatus.INVALID and "never called" in result.message, result.message
    line = next(ln for ln in result.message.splitlines() if ln.startswith("RuntimeError: SEEN "))
    seen = json.loads(line.removeprefix("RuntimeError: SEEN "))
    assert seen["aws"] is None and seen["hf"] is None and not seen["secret_in_proc_environ"]
    assert seen["home"] and seen["home"] != str(parent_home) and seen["expanduser"] == seen["home"]
    assert seen["home_is_dir"] and seen["tmpdir"] and not seen["tmpdir"].startswith(str(parent_home))
    assert "parent-secret" not in result.message + result.log


def test_example_builds_with_the_fast_pipeline(example_build: BuildResult, cache: BuildCache) -> None:
    result = example_build
    assert result.status is BuildStatus.OK, result.message + result.log[-3000:]
    manifest = json.loads(Path(result.artifact_path).read_text())
    (call,) = manifest["calls"]
    assert call["name"] == "relu" and call["module"].startswith("cudagym_inl_")
    so = (Path(result.artifact_path).parent / call["so"]).resolve()
    symbols = subprocess.run(["readelf", "--dyn-syms", "-W", str(so)], capture_output=True, text=True,
                             check=True).stdout
    assert f"PyInit_{call['module']}" in symbols
    assert any("relu_kernel" in k.kernel and k.registers > 0 for k in result.kernels)
    again = build(TASK, Solution("inline", {"model_new.py": EXAMPLE}), DEFAULT_PROTOCOL, cache)
    assert again.ok and again.cached and again.artifact_path == result.artifact_path


def test_cuda_error_maps_to_model_new_line(example_build: BuildResult, cache: BuildCache) -> None:
    bad = EXAMPLE.replace("if (i < n) y[i] = fmaxf(x[i], 0.0f);", "if (i < n) y[i] = fmaxf(x[i], 0.0f)")
    line = next(i for i, t in enumerate(bad.splitlines(), 1) if "y[i] = fmaxf" in t)
    result = build(TASK, Solution("inline", {"model_new.py": bad}), SLOW_PROTOCOL, cache)
    assert result.status is BuildStatus.COMPILE_ERROR
    err = next(d for d in result.diagnostics if d.severity is Severity.ERROR)
    assert err.file == "model_new.py" and err.line in (line, line + 1), err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_inline_loader_serves_the_prebuilt_module(example_build: BuildResult, tmp_path: Path) -> None:
    assert example_build.ok, example_build.message
    (tmp_path / "model_new.py").write_text(EXAMPLE)
    script = textwrap.dedent("""
        import json, sys, time, torch
        from cudagym.judge.build.inline import install_inline_loader
        from cudagym.judge.records import BuildResult, from_dict
        install_inline_loader(from_dict(BuildResult, json.loads(sys.stdin.read())))
        start = time.monotonic()
        import model_new
        assert time.monotonic() - start < 30, "import compiled instead of loading"
        x = torch.randn(1 << 20, device="cuda")
        y = model_new.ModelNew()(x)
        torch.cuda.synchronize()
        assert torch.equal(y, torch.relu(x))
        from torch.utils.cpp_extension import load_inline
        try:
            load_inline(name="other", cpp_sources="int f();", functions=["f"])
        except RuntimeError as exc:
            assert "was not pre-built" in str(exc)
        else:
            raise AssertionError("an unrecorded call was served")
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], input=json.dumps(to_dict(example_build)), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
