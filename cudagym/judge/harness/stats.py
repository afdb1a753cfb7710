"""Statistics of timing samples: summaries, confidence intervals and the stopping rule.

Pure Python on lists of floats (microseconds), no torch: the GPU harness feeds it samples, the CPU tests
check it against hand-computed values.

The confidence interval of the median is distribution-free, from order statistics: for ``n`` sorted samples
the interval ``[x_(l), x_(n+1-l)]`` covers the true median with probability
``P(l <= B <= n - l)``, ``B ~ Binomial(n, 1/2)``; ``l`` is the largest index that keeps that probability at
or above the confidence. Timing samples are skewed (a long right tail from clock changes and preemption),
so no normality is assumed for the median. A percentile bootstrap is provided as a cross-check.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from cudagym.errors import ConfigError
from cudagym.judge.records import TimingStats

Statistic = Literal["median", "mean"]

# Exact binomial sums up to this many samples; beyond it the normal approximation is within 1e-3 of exact.
_EXACT_BINOMIAL_MAX_N = 2000


def median(samples: Sequence[float]) -> float:
    """The median (mean of the two middle values for an even count).

    Raises:
        ConfigError: ``samples`` is empty.
    """
    ordered = _sorted_nonempty(samples)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def mean(samples: Sequence[float]) -> float:
    """The arithmetic mean.

    Raises:
        ConfigError: ``samples`` is empty.
    """
    _sorted_nonempty(samples)
    return math.fsum(samples) / len(samples)


def quantile(samples: Sequence[float], q: float) -> float:
    """The ``q``-quantile with linear interpolation between order statistics (numpy's default method).

    Raises:
        ConfigError: ``samples`` is empty or ``q`` is outside [0, 1].
    """
    if not 0.0 <= q <= 1.0:
        raise ConfigError(f"expected a quantile in [0, 1], got {q}")
    ordered = _sorted_nonempty(samples)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics.

    Returns:
        ``(low, high)``; ``(-inf, inf)`` when there are too few samples for the confidence (n < 6 at 95%).

    Raises:
        ConfigError: ``samples`` is empty or ``confidence`` is outside (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"expected a confidence in (0, 1), got {confidence}")
    ordered = _sorted_nonempty(samples)
    rank = _median_ci_rank(len(ordered), confidence)
    if rank == 0:
        return (-math.inf, math.inf)
    return (ordered[rank - 1], ordered[len(ordered) - rank])


def mean_ci_halfwidth(samples: Sequence[float], confidence: float = 0.95) -> float:
    """Half-width of the Student-t confidence interval of the mean; ``inf`` for fewer than 2 samples."""
    n = len(samples)
    if n < 2:
        return math.inf
    m = mean(samples)
    var = math.fsum((x - m) ** 2 for x in samples) / (n - 1)
    return _student_t_quantile(0.5 + confidence / 2.0, n - 1) * math.sqrt(var / n)


def bootstrap_median_ci(
    samples: Sequence[float], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the median (a cross-check of :func:`median_ci`)."""
    ordered = _sorted_nonempty(samples)
    rng = random.Random(seed)
    n = len(ordered)
    medians = sorted(median([ordered[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    alpha = (1.0 - confidence) / 2.0
    return (quantile(medians, alpha), quantile(medians, 1.0 - alpha))


def ci_halfwidth_pct(samples: Sequence[float], statistic: Statistic = "median") -> float:
    """Half-width of the 95% confidence interval of ``statistic``, in % of the statistic; ``inf`` if unknown."""
    if statistic == "median":
        low, high = median_ci(samples)
        center = median(samples)
        halfwidth = (high - low) / 2.0
    elif statistic == "mean":
        center = mean(samples)
        halfwidth = mean_ci_halfwidth(samples)
    else:
        raise ConfigError(f"expected statistic 'median' or 'mean', got {statistic!r}")
    if not math.isfinite(halfwidth) or center <= 0.0:
        return math.inf
    return 100.0 * halfwidth / center


@dataclass(frozen=True)
class StoppingRule:
    """When to stop timing: at least ``min_runs``, then until the CI is tight enough, at most ``max_runs``.

    Attributes:
        min_runs: Timed calls at least.
        max_runs: Timed calls at most.
        target_ci_pct: Stop once the 95% CI half-width of ``statistic`` is within this % of it; 0 means
            run exactly ``min_runs``.
        statistic: ``median`` or ``mean``.
    """

    min_runs: int
    max_runs: int
    target_ci_pct: float
    statistic: Statistic = "median"

    def __post_init__(self) -> None:
        if self.min_runs < 1 or self.max_runs < self.min_runs:
            raise ConfigError(f"expected 1 <= min_runs <= max_runs, got {self.min_runs}, {self.max_runs}")
        if self.target_ci_pct < 0:
            raise ConfigError(f"expected target_ci_pct >= 0, got {self.target_ci_pct}")

    def done(self, samples: Sequence[float]) -> bool:
        """True when timing of one implementation with these samples may stop."""
        n = len(samples)
        if n < self.min_runs:
            return False
        if n >= self.max_runs or self.target_ci_pct == 0:
            return True
        return ci_halfwidth_pct(samples, self.statistic) <= self.target_ci_pct


def summarize(samples: Sequence[float]) -> TimingStats:
    """The :class:`TimingStats` of timing samples in microseconds (``runs == 0`` for no samples).

    ``ci95_halfwidth_pct`` is the median's; where too few samples give no 95% interval it is the
    half-range ``(max - min) / 2`` in % of the median, an under-covering stand-in.
    """
    if not samples:
        return TimingStats()
    med = median(samples)
    ci = ci_halfwidth_pct(samples, "median")
    if not math.isfinite(ci):
        ci = 100.0 * (max(samples) - min(samples)) / 2.0 / med if med > 0 else 0.0
    return TimingStats(
        median_us=med,
        mean_us=mean(samples),
        min_us=min(samples),
        max_us=max(samples),
        iqr_us=quantile(samples, 0.75) - quantile(samples, 0.25),
        ci95_halfwidth_pct=ci,
        runs=len(samples),
    )


def statistic_of(stats: TimingStats, statistic: Statistic) -> float:
    """The protocol's statistic (``median`` or ``mean``) of summarized timings, in microseconds."""
    return stats.median_us if statistic == "median" else stats.mean_us


def speedup(baseline: TimingStats, candidate: TimingStats, statistic: Statistic) -> float:
    """Baseline time / candidate time by ``statistic``; 0.0 when either was not timed."""
    if not (baseline.measured and candidate.measured):
        return 0.0
    cand = statistic_of(candidate, statistic)
    return statistic_of(baseline, statistic) / cand if cand > 0 else 0.0


# ------------------------------------------------------------------------------------------ internals


def _sorted_nonempty(samples: Sequence[float]) -> list[float]:
    if len(samples) == 0:
        raise ConfigError("expected at least one sample, got none")
    return sorted(samples)


@functools.lru_cache(maxsize=4096)
def _median_ci_rank(n: int, confidence: float) -> int:
    """Largest 1-based rank ``l`` with ``P(l <= B <= n - l) >= confidence``, B ~ Bin(n, 1/2); 0 if none."""
    if n > _EXACT_BINOMIAL_MAX_N:
        z = _normal_quantile(0.5 + confidence / 2.0)
        return max(0, math.floor(n / 2.0 - z * math.sqrt(n) / 2.0))
    # tail(l) = P(B <= l - 1); coverage = 1 - 2 * tail(l). Grow l while coverage stays >= confidence.
    # Exact integer arithmetic: 2**n overflows a float beyond n = 1023.
    alpha = Fraction(1.0 - confidence).limit_denominator(10**9)
    total = 2**n
    cumulative = 0  # sum_{k < l} C(n, k)
    rank = 0
    for candidate in range(1, n // 2 + 1):
        cumulative += math.comb(n, candidate - 1)
        if 2 * cumulative * alpha.denominator > alpha.numerator * total:
            break
        rank = candidate
    return rank


def _normal_quantile(p: float) -> float:
    """Inverse standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
         1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
         6.680131188771972e01, -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
         -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    if p < 0.02425:
        q = math.sqrt(-2.0 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0)
    if p > 1.0 - 0.02425:
        return -_normal_quantile(1.0 - p)
    q = p - 0.5
    r = q * q
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / (
        ((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0)


def _student_t_quantile(p: float, dof: int) -> float:
    """Student-t quantile by the Cornish-Fisher expansion around the normal (within 1% for dof >= 3)."""
    z = _normal_quantile(p)
    v = float(dof)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3))
