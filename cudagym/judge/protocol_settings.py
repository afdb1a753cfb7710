"""What each setting of a :class:`~cudagym.judge.protocol.Protocol` may hold, checked when a protocol is made.

A protocol is made from a preset with ``with_changes``, from a JSON record, or from a probe's name
``NAME[key=value,...]`` whose settings go to ``Protocol.extra``: each way, a value that makes no sense (a negative
timeout, a count that is not a whole number, a text where a number goes, a probe setting nobody reads) is a
:class:`~cudagym.errors.ConfigError` naming the setting, what it expects and what it got.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cudagym.errors import ConfigError


@dataclass(frozen=True)
class Rule:
    """What one setting may hold.

    Attributes:
        kind: ``number`` (an int or a float), ``whole`` (an int), ``flag`` (a bool) or ``text``.
        low: The least number allowed (left out where ``above`` is set).
        high: The greatest number allowed (left out where ``below`` is set).
        above: Only numbers above ``low``.
        below: Only numbers below ``high``.
        choices: The texts allowed.
    """

    kind: str
    low: float = 0.0
    high: float = math.inf
    above: bool = False
    below: bool = False
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        """What the setting expects, in words (``a number in [0, 1000]``)."""
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "flag":
            return "true or false"
        noun = "a whole number" if self.kind == "whole" else "a number"
        if self.high == math.inf:
            return f"{noun} {'>' if self.above else '>='} {self.low:g}"
        return f"{noun} in {'(' if self.above else '['}{self.low:g}, {self.high:g}{')' if self.below else ']'}"

    def admits(self, value: Any) -> bool:
        """Whether ``value`` is allowed (never a bool for a number, nor NaN or infinity)."""
        if self.choices:
            return isinstance(value, str) and value in self.choices
        if self.kind == "flag":
            return isinstance(value, bool)
        types = (int,) if self.kind == "whole" else (int, float)
        if isinstance(value, bool) or not isinstance(value, types) or not math.isfinite(value):
            return False
        return (value > self.low if self.above else value >= self.low) and (
            value < self.high if self.below else value <= self.high)


FLAG = Rule("flag")
POSITIVE = Rule("number", above=True)

# The numeric fields and what makes sense for each (0 where the docstring gives 0 a meaning); a value outside is a
# ConfigError naming the field when the protocol is made (with_changes, a JSON record, a NAME[...] probe).
NUMBER_FIELDS: dict[str, Rule] = {
    "num_inputs": Rule("whole", 1),
    "seed": Rule("whole", 0),
    "atol": Rule("number"),
    "rtol": Rule("number"),
    "warmup_runs": Rule("whole"),
    "warmup_ms": Rule("number", 0, 60_000),
    "min_runs": Rule("whole", 1),
    "max_runs": Rule("whole", 1),
    "target_ci_pct": Rule("number", 0, 100),
    "launch_cover_us": Rule("number", 0, 10_000),
    "launch_cover_max_us": Rule("number", 0, 10_000),
    "runner_reference_runs": Rule("whole", 0, 1000),
    "runner_reference_batch": Rule("whole", 0, 1000),
    "arm_wait_ms": Rule("number", 0, 1000),
    "runner_queues": Rule("whole", 0, 32),
    "threshold": Rule("number", 0, 1, below=True),
    "atol_scale": Rule("number"),
    "build_timeout_s": POSITIVE,
    "eval_timeout_s": POSITIVE,
}
FLAG_FIELDS = ("retake_leaked_baselines", "late_reference_floor", "l2_flush", "interleave", "flat_reference_note",
               "yardstick_beside_eager", "tier_interval")

# The settings a probe may put in Protocol.extra (``NAME[key=value,...]``), each read where it acts; any other key
# is refused, so a misspelt one cannot leave the preset's value in force under an id that names it. The build_*
# keys are the fields of cudagym.judge.build.process.BuildLimits (a test keeps the two in step).
EXTRA_SETTINGS: dict[str, Rule] = {
    "arm_wait_ms": NUMBER_FIELDS["arm_wait_ms"],  # overrides Protocol.arm_wait_ms
    "runner_reference_batch": NUMBER_FIELDS["runner_reference_batch"],  # overrides the field of that name
    "yardstick_beside_eager": FLAG,  # overrides the field of that name
    "runner_queues": NUMBER_FIELDS["runner_queues"],  # overrides the field of that name (the runner's start)
    "module_mode": Rule("text", choices=("eval", "train")),  # harness: the models in .eval() or .train()
    # harness: a job that looks its baselines up takes the yardstick from the cache too ("cached"), or times the
    # reference in its own runner every time ("retimed": the rate's control, issue 15), or every job takes the clean
    # baseline job's, SUBMIT too ("clean": with yardstick_beside_eager, one scale per task; the split's spread,
    # issue 13)
    "yardstick": Rule("text", choices=("cached", "retimed", "clean")),
    # split: bracketed calls' outputs read by the judge from the shared heap, or copied by the runner into the output
    # arena (a probe's comparison; the copy is what a white-box runner can skip: cudagym.judge.split.heap)
    "delivery": Rule("text", choices=("heap", "copy")),
    "suspicious_speedup_x": POSITIVE,  # guards/speedup.py: re-verify above this speedup over eager
    "claim_slack_us": Rule("number"),  # harness: a timed call's claim may exceed its bracket by this much
    "bracket_slack_us": Rule("number"),  # harness: the late-call bracket's slack
    "allow_fast_math": FLAG,  # build: the inline format's fast-math flags allowed
    # SUBMIT: the forward's kernels named by Nsight Compute from outside the runner (cudagym.judge.attribution)
    "attribution": Rule("text", choices=("ncu",)),
    "build_timeout_s": POSITIVE,  # build: BuildLimits.timeout_s (else Protocol.build_timeout_s)
    "build_max_output_bytes": Rule("whole", 1),
    "build_max_artifact_bytes": Rule("whole", 1),
    "build_max_log_chars": Rule("whole", 1),
    "build_compiler_memory_bytes": Rule("whole", 1),
}


def check_setting(where: str, name: str, value: Any, rule: Rule) -> None:
    """Raise :class:`ConfigError` ``{where}: expected {name} ..., got ...`` unless ``rule`` admits ``value``."""
    if not rule.admits(value):
        raise ConfigError(f"{where}: expected {name} {rule.describe()}, got {value!r}")


def number_tuple(where: str, name: str, values: Any) -> tuple[float, ...]:
    """``values`` as a tuple of positive finite numbers (a list from JSON or a caller is fine)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (tuple, list)) or not all(
            POSITIVE.admits(v) for v in values):
        raise ConfigError(f"{where}: expected {name} a tuple of numbers > 0, got {values!r}")
    return tuple(values)
