"""The guard interface and the registry of guards by name.

A guard is a small class with a name and up to seven hooks, all with one shared signature shape
``hook(ctx, ...)``; the harness calls each hook at a defined point of an evaluation, in ``order``:

==================  ==========================================================================================
hook                when
==================  ==========================================================================================
check_sources       before anything is loaded: the solution's text (``ctx.sources``) and the working folder
after_load          ``model_new.py`` executed, both models built with the same weights
forward_scope       a context manager entered right around each audited candidate forward (innermost)
after_forward       right after that forward returned, before anything synchronises the device
on_check            after one input set was compared (``ctx`` holds inputs, outputs and the reference's)
after_correctness   every correctness input passed
after_timing        candidate and baselines were timed (PROFILE and SUBMIT only)
==================  ==========================================================================================

A guard reports with ``ctx.flag(self.name, message)``; any flag makes the verdict ``RULE_VIOLATION``
(tier -1) and the observation names the guard. Guards never raise for candidate behaviour; candidate code
they run goes through the context's call helpers, which turn candidate exceptions into statuses.

Which guards run is the protocol's ``guards`` field: ``("all",)`` or a tuple of names.

Where each hook runs: the candidate executes in an untrusted runner process, the verdict is made in the
trusted judge process (:mod:`cudagym.judge.split`). Hooks that inspect the candidate's own process
(``after_load``, ``forward_scope``, ``after_forward``, and what a guard lists in ``runner_hooks``) run in the
runner and can only add violations; hooks that judge outputs, inputs and times run in the trusted process
on tensors it made itself. ``check_sources`` runs in both (before any candidate code has run in either).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar

from cudagym.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover - typing only; the harness imports torch
    from cudagym.judge.harness.context import CheckRecord, EvalContext, ForwardCall

ALL = "all"
MAX_FINDINGS = 8  # static findings quoted in one violation message

# The modules that define guards (one module per family); imported on first use of the registry.
GUARD_MODULES = (
    "cudagym.judge.guards.fallback",
    "cudagym.judge.guards.reference",
    "cudagym.judge.guards.patching",
    "cudagym.judge.guards.concurrency",
    "cudagym.judge.guards.outputs",
    "cudagym.judge.guards.caching",
    "cudagym.judge.guards.memory",
    "cudagym.judge.guards.inputs",
    "cudagym.judge.guards.precision",
    "cudagym.judge.guards.kernels",
    "cudagym.judge.guards.tampering",
    "cudagym.judge.guards.escape",
    "cudagym.judge.guards.speedup",
)


class Guard:
    """A named reward-hacking check; subclasses override the hooks they need (each defaults to nothing)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""  # one line: the exploit it stops (shown in listings and the task prompt)
    order: ClassVar[int] = 50  # lower runs first at every hook
    runner_hooks: ClassVar[frozenset[str]] = frozenset()  # hooks beyond RUNNER_HOOKS that run in the runner
    # True: its after_correctness asks whether the answer holds on unseen inputs at the task's own scale, and also
    # runs when only the protocol's scaled input sets failed (their seeds are unseen too): its finding names the
    # cause (answers memorised for the published seeds) where the failed scaled set alone cannot
    probes_unseen_inputs: ClassVar[bool] = False
    # True: its after_forward queues reads behind the audited forward's own work before the split's gate opens, and
    # opens it itself (EvalContext.open_gate) before it waits for them; other hooks run with the gate open
    reads_behind_gate: ClassVar[bool] = False

    def check_sources(self, ctx: EvalContext) -> None:
        """Static checks on the solution's files, before anything runs."""

    def flag_findings(self, ctx: EvalContext, findings: Sequence[str], prefix: str = "") -> None:
        """Flag ``findings`` (if any) as one violation of this guard: the first eight, and how many more."""
        if findings:
            more = f" (+{len(findings) - MAX_FINDINGS} more)" if len(findings) > MAX_FINDINGS else ""
            ctx.flag(self.name, prefix + "; ".join(findings[:MAX_FINDINGS]) + more)

    def after_load(self, ctx: EvalContext) -> None:
        """Checks once the candidate module is executed and both models are built."""

    def forward_scope(self, ctx: EvalContext, call: ForwardCall) -> AbstractContextManager[Any] | None:
        """A context manager to enter right around an audited candidate forward, or None."""
        return None

    def after_forward(self, ctx: EvalContext, call: ForwardCall) -> None:
        """Checks right after an audited forward returned (``call.outputs`` set), before any device sync."""

    def on_check(self, ctx: EvalContext, record: CheckRecord) -> None:
        """Checks after one input set was compared with the reference."""

    def after_correctness(self, ctx: EvalContext) -> None:
        """Checks after every correctness input passed (extra runs of the candidate are allowed here)."""

    def after_timing(self, ctx: EvalContext) -> None:
        """Checks after timing (PROFILE and SUBMIT)."""


RUNNER_HOOKS = frozenset({"check_sources", "after_load", "forward_scope", "after_forward"})
TRUSTED_HOOKS = frozenset({"check_sources", "on_check", "after_correctness", "after_timing"})
HOOKS = RUNNER_HOOKS | TRUSTED_HOOKS


def runs_in(guard: Guard, hook: str, side: str) -> bool:
    """Whether ``guard``'s ``hook`` runs on ``side`` (``"runner"``, ``"trusted"``, or ``"both"``: one process)."""
    if side == "both":
        return True
    in_runner = hook in RUNNER_HOOKS or hook in guard.runner_hooks
    if side == "runner":
        return in_runner
    return hook == "check_sources" or not in_runner


class Sided(Guard):
    """A guard as one side of the split sees it: the hooks of the other side do nothing."""

    def __init__(self, inner: Guard, side: str) -> None:
        self.inner = inner
        self.side = side
        self.name = inner.name  # type: ignore[misc]
        self.order = inner.order  # type: ignore[misc]
        self.probes_unseen_inputs = inner.probes_unseen_inputs  # type: ignore[misc]
        self.reads_behind_gate = inner.reads_behind_gate and runs_in(inner, "after_forward", side)  # type: ignore[misc]

    def __getattribute__(self, attr: str) -> Any:
        if attr in HOOKS:
            inner = object.__getattribute__(self, "inner")
            if runs_in(inner, attr, object.__getattribute__(self, "side")):
                return getattr(inner, attr)
            return getattr(Guard(), attr)
        return object.__getattribute__(self, attr)


def sided(guards: Iterable[Guard], side: str) -> list[Guard]:
    """``guards`` restricted to the hooks of one side of the split (``"runner"`` or ``"trusted"``)."""
    return [Sided(g, side) for g in guards]


_REGISTRY: dict[str, type[Guard]] = {}
_loaded = False


def register(cls: type[Guard]) -> type[Guard]:
    """Class decorator: add a guard to the registry under its ``name``.

    Raises:
        ConfigError: The name is empty or already taken by another class.
    """
    if not cls.name:
        raise ConfigError(f"guard class {cls.__qualname__} must set a non-empty `name`")
    existing = _REGISTRY.get(cls.name)
    if existing is not None and existing.__qualname__ != cls.__qualname__:
        raise ConfigError(f"guard name {cls.name!r} is taken by {existing.__qualname__}; pick another")
    _REGISTRY[cls.name] = cls
    return cls


def registry() -> dict[str, type[Guard]]:
    """Every registered guard class by name (imports the guard modules on first call)."""
    global _loaded
    if not _loaded:
        for module in GUARD_MODULES:
            importlib.import_module(module)
        _loaded = True
    return dict(_REGISTRY)


def guard_names() -> tuple[str, ...]:
    """Names of every guard, sorted."""
    return tuple(sorted(registry()))


def select_guards(spec: Iterable[str]) -> list[Guard]:
    """Instances of the guards a protocol names (``("all",)`` for every one), in hook order.

    Raises:
        ConfigError: A name is not a registered guard.
    """
    known = registry()
    names = list(spec)
    if ALL in names:
        chosen = list(known)
    else:
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise ConfigError(f"unknown guard(s) {', '.join(unknown)}; expected names from: {', '.join(sorted(known))}")
        chosen = list(dict.fromkeys(names))
    return sorted((known[n]() for n in chosen), key=lambda g: (g.order, g.name))
