"""Loading the reference task and the candidate solution into the worker, and building both models.

The reference source is executed into a fresh module of its own (never imported from the workspace, whose
``model.py`` the candidate could have touched). The candidate's ``model_new.py`` is executed from the job's
working folder after its format's loader made the built artifact importable: for ``extension`` the built
module is aliased as ``cuda_extension`` in :data:`sys.modules`; ``inline`` installs a ``load_inline`` that
returns the pre-built module; ``raw`` points :mod:`cudagym.runtime` at the build's cubin manifest. Each is
undone when the job ends. A build
without an artifact (``artifact_path == ""``) loads nothing: ``model_new.py`` is then plain Python.

Both models are built from ``get_init_inputs()`` under the same seed, then the reference's ``state_dict``
is copied into the candidate strictly (same parameter and buffer names and shapes), so weights are
identical whatever order the candidate creates them in.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import linecache
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cudagym.judge.harness.failures import CandidateFailure, TaskProblem, candidate_traceback, is_cuda_error
from cudagym.judge.harness.inputs import seed_all
from cudagym.judge.records import BuildResult
from cudagym.task import Task

CANDIDATE_FILE = "model_new.py"
CANDIDATE_CLASS = "ModelNew"

_counter = itertools.count()

# One loader per solution format: make the built artifact importable, return an undo callable.
FormatLoader = Callable[[BuildResult, Path], Callable[[], None]]


@dataclass(frozen=True)
class Reference:
    """The reference task, executed."""

    module: types.ModuleType
    model_cls: type[torch.nn.Module]
    get_inputs: Callable[[], Any]
    get_init_inputs: Callable[[], Any]


def load_reference(task: Task) -> Reference:
    """Execute the task's source into a fresh module.

    Raises:
        TaskProblem: The source raises, or lacks ``Model``, ``get_inputs`` or ``get_init_inputs``.
    """
    name = f"_cudagym_reference_{task.short_hash}_{next(_counter)}"
    filename = f"<reference {task.id}>"
    module = types.ModuleType(name)
    module.__file__ = filename
    linecache.cache[filename] = (len(task.source), None, task.source.splitlines(True), filename)
    sys.modules[name] = module  # torch.compile and pickling look classes up by module
    try:
        exec(compile(task.source, filename, "exec"), module.__dict__)
    except Exception as exc:
        raise TaskProblem(f"task {task.id}: the reference source raised {type(exc).__name__}: {exc}"
                          f"{pretrained_hint(exc, task.source)}") from exc
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in module.__dict__]
    if missing:
        raise TaskProblem(f"task {task.id}: the reference defines no {', '.join(missing)}")
    return Reference(module, module.Model, module.get_inputs, module.get_init_inputs)


def unload_reference(reference: Reference) -> None:
    """Forget the reference module (its classes stay alive only through live objects)."""
    sys.modules.pop(reference.module.__name__, None)


@contextlib.contextmanager
def candidate_module(
    build: BuildResult, workdir: Path, before_exec: Callable[[], None] = lambda: None
) -> Iterator[types.ModuleType]:
    """Make the build importable, execute ``model_new.py`` from ``workdir``, and undo both afterwards.

    Args:
        build: The finished build.
        workdir: The job's working folder (holds ``model_new.py``).
        before_exec: Called after the format's loader ran and right before the candidate's code runs
            (the harness snapshots the functions it relies on there).

    Raises:
        CandidateFailure: ``model_new.py`` is missing, raises at import, or defines no ``ModelNew``.
        TaskProblem: The format's loader failed on a build that said it was OK (the judge's problem).
    """
    undo = _install_format(build, workdir)
    name = f"_cudagym_candidate_{next(_counter)}"
    try:
        before_exec()
        yield _exec_candidate(name, workdir)
    finally:
        sys.modules.pop(name, None)
        undo()


def build_reference(reference: Reference, device: torch.device, seed: int, train: bool = False) -> torch.nn.Module:
    """``Model`` alone, with the weights :func:`build_models` gives both models.

    Raises:
        TaskProblem: ``get_init_inputs`` or ``Model(...)`` failed.
    """
    try:
        seed_all(seed)
        ref = reference.model_cls(*reference.get_init_inputs())
        return ref.to(device).train(train)
    except Exception as exc:
        raise TaskProblem(f"building the reference Model failed: {type(exc).__name__}: {exc}"
                          f"{pretrained_hint(exc)}") from exc


PRETRAINED_HINT = ("\n(a pretrained model: the judge's processes have no network and read models only from "
                   "their model cache, offline; `cudagym tasks fetch-models` fills it, CUDAGYM_MODEL_CACHE "
                   "names another)")


def pretrained_hint(exc: BaseException, source: str = "") -> str:
    """:data:`PRETRAINED_HINT` where ``exc`` came from the Hugging Face libraries looking for a model, else ``""``.

    With the task's ``source``, the hint names the models it loads.
    """
    seen: BaseException | None = exc
    while seen is not None:
        origin = type(seen).__module__.split(".")[0]
        text = str(seen)
        if origin in ("huggingface_hub", "transformers") or "huggingface.co" in text or "HF_HUB_OFFLINE" in text:
            from cudagym.sources.models import pretrained_models

            names = pretrained_models(source) if source else []
            return PRETRAINED_HINT + (f"; this task loads {', '.join(names)}" if names else "")
        seen = seen.__cause__ or seen.__context__
    return ""


def build_models(
    reference: Reference, module: types.ModuleType, device: torch.device, seed: int, train: bool = False
) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Build ``Model`` and ``ModelNew`` with identical weights on ``device``; returns ``(reference, candidate)``.

    Raises:
        TaskProblem: ``get_init_inputs`` or ``Model(...)`` failed.
        CandidateFailure: ``ModelNew(...)`` failed, or its state_dict keys or shapes differ from Model's.
    """
    ref = build_reference(reference, device, seed, train)
    return ref, build_candidate(ReferenceParts(list(reference.get_init_inputs()), ref.state_dict()), module, device,
                                seed, train)


@dataclass(frozen=True)
class ReferenceParts:
    """What building ``ModelNew`` takes from the reference, none of its code: its init inputs and its weights."""

    init_inputs: list[Any]
    state_dict: dict[str, torch.Tensor]


def reference_parts(reference: Reference, device: torch.device, seed: int, train: bool = False) -> ReferenceParts:
    """The reference's init inputs and weights, as :func:`build_models` gives them to ``ModelNew``.

    Raises:
        TaskProblem: ``get_init_inputs`` or ``Model(...)`` failed.
    """
    ref = build_reference(reference, device, seed, train)
    try:
        init_inputs = list(reference.get_init_inputs())
    except Exception as exc:
        raise TaskProblem(f"the reference's get_init_inputs() failed: {type(exc).__name__}: {exc}") from exc
    return ReferenceParts(init_inputs, ref.state_dict())


def build_candidate(parts: ReferenceParts, module: types.ModuleType, device: torch.device, seed: int,
                    train: bool = False) -> torch.nn.Module:
    """``ModelNew`` built from the reference's init inputs, with the reference's weights, on ``device``.

    Raises:
        CandidateFailure: ``ModelNew(...)`` failed, or its state_dict keys or shapes differ from Model's.
    """
    with candidate_calls("init", Path(module.__file__ or ".").parent):
        seed_all(seed)
        cand = getattr(module, CANDIDATE_CLASS)(*parts.init_inputs)
        if not isinstance(cand, torch.nn.Module):
            raise TypeError(f"ModelNew(...) must be a torch.nn.Module, got {type(cand).__name__}")
    problem = state_dict_mismatch(parts.state_dict, cand.state_dict())
    if problem:
        raise CandidateFailure("state_dict", problem)
    with candidate_calls("init", Path(module.__file__ or ".").parent):
        cand.load_state_dict(parts.state_dict, strict=True)
        return cand.to(device).train(train)


def state_dict_mismatch(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> str:
    """Why ``got`` cannot take ``expected`` strictly (``""`` when it can): missing, unexpected, shapes."""
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    shapes = [
        f"{key}: Model has {tuple(expected[key].shape)}, ModelNew has {tuple(got[key].shape)}"
        for key in sorted(set(expected) & set(got))
        if tuple(expected[key].shape) != tuple(got[key].shape)
    ]
    if not (missing or unexpected or shapes):
        return ""
    parts = ["ModelNew must declare the same parameters and buffers as Model (same names and shapes): the "
             "judge copies Model's state_dict into ModelNew so both use the same weights"]
    if missing:
        parts.append(f"missing keys: {', '.join(missing)}")
    if unexpected:
        parts.append(f"unexpected keys: {', '.join(unexpected)}")
    if shapes:
        parts.append(f"shape mismatches: {'; '.join(shapes)}")
    return "; ".join(parts)


@contextlib.contextmanager
def candidate_calls(stage: str, workdir: Path) -> Iterator[None]:
    """Turn any exception raised inside the block into a :class:`CandidateFailure` for ``stage``."""
    try:
        yield
    except CandidateFailure:
        raise
    except (Exception, SystemExit) as exc:  # sys.exit() in candidate code is a failure, not a worker exit
        text = candidate_traceback(exc, (workdir.resolve(),))
        raise CandidateFailure(stage, text, cuda=is_cuda_error(exc)) from exc


# ------------------------------------------------------------------------------------------ internals


def _exec_candidate(name: str, workdir: Path) -> types.ModuleType:
    path = workdir / CANDIDATE_FILE
    if not path.is_file():
        raise CandidateFailure("load", f"{CANDIDATE_FILE} is missing from the solution")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py path always has a loader
        raise CandidateFailure("load", f"cannot load {CANDIDATE_FILE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    with candidate_calls("load", workdir):
        spec.loader.exec_module(module)
    if not isinstance(getattr(module, CANDIDATE_CLASS, None), type):
        raise CandidateFailure("load", f"{CANDIDATE_FILE} must define class {CANDIDATE_CLASS}(nn.Module)")
    return module


def _install_format(build: BuildResult, workdir: Path) -> Callable[[], None]:
    if not build.artifact_path:
        return lambda: None  # nothing was built: model_new.py is plain Python
    loader = FORMAT_LOADERS.get(build.format)
    if loader is None:
        raise TaskProblem(f"no loader for solution format {build.format!r}; expected one of {sorted(FORMAT_LOADERS)}")
    if not Path(build.artifact_path).exists():
        raise TaskProblem(f"the {build.format} build's artifact {build.artifact_path} is not on this host; the "
                          "worker must see the build cache")
    try:
        return loader(build, workdir)
    except ImportError as exc:
        raise TaskProblem(f"the {build.format} loader is unavailable: {exc}") from exc
    except Exception as exc:
        # The artifact is the candidate's code: an unresolved symbol or a static initialiser that throws
        # is the candidate's fault.
        text = candidate_traceback(exc, (workdir.resolve(),))
        raise CandidateFailure("load", text, cuda=is_cuda_error(exc)) from exc


def _alias_modules(aliases: dict[str, types.ModuleType]) -> Callable[[], None]:
    saved = {name: sys.modules.get(name) for name in aliases}
    sys.modules.update(aliases)

    def undo() -> None:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous

    return undo


def _load_extension(build: BuildResult, workdir: Path) -> Callable[[], None]:
    from cudagym.judge.build.extension import load_extension

    return _alias_modules({"cuda_extension": load_extension(build, alias=None)})


def _load_inline(build: BuildResult, workdir: Path) -> Callable[[], None]:
    from cudagym.judge.build.inline import install_inline_loader, uninstall_inline_loader

    install_inline_loader(build)
    return uninstall_inline_loader


def _load_raw(build: BuildResult, workdir: Path) -> Callable[[], None]:
    from cudagym import runtime

    runtime.use_manifest(build.artifact_path)
    return lambda: runtime.use_manifest(None)


FORMAT_LOADERS: dict[str, FormatLoader] = {
    "extension": _load_extension,
    "inline": _load_inline,
    "raw": _load_raw,
}
