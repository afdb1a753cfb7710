"""The build cache (content keys, atomic entries, locks, pruning) and the tool runner (deadline, cap, kill)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from faults import processes_running

from cudagym.errors import BuildToolError
from cudagym.judge.build.cache import BuildCache, content_key, default_cache_root, write_atomic
from cudagym.judge.build.process import BuildLimits, Deadline, RunOutcome, run_tool
from cudagym.judge.build.toolchain import normalize_arch, torch_cxx_std
from cudagym.judge.protocol import DEFAULT_PROTOCOL


def test_default_root_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CUDAGYM_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("CUDAGYM_CACHE_DIR")
    assert default_cache_root() == tmp_path / "xdg" / "cudagym"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_root() == Path.home() / ".cache" / "cudagym"


def test_content_key_is_canonical() -> None:
    assert content_key({"b": 1, "a": [1, 2]}) == content_key({"a": [1, 2], "b": 1})
    assert content_key("x", 1) != content_key("x", 2)
    assert len(content_key("x")) == 64


def test_commit_is_atomic_and_first_writer_wins(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    assert cache.lookup("obj", "k" * 64) is None
    with cache.staging() as a:
        (a / "out.o").write_text("first")
        entry = cache.commit("obj", "k" * 64, a)
    with cache.staging() as b:
        (b / "out.o").write_text("second")
        again = cache.commit("obj", "k" * 64, b)
    assert entry == again and (entry / "out.o").read_text() == "first"
    assert cache.lookup("obj", "k" * 64) == entry
    assert cache.stats("obj").hits == 1 and cache.stats("obj").misses == 1
    assert not any((cache.root / "tmp").iterdir()), "staging directories are cleaned up"


@pytest.mark.parametrize("damage", ["delete", "truncate", "listing"])
def test_an_entry_with_a_missing_or_truncated_file_is_a_miss_and_is_rebuilt(tmp_path: Path, damage: str) -> None:
    cache = BuildCache(tmp_path)
    key = "d" * 64
    with cache.staging() as staged:
        (staged / "lib").mkdir()
        (staged / "lib" / "module.so").write_bytes(b"\x7fELF" * 100)
        (staged / "manifest.json").write_text("{}")
        entry = cache.commit("ext", key, staged)
    assert cache.lookup("ext", key) == entry
    if damage == "delete":
        (entry / "lib" / "module.so").unlink()
    elif damage == "truncate":
        (entry / "lib" / "module.so").write_bytes(b"")
    else:
        (entry / ".contents.json").unlink()
    assert cache.lookup("ext", key) is None
    assert not entry.exists(), "the broken entry is removed so a rebuild can take its place"
    with cache.staging() as staged:
        (staged / "manifest.json").write_text("{}")
        assert cache.commit("ext", key, staged) == entry
    assert cache.lookup("ext", key) == entry


def test_lock_serialises_and_times_out(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    order: list[str] = []
    with cache.lock("key", 1.0) as got:
        assert got

        def other() -> None:
            with cache.lock("key", 0.2) as got_other:
                order.append(f"other:{got_other}")

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        order.append("holder")
    assert order == ["other:False", "holder"]


def test_prune_removes_least_recent(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    for i, key in enumerate(("a" * 64, "b" * 64)):
        with cache.staging() as stage:
            (stage / "blob").write_bytes(b"x" * 1000)
            entry = cache.commit("obj", key, stage)
        os.utime(entry, (1000 + i, 1000 + i))
    freed = cache.prune(max_bytes=1500)
    assert 1000 <= freed < 1100  # the blob and its entry listing
    assert cache.lookup("obj", "a" * 64) is None and cache.lookup("obj", "b" * 64) is not None


def test_write_atomic_replaces(tmp_path: Path) -> None:
    target = tmp_path / "d" / "f.json"
    write_atomic(target, b"1")
    write_atomic(target, b"2")
    assert target.read_bytes() == b"2" and len(list(target.parent.iterdir())) == 1


def test_run_tool_ok_and_missing(tmp_path: Path) -> None:
    run = run_tool([sys.executable, "-c", "print('hi')"], cwd=tmp_path, deadline=Deadline(30), max_output_bytes=100)
    assert run.ok and run.output.strip() == "hi"
    gone = run_tool(["/nonexistent/tool"], cwd=tmp_path, deadline=Deadline(30), max_output_bytes=100)
    assert gone.outcome is RunOutcome.NOT_FOUND and not gone.ok


def test_run_tool_timeout_kills_the_process_group(tmp_path: Path) -> None:
    script = "sleep 60.5151 & wait"  # a unique argument: a confined process's pid is its namespace's
    start = time.monotonic()
    run = run_tool(["sh", "-c", script], cwd=tmp_path, deadline=Deadline(1.5), max_output_bytes=100)
    assert run.outcome is RunOutcome.TIMEOUT and time.monotonic() - start < 10
    time.sleep(0.2)
    assert not processes_running("60.5151"), "the grandchild survived the timeout"


def test_run_tool_output_cap(tmp_path: Path) -> None:
    code = "import sys\nwhile True: sys.stdout.write('x' * 4096)"
    run = run_tool([sys.executable, "-c", code], cwd=tmp_path, deadline=Deadline(30), max_output_bytes=10_000)
    assert run.outcome is RunOutcome.OUTPUT_LIMIT and len(run.output) <= 10_000


def test_limits_from_protocol() -> None:
    protocol = DEFAULT_PROTOCOL.with_changes(id="t", build_timeout_s=12, extra={"build_max_output_bytes": 99})
    limits = BuildLimits.from_protocol(protocol)
    assert limits.timeout_s == 12 and limits.max_output_bytes == 99
    assert limits.max_artifact_bytes == BuildLimits().max_artifact_bytes


def test_arch_and_std_rules() -> None:
    assert [normalize_arch(a) for a in ("sm_90", "90", "9.0", "compute_90", "sm_90a")] == \
        ["sm_90", "sm_90", "sm_90", "sm_90", "sm_90a"]
    with pytest.raises(BuildToolError, match="CUDAGYM_CUDA_ARCH"):
        normalize_arch("hopper")
    assert torch_cxx_std("2.11.0+cu130") == "c++17"
    assert torch_cxx_std("2.13.0+cpu") == "c++20"


def test_importing_the_build_stage_does_not_import_torch() -> None:
    code = "import sys, cudagym.judge.build, cudagym.runtime; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_extension_keys_do_not_depend_on_where_the_cache_lives() -> None:
    from cudagym.judge.build.toolchain import CudaTools, TorchTools
    from cudagym.judge.build.torch_ext import ExtToolchain

    tools = CudaTools("/cuda/bin/nvcc", "/cuda", "13.0.88", "/usr/bin/c++", "g++ 12", "")
    torch_ = TorchTools("2.13.0", ("/t/include",), "/t/lib", "/py/include", True, "c++20", ())
    here = ExtToolchain(tools, torch_, "sm_90", compat_include="/cache-a/build/compat/ab/abc", compat_key="abc")
    there = ExtToolchain(tools, torch_, "sm_90", compat_include="/cache-b/build/compat/ab/abc", compat_key="abc")
    assert "-I/cache-a/build/compat/ab/abc" in here.host_includes()
    assert here.key_includes() == there.key_includes() and here.fingerprint() == there.fingerprint()


def _fake_toolchain(arch: str = "sm_90"):
    from cudagym.judge.build.toolchain import CudaTools, TorchTools
    from cudagym.judge.build.torch_ext import ExtToolchain

    tools = CudaTools("/cuda/bin/nvcc", "/cuda", "13.0.88", "/usr/bin/c++", "g++ 12", "")
    return ExtToolchain(tools, TorchTools("2.13.0", ("/t/include",), "/t/lib", "/py/include", True, "c++20", ()),
                        arch)


def test_the_background_pch_is_built_once_and_again_only_when_worth_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudagym.judge.build import torch_ext
    from cudagym.judge.build.units import CompileUnit, UnitResult

    release = threading.Event()
    outcomes: list[object] = []  # what each build_pch call ends with, in order
    calls: list[str] = []

    def fake_build_pch(tc, cache):
        calls.append(tc.arch)
        release.wait(10)
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        unit = CompileUnit("<pch>", "pch", "k", (), "c++", "torch_ext.h.gch")
        return UnitResult(unit, RunOutcome.EXITED, 0 if outcome else 1, "", tmp_path if outcome else None, False)

    monkeypatch.setattr(torch_ext, "build_pch", fake_build_pch)
    cache, tc = BuildCache(tmp_path / "c"), _fake_toolchain("sm_42")  # an arch no other test's slot uses
    outcomes += [True, OSError("cache removed"), False, True]
    first = torch_ext.pch_in_background(tc, cache)
    assert torch_ext.pch_in_background(tc, cache) is first  # still building: the same job
    release.set()
    assert first.result(5).ok and calls == ["sm_42"]
    # built, then asked for again (pruned since): another job
    second = torch_ext.pch_in_background(tc, cache)
    assert second is not first and isinstance(second.exception(5), OSError)
    third = torch_ext.pch_in_background(tc, cache)  # an exception is worth another try
    assert third is not second and not third.result(5).ok
    assert torch_ext.pch_in_background(tc, cache) is third  # the compiler failed: it would fail again
    assert len(calls) == 3 and outcomes == [True]


def test_an_entry_whose_content_changed_is_a_miss_and_removed(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    with cache.staging() as stage:
        (stage / "x.so").write_bytes(b"built by the judge")
        entry = cache.commit("ext", "k" * 64, stage)
    assert cache.lookup("ext", "k" * 64) == entry
    (entry / "x.so").write_bytes(b"built by the other")  # same size, other bytes
    assert cache.lookup("ext", "k" * 64) is None and not entry.exists()


def test_a_tool_started_in_the_background_finishes_at_interpreter_exit(tmp_path: Path) -> None:
    # the torch PCH is built this way: a short-lived process finishes it for the next one. The sandbox dies
    # with the thread that started it, so that thread must outlive the executors joined at exit.
    marker = tmp_path / "done"
    code = f"""
from concurrent.futures import ThreadPoolExecutor
from cudagym.judge.build.process import Deadline, run_tool
pool = ThreadPoolExecutor(max_workers=1)
pool.submit(run_tool, ["sh", "-c", "sleep 2 && touch done"], cwd={str(tmp_path)!r}, deadline=Deadline(60),
            max_output_bytes=100, writes=[{str(tmp_path)!r}])
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    assert marker.exists()
