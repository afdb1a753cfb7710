"""The build path trusts nothing the candidate controls: attacks through the env, the judge and the real builds.

Each test is a red-team finding, tried the way an agent would: a ``load_inline`` name that climbs out of the
judge's build folder, flags that name host folders, a forged or hostile recorder file, a recorder that fills
the build cache, and build failures dressed up as the judge's own (``tool_error``: reward 0) instead of the
candidate's (reward -1). They run on this CPU-only host: the compilers need no GPU, and a submit whose build
fails never reaches a GPU worker (the judge is told of one GPU so that it takes the scoring path).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

import cudagym  # noqa: F401  (registers the env ids)
from cudagym.judge.build import build, default_cache
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import BuildResult, BuildStatus
from cudagym.solution import Solution
from cudagym.templates import example_task

pytestmark = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(), reason="nvcc not installed")

TASK = example_task("test")
PROTOCOL = DEFAULT_PROTOCOL.with_changes(id="test-build-trust", build_timeout_s=600)
SECRET = "cudagym-secret-" + uuid.uuid4().hex
# two placeholders inside one path: what the scrubber used to make of a path holding a known prefix twice
_GARBLED = re.compile(r"<(?:tmp|cache|home|workspace)>[^\s'\"<>]*<(?:tmp|cache|home|workspace)>")


def _model_new(load_inline_args: str, *, before: str = "") -> str:
    """A model_new.py whose import makes one load_inline call with ``load_inline_args``."""
    return textwrap.dedent(f"""
        import torch, torch.nn as nn
        from torch.utils.cpp_extension import load_inline
        {before}
        mod = load_inline({load_inline_args})
        class ModelNew(nn.Module):
            def forward(self, x):
                return x
    """)


def _inline(source: str) -> BuildResult:
    return build(TASK, Solution("inline", {"model_new.py": source}), PROTOCOL, default_cache())


def _text(result: BuildResult) -> str:
    """Everything of a build result the agent reads."""
    return "\n".join([result.message, result.log, *(f"{d.file}: {d.message}" for d in result.diagnostics)])


@pytest.fixture
def scoring_judge() -> Iterator[object]:
    """A judge that believes in one GPU: a submit is scored; a build failure never reaches a worker."""
    from cudagym.judge.gpus import GpuProbe
    from cudagym.judge.local import LocalJudge
    from cudagym.judge.records import Hardware

    with LocalJudge(gpus=GpuProbe(("0",), Hardware(gpu="Test GPU 80GB", compute_capability="9.0"))) as judge:
        yield judge


def _submit(judge: object, fmt: str, files: dict[str, str], tmp_path: Path) -> tuple[str, float, dict]:
    """Write ``files`` through the env's tools and submit them; the observation, reward and info."""
    (tmp_path / "ws").mkdir()
    env = gym.make("CudaKernel-Bundled-v0", solution_format=fmt, workspace_dir=str(tmp_path / "ws"), judge=judge)
    try:
        env.reset(seed=0, options={"task": "bundled/L1/01_Swish"})
        for path, content in files.items():
            env.step(json.dumps({"name": "write_file", "arguments": {"path": path, "content": content}}))
        obs, reward, _, _, info = env.step(json.dumps({"name": "submit", "arguments": {}}))
        return obs, float(reward), info
    finally:
        env.close()


# ------------------------------------------------------------------------------------------------------------
# 1. load_inline(name=...) builds paths in the judge's own process
# ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["/../../../../../../../../../..{target}", "../../../../../../../../../..{target}",
                                  "a/b", "m.so", "9lives", ""])
def test_an_inline_name_that_is_no_identifier_is_the_candidates_failure_and_writes_nothing(
        tmp_path: Path, name: str) -> None:
    target = tmp_path / "planted"
    source = _model_new(f"name={name.format(target=target)!r}, cpp_sources='// written by the judge?', "
                        "cuda_sources='// and this', functions=None, no_implicit_headers=True")
    result = _inline(source)
    assert result.status is BuildStatus.INVALID, result.message
    assert "name: expected a valid Python identifier" in result.message and "nothing was compiled" in result.message
    assert not target.exists() and not list(tmp_path.iterdir())


def test_a_traversing_name_is_scored_minus_one(scoring_judge, tmp_path: Path) -> None:
    target = tmp_path / "planted"
    source = _model_new(f"name='/../../../../../../../../../..{target}', cpp_sources='int x = 1;', "
                        "functions=None, no_implicit_headers=True")
    obs, reward, info = _submit(scoring_judge, "inline", {"model_new.py": source}, tmp_path)
    assert reward == -1.0 and info["evaluated"], obs
    assert "valid Python identifier" in obs and not target.exists()


def test_build_paths_stay_inside_the_stage_even_if_a_name_got_past_the_rules(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # defence in depth: with the name rule switched off (a judge bug), the paths built from it are still checked
    from cudagym.judge.build import inline_calls

    monkeypatch.setattr(inline_calls, "_NAME", re.compile(r".*", re.S))
    target = tmp_path / "planted"
    source = _model_new(f"name='/../../../../../../../../../..{target}', cpp_sources='int x = 1;', "
                        "functions=None, no_implicit_headers=True")
    result = _inline(source)
    assert result.status is BuildStatus.TOOL_ERROR and "leaves it" in result.message, result.message
    assert not target.exists()


# ------------------------------------------------------------------------------------------------------------
# 2. paths in the agent's flags never widen what a compiler sees
# ------------------------------------------------------------------------------------------------------------

@pytest.fixture
def host_secret(tmp_path: Path) -> Path:
    folder = tmp_path / "host"
    folder.mkdir()
    (folder / "creds").write_text(f"password = {SECRET}\n")
    return folder / "creds"


@pytest.mark.parametrize("flags", ["extra_cflags=['-DHOSTDIR={folder}']",
                                   "extra_cflags=['-Wall', '-DA={folder},{file}']",
                                   "extra_cuda_cflags=['-DHOSTDIR={folder}']"])
def test_a_macro_naming_a_host_folder_binds_nothing(host_secret: Path, flags: str) -> None:
    asm = f'asm(".include \\"{host_secret}\\"");'
    cuda = "cuda_sources='__global__ void k() {}', " if "cuda" in flags else ""
    source = _model_new(f"name='leak', cpp_sources={asm!r}, {cuda}functions=None, no_implicit_headers=True, "
                        + flags.format(folder=host_secret.parent, file=host_secret))
    result = _inline(source)
    assert result.status is BuildStatus.COMPILE_ERROR, result.message
    text = _text(result)
    assert SECRET not in text and "No such file or directory" in text
    assert not _GARBLED.search(text) and "cudagym-tool-" not in text, text


def test_the_judges_environment_is_out_of_reach_through_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAGYM_TEST_API_TOKEN", SECRET)  # in the judge's own environment
    asm = f'asm(".include \\"/proc/{os.getpid()}/environ\\"");'
    source = _model_new(f"name='leak', cpp_sources={asm!r}, functions=None, no_implicit_headers=True, "
                        "extra_cflags=['-DLEAK=/proc']")
    result = _inline(source)
    assert result.status is BuildStatus.COMPILE_ERROR and SECRET not in _text(result), result.message


@pytest.mark.parametrize("flags, named", [
    ("extra_include_paths=['=/etc']", "'=/etc'"),
    ("extra_include_paths=['$SYSROOT/etc']", "'$SYSROOT/etc'"),
    ("extra_cflags=['-I=/etc']", "'=/etc'"),
    ("extra_cuda_cflags=['-Xcompiler', '-I=/etc']", "'=/etc'"),
    ("extra_cuda_cflags=['-I', '/etc']", "'-I' without a folder"),
    ("extra_include_paths=['inc/../../etc']", "'inc/../../etc'"),
])
def test_sysroot_and_outside_include_folders_are_refused_and_named(flags: str, named: str) -> None:
    result = _inline(_model_new(f"name='inc', cpp_sources='int f();', functions=None, {flags}"))
    assert result.status is BuildStatus.INVALID, result.message
    assert "is refused" in result.message and named in result.message and "nothing was compiled" in result.message


# ------------------------------------------------------------------------------------------------------------
# 3. what fails because of the candidate is the candidate's failure (-1), never the judge's (0)
# ------------------------------------------------------------------------------------------------------------

def test_functions_none_without_a_module_is_a_compile_error_scored_minus_one(scoring_judge, tmp_path: Path) -> None:
    source = _model_new("name='m', cpp_sources='int f() { return 1; }', functions=None")
    obs, reward, info = _submit(scoring_judge, "inline", {"model_new.py": source}, tmp_path)
    assert reward == -1.0 and info["evaluated"], obs
    assert info["last_eval"]["build"]["status"] == "compile_error" and "PYBIND11_MODULE" in obs


def test_a_library_without_a_python_module_links(tmp_path: Path) -> None:
    # is_python_module=False registers operators only: the judge names no module init to link against
    result = _inline(_model_new("name='ops', cpp_sources='int f() { return 1; }', functions=None, "
                                "no_implicit_headers=True, is_python_module=False"))
    assert result.status is BuildStatus.OK, result.message + result.log[-2000:]


def test_a_toolchain_that_cannot_link_at_all_is_still_the_judges_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    # the other side of the rule: a host whose linker fails on an empty extension is not the candidate's fault
    from cudagym.judge.build import torch_ext

    original = torch_ext.ExtToolchain.link_flags
    monkeypatch.setattr(torch_ext.ExtToolchain, "link_flags",
                        lambda self, extra=(): (*original(self, extra), "-lcudagym_no_such_library"))
    monkeypatch.setattr(torch_ext, "_links_here", {})
    result = _inline(_model_new("name='ops', cpp_sources='int f() { return 1; }', functions=None, "
                                "no_implicit_headers=True, is_python_module=False"))
    assert result.status is BuildStatus.TOOL_ERROR, result.message
    assert "cannot link an empty torch extension" in result.message


_FORGERIES = {
    "missing keys": 'json.dump({"calls": [{"name": "m", "unsupported": ""}], "error": ""}, open(OUT, "w"))',
    "extra key": 'json.dump({"calls": [], "error": "", "problem": ""}, open(OUT, "w"))',
    "wrong type": 'json.dump({"calls": "m", "error": ""}, open(OUT, "w"))',
    "name of another type": 'json.dump({"calls": [dict(CALL, name=5)], "error": ""}, open(OUT, "w"))',
    "traversing name": 'json.dump({"calls": [dict(CALL, name="../../x")], "error": ""}, open(OUT, "w"))',
    "flag of another type": 'json.dump({"calls": [dict(CALL, extra_cflags=[1])], "error": ""}, open(OUT, "w"))',
    "not JSON": 'open(OUT, "w").write("calls: m")',
    "deep nesting": 'open(OUT, "w").write("[" * 200000)',
    "too large": 'open(OUT, "w").write(" " * (17 << 20))',
    "link to a host file": 'os.symlink("/etc/passwd", OUT)',
    "FIFO": "os.mkfifo(OUT)",
    "folder": "os.mkdir(OUT)",
}


def _forger(action: str) -> str:
    """A model_new.py that writes its own record instead of calling load_inline, then exits at once."""
    call = {"name": "m", "cpp_sources": ["int f();"], "cuda_sources": [], "functions": None,
            "with_pytorch_error_handling": True, "no_implicit_headers": False, "is_python_module": True,
            "unsupported": "", "extra_cflags": [], "extra_cuda_cflags": [], "extra_ldflags": [],
            "extra_include_paths": []}
    return f"import json, os, sys\nOUT = sys.argv[2]\nCALL = {call!r}\n{action}\nos._exit(0)\n"


@pytest.mark.parametrize("forgery", sorted(_FORGERIES))
def test_a_forged_record_is_the_candidates_failure(forgery: str) -> None:
    result = _inline(_forger(_FORGERIES[forgery]))
    assert result.status is BuildStatus.INVALID, (forgery, result.status, result.message)
    assert "break the judge's rules" in result.message and "nothing was compiled" in result.message
    assert "root:x:0" not in _text(result)


def test_a_forged_record_is_scored_minus_one(scoring_judge, tmp_path: Path) -> None:
    obs, reward, info = _submit(scoring_judge, "inline", {"model_new.py": _forger(_FORGERIES["missing keys"])},
                                tmp_path)
    assert reward == -1.0 and info["evaluated"] and info["last_eval"]["build"]["status"] == "invalid", obs


def test_a_duplicate_symbol_across_kernels_is_a_located_compile_error_scored_minus_one(
        scoring_judge, tmp_path: Path) -> None:
    import cudagym.envs

    solution = Path(cudagym.envs.__file__).parent / "bundled" / "solutions" / "L1" / "01_Swish"
    files = {str(p.relative_to(solution)): p.read_text() for p in sorted(solution.rglob("*")) if p.is_file()}
    files["kernels/dup.cu"] = "int duplicated_symbol = 1;\n"
    files["kernels/dup2.cu"] = "int duplicated_symbol = 2;\n"
    obs, reward, info = _submit(scoring_judge, "extension", files, tmp_path)
    assert reward == -1.0 and info["evaluated"], obs
    build_info = info["last_eval"]["build"]
    assert build_info["status"] == "compile_error" and "multiple definition of `duplicated_symbol'" in obs
    # 5. the linker's message names the agent's sources, no cache path, and is not garbled
    assert re.search(r"kernels/dup2?\.cu", obs) and "<cache>" not in obs and "/build/obj/" not in obs, obs
    assert str(default_cache().root) not in obs and not _GARBLED.search(obs)


# ------------------------------------------------------------------------------------------------------------
# 4. the recorder writes nothing into the build cache but the judge's checked copy of its record
# ------------------------------------------------------------------------------------------------------------

def _record_entries() -> set[Path]:
    return set((default_cache().root / "inline-record").glob("*/*"))


def _fill(n_files: int, mib: int, token: str, linger_s: float = 0.0) -> str:
    """Python that allocates ``n_files`` files of ``mib`` MiB beside the recorder's record, then waits."""
    return textwrap.dedent(f"""
        import os, sys, time
        out_dir = os.path.dirname(os.path.abspath(sys.argv[2]))
        for i in range({n_files}):
            fd = os.open(os.path.join(out_dir, f"blob{{i}}-{token}.bin"), os.O_WRONLY | os.O_CREAT)
            os.posix_fallocate(fd, 0, {mib} << 20)
            os.close(fd)
        time.sleep({linger_s})  # the watchdog sums disk use about once a second
    """)


def test_a_recorder_that_fills_its_folder_is_stopped_and_caches_nothing_of_it() -> None:
    before = _record_entries()
    result = _inline(_fill(3, 400, uuid.uuid4().hex, linger_s=3.0)
                     + _model_new("name='big', cpp_sources='int f();', functions=None"))
    assert result.status is BuildStatus.INVALID and "MiB to disk" in result.log, result.message + result.log
    for entry in _record_entries() - before:
        files = {p.name for p in entry.iterdir()}
        assert files <= {"output.txt", "failed.txt", "calls.json", ".contents.json"}, files
        assert sum(p.stat().st_size for p in entry.iterdir()) < (1 << 20)


def test_only_the_checked_record_enters_the_cache() -> None:
    before = _record_entries()
    token = uuid.uuid4().hex
    source = _fill(1, 64, token) + _model_new(f"name='small_{token}', cpp_sources='int f() {{ return 1; }}', "
                                              "functions=None, no_implicit_headers=True, is_python_module=False")
    result = _inline(source)
    assert result.status is BuildStatus.OK, result.message
    (entry,) = [e for e in _record_entries() - before if token in (e / "calls.json").read_text()]
    assert {p.name for p in entry.iterdir()} == {"calls.json", "output.txt", ".contents.json"}
    record = json.loads((entry / "calls.json").read_text())
    assert record["problem"] == "" and [c["name"] for c in record["calls"]] == [f"small_{token}"]
