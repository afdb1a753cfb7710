"""``cudagym eval PATH --task ID``: judge one solution, outside any episode.

``PATH`` is a solution folder in any of the three formats (``extension``, ``inline``, ``raw``; the format told
from its files unless ``--format`` names it) or a single KernelBench-style ``model_new.py`` (the ``inline``
format). Every file the format reads is taken as it is or refused, naming it: a symbolic link (or a file in a
linked folder) and bytes that are not UTF-8 are usage errors, never a file silently left out or altered.
``--task`` is a task id (``bundled/L1/01_Swish``, ``L1/19_ReLU`` with ``--root``) or a KernelBench-format
reference file. The verdict is the public judge's (:class:`cudagym.judge.local.LocalJudge` through the
process-wide default) and its tier is :func:`cudagym.reward.score`'s; it prints as a table (the build, each
input's check, the times with their spread, the speedups, the tier, the guards, the isolation and precision
facts) or, with ``--json``, as ``{"task", "solution", "tier", "reward", "result"}`` for scripts.

Exit status: 0 when the solution is correct (without a GPU: when it built, and the output says that
nothing was checked, as ``cudagym demo`` does); 1 when it failed (build, check, guard, crash); 2 for a
usage error (an unknown task, a path that holds no solution or a file it cannot take as it is).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from cudagym.errors import ConfigError
from cudagym.judge.interface import EvalMode
from cudagym.judge.protocol import DEFAULT_PROTOCOL, get_protocol
from cudagym.judge.records import EvalResult, EvalStatus, to_dict
from cudagym.observation import render_eval
from cudagym.reward import reward_config, score
from cudagym.solution import FORMATS, Solution, SolutionFormat, get_format
from cudagym.task import Task, make_task

EXIT_PASS = 0
EXIT_FAIL = 1


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the command's arguments."""
    parser.add_argument("path", help="a solution folder (extension, inline or raw format) or a model_new.py")
    parser.add_argument("--task", required=True,
                        help="task id (bundled/L1/01_Swish, L1/19_ReLU, ...) or a KernelBench-format .py file")
    parser.add_argument("--mode", default="submit", choices=[m.value for m in EvalMode],
                        help="verify: check only; profile: check and time; submit (default): the full protocol")
    parser.add_argument("--format", default=None, choices=sorted(FORMATS),
                        help="the solution's format (default: told from its files)")
    parser.add_argument("--protocol", default=None, help=f"evaluation protocol (default: {DEFAULT_PROTOCOL.id})")
    parser.add_argument("--judge", default="local", help="local (default) or module:callable (protocol -> Judge)")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    data = parser.add_argument_group("where the task data is (as in `cudagym tasks show`)")
    data.add_argument("--root", default=None, help="a KernelBench checkout")
    data.add_argument("--parquet", default=None, help="KernelBench parquet file or folder")
    data.add_argument("--data-path", default=None, help="Ops-6K parquet file or folder")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Judge the solution once; returns 0 (pass), 1 (fail)."""
    from cudagym.bench.runner import make_judge

    out = out or sys.stdout
    solution = read_solution(args.path, args.format)
    task = load_task(args.task, {"root": args.root, "parquet": args.parquet, "path": args.data_path})
    judge = make_judge(args.judge, get_protocol(args.protocol))
    try:
        result = judge.evaluate(task, solution, EvalMode(args.mode))
    finally:
        judge.close()
    verdict = score(result, reward_config(None, threshold=judge.protocol.threshold,
                                          statistic=judge.protocol.statistic, interval=judge.protocol.tier_interval))
    if args.json:
        data = {"task": task.id, "solution": str(args.path), "format": solution.format, "mode": args.mode,
                "tier": verdict.tier, "reward": verdict.reward, "evaluated": verdict.evaluated,
                "result": to_dict(result)}
        print(json.dumps(data, indent=2), file=out)
    else:
        print(render(task, solution, args.path, args.mode, result, verdict.tier), file=out)
    if result.status is EvalStatus.NO_GPU:
        return EXIT_PASS if result.build.ok else EXIT_FAIL
    return EXIT_PASS if result.correct else EXIT_FAIL


def read_solution(path: str | Path, fmt: str | None = None) -> Solution:
    """The solution at ``path``: a folder (its format told from its files) or one ``model_new.py`` (inline).

    Every file the format lets an agent write is read as it is, or refused: unlike an env's workspace snapshot
    (:meth:`Solution.from_dir`), a folder given here is the user's, so a file that would be left out or altered is
    an error naming it, never a build that says the kernels are missing.

    Raises:
        ConfigError: Nothing there, no ``model_new.py`` in it, a single file that is not a ``.py``, or a file the
            format reads that is a symbolic link (or lies under one) or is not UTF-8 text.
    """
    where = Path(path).expanduser()
    if where.is_file():
        if fmt not in (None, "inline"):
            raise ConfigError(f"a single file is a KernelBench-style model_new.py (inline format), not {fmt}")
        if where.suffix != ".py":
            raise ConfigError(f"expected a solution folder or a model_new.py (a .py file) at {path}, found a file "
                              f"named {where.name!r}")
        return Solution("inline", {"model_new.py": _read_source(where, str(path))})
    if not where.is_dir():
        raise ConfigError(f"expected a solution folder or a model_new.py at {path}, found nothing")
    model = where / "model_new.py"
    if model.is_symlink():
        raise ConfigError(f"expected {model} to be a file, found a symbolic link: copy the file it points to there")
    if not model.is_file():
        raise ConfigError(f"expected {path}/model_new.py (every format has one), found none")
    _read_source(model, str(model))  # before detect_format reads it leniently
    solution_format = get_format(fmt or detect_format(where))
    return Solution(solution_format.name, _read_editable(where, solution_format))


def _read_source(file: Path, name: str) -> str:
    """The text of ``file`` (UTF-8, read strictly), or a ConfigError naming ``name`` and the first bad byte."""
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"expected {name} to be UTF-8 text, found bytes that are not UTF-8 at offset {exc.start}: "
                          "save it as UTF-8") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {name}: {exc.strerror or exc}") from exc


def _read_editable(folder: Path, solution_format: SolutionFormat) -> dict[str, str]:
    """Every file under ``folder`` that ``solution_format`` lets an agent write, by relative path.

    Raises:
        ConfigError: One of them is a symbolic link, lies in a linked folder, is no regular file or is not UTF-8
            text.
    """
    files: dict[str, str] = {}
    for top, dirs, names in os.walk(folder):
        base = Path(top)
        for name in sorted(dirs + names):
            entry = base / name
            rel = entry.relative_to(folder).as_posix()
            if entry.is_symlink() and (solution_format.is_editable(rel) or _may_hold_editable(solution_format, rel)):
                raise ConfigError(f"expected {entry} to be a {'folder' if name in dirs else 'file'}, found a "
                                  f"symbolic link; the {solution_format.name} format reads it, so copy what it "
                                  "points to there")
            if name in names and solution_format.is_editable(rel):
                if not entry.is_file():
                    raise ConfigError(f"expected {entry} to be a file, found something else (a pipe, a socket)")
                files[rel] = _read_source(entry, str(entry))
    return dict(sorted(files.items()))


def _may_hold_editable(solution_format: SolutionFormat, rel: str) -> bool:
    """True when the folder ``rel`` is where some of the format's editable files would be (``kernels``)."""
    parts = rel.split("/")
    return any(len(pattern.split("/")) > len(parts)
               and all(fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pattern.split("/"), strict=False))
               for pattern in solution_format.editable)


def detect_format(folder: Path) -> str:
    """The format a solution folder is written in: C++ bindings mean ``extension``, kernels alone ``raw``.

    ``model_new.py`` settles it when it names its loader (``cudagym.runtime``, ``load_inline``,
    ``cuda_extension``); otherwise the ``kernels/`` folder does; a lone ``model_new.py`` is ``inline``.
    """
    text = (folder / "model_new.py").read_text(encoding="utf-8", errors="replace")
    if "cudagym.runtime" in text:
        return "raw"
    if "load_inline" in text:
        return "inline"
    kernels = folder / "kernels"
    if "cuda_extension" in text or any(kernels.glob("*.cpp")):
        return "extension"
    return "raw" if any(kernels.glob("*.cu")) else "inline"


def load_task(spec: str, options: dict[str, Any]) -> Task:
    """A task by id, or from a KernelBench-format file (id ``file/<stem>``, level 1).

    Raises:
        UnknownTaskError: The id names no task.
        ConfigError: ``spec`` ends in ``.py`` but is no readable text file.
        TaskFormatError: The file is not KernelBench format.
    """
    path = Path(spec).expanduser()
    if spec.endswith(".py"):  # a file, never a task id: ids have no suffix
        if path.is_dir():
            raise ConfigError(f"expected --task {spec} to be a KernelBench-format .py file, found a folder")
        if not path.is_file():
            raise ConfigError(f"expected --task {spec} to be a KernelBench-format .py file (or a task id such as "
                              "bundled/L1/01_Swish), found no such file")
        try:
            source = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"expected --task {spec} to be a Python source file (UTF-8), found bytes that are "
                              f"not UTF-8 at offset {exc.start}") from exc
        return make_task(source, id=f"file/{path.stem}", suite="file", level=1, name=path.stem, origin=str(path))
    from cudagym.suites import get_task

    return get_task(spec, **{k: v for k, v in options.items() if v is not None})


def render(task: Task, solution: Solution, path: str, mode: str, result: EvalResult, tier: int) -> str:
    """The readable verdict: a header, the judge's own rendering, then tier, guards, isolation, precision."""
    lines = [f"cudagym eval: {path} ({solution.format} format, {len(solution.files)} file(s)) "
             f"against {task.id}, {mode} mode"]
    if result.status is EvalStatus.NO_GPU:
        lines.append("NO GPU FOUND: only the build ran; nothing was checked or timed (tier 0, not evaluated).")
    lines.append(render_eval(result, mode))
    lines.append(f"Tier: {tier} ({_tier_words(tier)})")
    guards = "; ".join(f"{v.guard}: {v.message}" for v in result.violations) or "no guard fired"
    lines.append(f"Guards: {guards}" if result.status is not EvalStatus.NO_GPU else "Guards: not run (no GPU)")
    lines.append(_isolation(result))
    if result.cost.peak_device_memory_bytes:
        c = result.cost
        lines.append(f"Cost: peak device memory {c.peak_device_memory_bytes / 2**20:.0f} MiB; load {c.load_s:.2f} s, "
                     f"check {c.check_s:.2f} s, timing {c.timing_s:.2f} s, profile {c.profile_s:.2f} s")
    lines.append(f"Status: {result.status.value}; wall time {result.wall_time_s:.2f} s")
    return "\n".join(lines)


def _tier_words(tier: int) -> str:
    return {-1: "failed", 0: "not evaluated", 1: "correct, not faster than eager by the protocol's threshold",
            2: "faster than eager, not than torch.compile", 3: "faster than eager and torch.compile"}[tier]


def _isolation(result: EvalResult) -> str:
    iso = result.isolation if result.isolation.sandbox else result.build.isolation
    if not iso.sandbox:
        return "Isolation: not reported"
    facts = [iso.sandbox, "no network" if iso.network_isolated else "NETWORK REACHABLE",
             "private file system" if iso.filesystem_isolated else "HOST FILE SYSTEM",
             "own PID namespace" if iso.pid_namespace else "host PIDs visible", *iso.limits, *iso.notes]
    return "Isolation: " + "; ".join(facts)

