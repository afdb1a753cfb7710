"""Storing a compiled unit trusts nothing the candidate's compile leaves at its output path.

Each test runs a stand-in compiler (``/bin/sh``, its ``$1`` the unit's output) confined by the real tool runner
and stores through the real build cache (:func:`~cudagym.judge.build.units.compile_unit`), as a candidate's
sources and flags would steer ``nvcc``. The output path is in a folder the candidate's compile may write, so what
it finds there may be a symbolic link to a host file the sandbox hides, a fifo or a folder.
"""

from __future__ import annotations

from pathlib import Path

from cudagym.judge.build.cache import BuildCache
from cudagym.judge.build.process import BuildLimits, Deadline
from cudagym.judge.build.units import CompileUnit, UnitResult, compile_unit, failure
from cudagym.judge.records import BuildStatus


def _compile(tmp_path: Path, script: str, key: str, limits: BuildLimits | None = None) -> UnitResult:
    """Compile one unit with ``script`` as its confined compiler, through the build cache under ``tmp_path``."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    unit = CompileUnit(source="kernels/k.cu", kind="cubin", key=key, tool="sh", artifact="k.cubin",
                       argv=("/bin/sh", "-c", script, "sh", "{out}"))
    return compile_unit(unit, cache=BuildCache(tmp_path / "cache"), cwd=cwd, deadline=Deadline(60),
                        limits=limits or BuildLimits())


def _cache_bytes(tmp_path: Path) -> list[bytes]:
    """The contents of every regular file in the cache (links not followed)."""
    root = tmp_path / "cache"
    return [p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


def test_a_regular_output_is_stored_and_then_served_from_the_cache(tmp_path):
    """Control: the stand-in compiler's plain output is committed, and the same key is a cache hit afterwards."""
    first = _compile(tmp_path, 'printf cubin > "$1"', "a" * 64)
    assert first.ok and not first.cached and first.path is not None
    assert first.path.read_text() == "cubin"
    again = _compile(tmp_path, "exit 3", "a" * 64)  # a hit never runs the compiler
    assert again.ok and again.cached and again.path == first.path


def test_a_link_left_as_the_output_is_refused_and_never_stored(tmp_path):
    """Attack: the compile exits 0 leaving its output as a link to a host file. The store followed it (``is_file``,
    ``stat``), took the host file for the unit's output and committed the entry as a cached success, whose
    artifact the commit then dropped: every later build of that key was a "hit" with no object behind it."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"judge-secret")
    result = _compile(tmp_path, f'ln -s {secret} "$1"', "b" * 64)
    assert not result.ok and result.path is None
    assert "k.cubin is a symbolic link, not a regular file; refused" in result.output
    assert failure([result], BuildLimits()) == (BuildStatus.COMPILE_ERROR, "compile failed: kernels/k.cu")
    assert BuildCache(tmp_path / "cache").lookup("cubin", "b" * 64) is None  # nothing committed for the key
    assert not any(b"judge-secret" in data for data in _cache_bytes(tmp_path))
    assert secret.read_bytes() == b"judge-secret"
    again = _compile(tmp_path, f'ln -s {secret} "$1"', "b" * 64)
    assert not again.ok and not again.cached  # the refusal is no cached success either


def test_a_link_to_a_large_host_file_is_refused_rather_than_measured(tmp_path):
    """Attack: the size cap was checked through the link, so the verdict told the candidate how large a host file
    is (``OUTPUT_LIMIT`` or not); the link is refused before any size is read."""
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * 4096)
    limits = BuildLimits(max_artifact_bytes=1024)
    result = _compile(tmp_path, f'ln -s {big} "$1"', "c" * 64, limits)
    assert not result.ok and not result.too_large
    assert "symbolic link" in result.output
    assert failure([result], limits) == (BuildStatus.COMPILE_ERROR, "compile failed: kernels/k.cu")


def test_a_fifo_left_as_the_output_is_refused_with_the_reason(tmp_path):
    """A fifo at the output path is opened without blocking and refused, saying why, instead of a bare failure."""
    result = _compile(tmp_path, 'mkfifo "$1"', "d" * 64)
    assert not result.ok and result.path is None
    assert "k.cubin is not a regular file; refused" in result.output
    assert BuildCache(tmp_path / "cache").lookup("cubin", "d" * 64) is None


def test_a_folder_a_failing_compile_leaves_as_the_output_is_its_compile_error(tmp_path):
    """Attack: a compile that fails leaving a folder at its output path made the store's ``unlink`` raise
    ``IsADirectoryError`` out of the build (the judge's infra error, not the candidate's -1)."""
    result = _compile(tmp_path, 'mkdir "$1"; echo "error: nope" >&2; exit 1', "e" * 64)
    assert not result.ok and result.returncode == 1 and "error: nope" in result.output
    assert failure([result], BuildLimits()) == (BuildStatus.COMPILE_ERROR, "compile failed: kernels/k.cu")
    cached = _compile(tmp_path, "exit 0", "e" * 64)  # the failure is cached like any compile error
    assert cached.cached and not cached.ok and cached.returncode == 1
    entry = BuildCache(tmp_path / "cache").entry_dir("cubin", "e" * 64)
    assert not (entry / "k.cubin").exists()
