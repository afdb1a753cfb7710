"""The reward: pure functions from a judge's verdict to a number.

Tiered by default, exactly as ``DESIGN.md``'s table, with ``b(t, t0) = (t0 - t) / t0 > threshold``:

====  ===========================================================================
tier  condition (``t`` = candidate time)
====  ===========================================================================
-1    does not build, crashes, times out, is wrong, or breaks a rule
1     correct, not ``b(t, t_eager)``
2     correct, ``b(t, t_eager)`` and not ``b(t, t_compile)``
3     correct, ``b(t, t_eager)`` and ``b(t, t_compile)``
====  ===========================================================================

``t_eager`` and ``t_compile`` are the baselines as the judge compared them: times taken in the judge's clean
process, multiplied by the verdict's ``baseline_scale`` (the reference's time in the candidate's own runner over
eager's, where the protocol takes that yardstick), so the tier and the verdict's speedups agree. Under a protocol's
``tier_interval`` (``cudagym-v6``, ``kernelbench-v0.9``) ``b`` must also hold at the slow end of the speedup's 95%
interval, from the candidate's and that baseline's own intervals combined (the yardstick's for the baseline's where
it scaled them; where the scale is the yardstick over eager timed around it, ``yardstick_beside_eager``, the
baseline's own and both of the scale's).

A kernel that beats torch.compile but not eager earns 1: tier 3 needs both. The ``speedup`` mode is the
CUDA Agent paper's ablation (``t_compile / t`` when correct, -1 otherwise). A verdict that is not the
agent's doing (no GPU on the judge, the judge's own failure, a missing build tool) scores 0 and is marked
not evaluated. Intermediate steps score 0; the env decides when to score (see :mod:`cudagym.env`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from cudagym.errors import ConfigError
from cudagym.judge.records import BuildStatus, EvalResult, EvalStatus, TimingStats

RewardMode = Literal["tier", "speedup"]
Scoring = Literal["final", "best"]

REWARD_MODES: tuple[str, ...] = ("tier", "speedup")
SCORINGS: tuple[str, ...] = ("final", "best")
TIER_VALUES: tuple[float, ...] = (-1.0, 1.0, 2.0, 3.0)
WRONG = -1.0
NOT_EVALUATED = 0.0

# Verdicts that say nothing about the candidate: the judge could not look at it.
_NOT_AGENTS_FAULT = frozenset({EvalStatus.NO_GPU, EvalStatus.INFRA_ERROR, EvalStatus.TASK_TOO_LARGE})


@dataclass(frozen=True)
class RewardConfig:
    """How verdicts become rewards.

    Attributes:
        mode: ``tier`` (-1/1/2/3, the default) or ``speedup`` (``t_compile / t`` when correct, -1 otherwise).
        scoring: ``final`` scores the submitted state; ``best`` scores the best evaluated state of the episode.
        threshold_vs_eager: Fraction faster than eager needed for tier 2 (0.05 = 5%).
        threshold_vs_compile: Fraction faster than torch.compile needed (with eager) for tier 3.
        statistic: Which timing statistic is compared: ``median`` or ``mean``.
        interval: A tier step also needs the speedup beyond its threshold by the timing's own 95% interval (the
            candidate's and the baseline's, combined); a protocol's ``tier_interval`` (``cudagym-v6`` on). The
            ``speedup`` mode's reward is the point estimate either way.
    """

    mode: RewardMode = "tier"
    scoring: Scoring = "final"
    threshold_vs_eager: float = 0.05
    threshold_vs_compile: float = 0.05
    statistic: Literal["median", "mean"] = "median"
    interval: bool = False

    def __post_init__(self) -> None:
        if self.mode not in REWARD_MODES:
            raise ConfigError(f"expected reward mode in {REWARD_MODES}, got {self.mode!r}")
        if self.scoring not in SCORINGS:
            raise ConfigError(f"expected scoring in {SCORINGS}, got {self.scoring!r}")
        for name in ("threshold_vs_eager", "threshold_vs_compile"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ConfigError(f"expected {name} in [0, 1), got {value!r}; 0.05 means 5% faster")
        if self.statistic not in ("median", "mean"):
            raise ConfigError(f"expected statistic 'median' or 'mean', got {self.statistic!r}")
        if not isinstance(self.interval, bool):
            raise ConfigError(f"expected interval to be True or False, got {self.interval!r}")


@dataclass(frozen=True)
class Score:
    """One verdict scored.

    Attributes:
        reward: The number the env returns.
        tier: -1, 1, 2 or 3 (0 when not evaluated), whatever the mode.
        evaluated: False when the verdict says nothing about the candidate (no GPU, judge failure).
        speedup_vs_eager: ``t_eager / t`` (0 when not timed).
        speedup_vs_compile: ``t_compile / t`` (0 when not timed).
        status: The verdict's status value.
        interval_pct: The 95% interval the eager tier step had to clear beyond its threshold (0: none asked).
    """

    reward: float
    tier: int
    evaluated: bool
    speedup_vs_eager: float = 0.0
    speedup_vs_compile: float = 0.0
    status: str = ""
    interval_pct: float = 0.0


# A gain this close to the threshold (relative) is the threshold: 0.95 us against 1.0 us is exactly 5% faster,
# though (1.0 - 0.95) / 1.0 rounds to 0.05000000000000004 in binary floating point. No timer resolves 1e-9.
_THRESHOLD_REL_TOL = 1e-9


def is_faster(candidate_us: float, baseline_us: float, threshold: float) -> bool:
    """``b(t, t0)``: the candidate is more than ``threshold`` (a fraction) faster than the baseline.

    Exactly ``threshold`` faster is not more: a gain within a relative 1e-9 of the threshold counts as equal
    to it, so a decimal-exact 5% (0.95 vs 1.0, 1.9 vs 2.0) is not faster whatever the float rounding.
    """
    if candidate_us <= 0 or baseline_us <= 0:
        return False
    gain = (baseline_us - candidate_us) / baseline_us
    return gain > threshold and not math.isclose(gain, threshold, rel_tol=_THRESHOLD_REL_TOL, abs_tol=1e-15)


def tier_of(
    candidate_us: float,
    eager_us: float,
    compile_us: float,
    *,
    threshold_vs_eager: float = 0.05,
    threshold_vs_compile: float = 0.05,
) -> int:
    """Tier of a correct candidate: 3 if faster than eager and compile, 2 if faster than eager only, else 1.

    A time of 0 means not measured, which never counts as faster.
    """
    if not is_faster(candidate_us, eager_us, threshold_vs_eager):
        return 1
    if is_faster(candidate_us, compile_us, threshold_vs_compile):
        return 3
    return 2


def speedup(baseline_us: float, candidate_us: float) -> float:
    """``baseline / candidate``; 0 when either was not measured."""
    if candidate_us <= 0 or baseline_us <= 0:
        return 0.0
    return baseline_us / candidate_us


def is_evaluated(result: EvalResult) -> bool:
    """False when the verdict is not about the candidate: no GPU, the judge's failure, a missing build tool."""
    if result.status in _NOT_AGENTS_FAULT:
        return False
    return not (result.status is EvalStatus.BUILD_FAILED and result.build.status is BuildStatus.TOOL_ERROR)


def score(result: EvalResult, config: RewardConfig = RewardConfig()) -> Score:  # noqa: B008 - frozen default
    """Score one verdict under ``config`` (pure: same inputs, same score)."""
    status = result.status.value
    if not is_evaluated(result):
        return Score(reward=NOT_EVALUATED, tier=0, evaluated=False, status=status)
    if not result.correct:
        return Score(reward=WRONG, tier=-1, evaluated=True, status=status)
    t = _time_us(result.candidate, config.statistic)
    # the baselines as the judge compared them: moved into the candidate's process by its yardstick, where taken
    scale = _baseline_scale(result)
    t_eager = _time_us(result.eager, config.statistic) * scale
    t_compile = _time_us(result.compiled, config.statistic) * scale
    margin_eager = margin_compile = 0.0
    if config.interval:  # the yardstick's interval where it scaled the baselines, else each baseline's own
        scaled = scale != 1.0 and result.runner_reference.measured
        if scaled and not result.eager_beside_yardstick.measured:  # the speedup is the yardstick over the candidate
            margin_eager = margin_compile = _interval(result.candidate, result.runner_reference)
        else:  # scaled by the yardstick over eager timed around it: the baseline's own interval and both of the scale's
            scaling = (result.runner_reference, result.eager_beside_yardstick) if scaled else ()
            margin_eager = _interval(result.candidate, result.eager, *scaling)
            margin_compile = _interval(result.candidate, result.compiled, *scaling)
    # b(t, t0) at the slow end of the interval: t0 * (1 - margin) against t is t against t0 / (1 - margin)
    tier = tier_of(
        t, t_eager * (1.0 - margin_eager), t_compile * (1.0 - margin_compile),
        threshold_vs_eager=config.threshold_vs_eager, threshold_vs_compile=config.threshold_vs_compile,
    )
    vs_eager, vs_compile = speedup(t_eager, t), speedup(t_compile, t)
    reward = float(tier) if config.mode == "tier" else vs_compile
    return Score(
        reward=reward, tier=tier, evaluated=True,
        speedup_vs_eager=vs_eager, speedup_vs_compile=vs_compile, status=status, interval_pct=100.0 * margin_eager,
    )


def _interval(*times: TimingStats) -> float:
    """The speedup's relative 95% half-width from its times' own (a fraction; 1 where one is unknown: no step)."""
    halves = tuple(t.ci95_halfwidth_pct for t in times)
    if not all(isinstance(h, (int, float)) and math.isfinite(h) and h >= 0 for h in halves):
        return 1.0
    return min(1.0, math.hypot(*halves) / 100.0)


def better(a: Score, b: Score) -> bool:
    """True when ``a`` ranks above ``b``: evaluated first, then reward, then speedup over torch.compile."""
    return (a.evaluated, a.reward, a.speedup_vs_compile) > (b.evaluated, b.reward, b.speedup_vs_compile)


def best_of(scores: Iterable[Score]) -> Score:
    """The best score of an episode (``scoring="best"``); a not-evaluated zero when there is none."""
    best = Score(reward=NOT_EVALUATED, tier=0, evaluated=False)
    for s in scores:
        if better(s, best):
            best = s
    return best


def reward_config(
    spec: str | RewardConfig | dict[str, Any] | None,
    *,
    threshold: float = 0.05,
    statistic: str = "median",
    interval: bool = False,
) -> RewardConfig:
    """Resolve a reward option: a mode name, a dict of :class:`RewardConfig` fields, or a config.

    Args:
        spec: ``"tier"``, ``"speedup"``, a dict such as ``{"mode": "tier", "scoring": "best"}``, a
            :class:`RewardConfig`, or None for the default.
        threshold: The protocol's threshold, used for both baselines unless ``spec`` sets them.
        statistic: The protocol's statistic, unless ``spec`` sets one.
        interval: The protocol's ``tier_interval``, unless ``spec`` sets ``interval``.

    Raises:
        ConfigError: Unknown mode, scoring, field or threshold.
    """
    if isinstance(spec, RewardConfig):
        return spec
    base: dict[str, Any] = {
        "threshold_vs_eager": threshold, "threshold_vs_compile": threshold, "statistic": statistic,
        "interval": interval,
    }
    if spec is None:
        return RewardConfig(**base)
    if isinstance(spec, str):
        return RewardConfig(mode=spec, **base)  # type: ignore[arg-type]
    if isinstance(spec, dict):
        fields = set(RewardConfig.__dataclass_fields__)
        unknown = sorted(set(spec) - fields)
        if unknown:
            raise ConfigError(f"expected reward fields among {sorted(fields)}, got unknown {unknown}")
        return RewardConfig(**{**base, **spec})
    raise ConfigError(
        f"expected reward as 'tier', 'speedup', a dict or a RewardConfig, got {type(spec).__name__}"
    )


def _baseline_scale(result: EvalResult) -> float:
    scale = result.baseline_scale
    if not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"the verdict's baseline_scale must be a positive finite number, got {scale!r} (a judge "
                         f"of protocol {result.protocol_id!r} wrote it)")
    return float(scale)


def _time_us(stats: TimingStats, statistic: str) -> float:
    return stats.median_us if statistic == "median" else stats.mean_us
