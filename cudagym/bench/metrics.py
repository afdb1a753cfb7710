"""Benchmark metrics: pure functions from episode summaries to the numbers of a report.

Definitions (``s`` is a speedup ``t_baseline / t_candidate``; "correct" means the verdict's tier is >= 1):

- **pass rate**: correct episodes / episodes.
- **faster than eager / than torch.compile**: correct and more than ``threshold`` (5%) faster than that
  baseline, ``(t0 - t) / t0 > threshold``, as CUDA Agent's tiers decide it (:func:`cudagym.reward.is_faster`).
- **geomean speedup**: the geometric mean of ``s`` over the correct, timed episodes (0 when there are none).
- **fast_p** (KernelBench): the fraction of all episodes that are correct *and* have ``s > p``.
- **pass@k**: the unbiased estimator of Chen et al. (2021), ``1 - C(n - c, k) / C(n, k)`` per task with
  ``n`` samples of which ``c`` are correct, averaged over the tasks with ``n >= k``.

Every rate has all episodes of its group as denominator, the not-evaluated ones too (a run without a GPU
scores 0 everywhere and says so in its ``evaluated`` count).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from cudagym.errors import ConfigError
from cudagym.judge.protocol import get_protocol
from cudagym.judge.records import EvalResult, from_dict
from cudagym.reward import Score, best_of, is_faster, reward_config, score
from cudagym.rollout import EpisodeRecord
from cudagym.toolcalls import ActionError, parse_action

FAST_P: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
TIERS: tuple[int, ...] = (-1, 0, 1, 2, 3)  # 0: not evaluated
DEFAULT_THRESHOLD = 0.05
OVERALL = "overall"


@dataclass(frozen=True)
class Outcome:
    """One verdict, scored.

    Attributes:
        tier: -1, 1, 2 or 3; 0 when the verdict says nothing about the candidate (or there was none).
        status: The verdict's status (or why there was none, e.g. ``agent_error``).
        speedup_vs_eager: ``t_eager / t`` (0 when not timed).
        speedup_vs_compile: ``t_compile / t`` (0 when not timed).
        threshold: The fraction faster a baseline must be beaten by (the protocol's).
    """

    tier: int = 0
    status: str = "none"
    speedup_vs_eager: float = 0.0
    speedup_vs_compile: float = 0.0
    threshold: float = DEFAULT_THRESHOLD

    @property
    def correct(self) -> bool:
        """True when the candidate was judged correct."""
        return self.tier >= 1

    @property
    def evaluated(self) -> bool:
        """True when the verdict is about the candidate (not a missing GPU or a judge failure)."""
        return self.tier != 0

    def faster_than_eager(self) -> bool:
        """Correct and more than ``threshold`` faster than eager PyTorch."""
        return self.correct and is_faster(1.0, self.speedup_vs_eager, self.threshold)

    def faster_than_compile(self) -> bool:
        """Correct and more than ``threshold`` faster than torch.compile."""
        return self.correct and is_faster(1.0, self.speedup_vs_compile, self.threshold)


@dataclass(frozen=True)
class EpisodeSummary:
    """What the metrics need of one episode.

    Attributes:
        task_id: The task.
        level: The task's level.
        sample: Which of the K samples of the task (0-based).
        final: The final state's verdict (submit's, or the evaluation on truncation).
        best: The best verdict of the trajectory (any verify, profile or submit).
        reward: The env's reward.
        turns: Steps played.
        env_tokens: Env tokens of the episode (prompt, actions, observations).
        model_tokens: Model tokens the agent reported (prompt + completion), 0 when it reports none.
        invalid_actions: Actions that were not a valid tool call.
        longest_repeat: The longest run of one identical action.
        episode_end: ``submit``, ``max_turns``, ``token_budget``, ``max_steps`` or ``agent_error``.
        wall_time_s: Seconds the episode took.
    """

    task_id: str
    level: int
    sample: int
    final: Outcome = field(default_factory=Outcome)
    best: Outcome = field(default_factory=Outcome)
    reward: float = 0.0
    turns: int = 0
    env_tokens: int = 0
    model_tokens: int = 0
    invalid_actions: int = 0
    longest_repeat: int = 0
    episode_end: str = ""
    wall_time_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (inverse: :meth:`from_dict`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpisodeSummary:
        """Rebuild a summary from :meth:`to_dict` output.

        Raises:
            ConfigError: A field is missing or unknown.
        """
        try:
            summary = cls(**{**data, "final": Outcome(**data["final"]), "best": Outcome(**data["best"])})
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"expected an episode summary (EpisodeSummary.to_dict()), got an error: {exc}") from exc
        for where, record in (("", summary), ("final.", summary.final), ("best.", summary.best)):
            _check_types(record, where)
        return summary


# What each field of a summary and an outcome must hold: a hand-edited or damaged journal line is refused with the
# field named, before a metric compares a text with a number deep inside the report.
_FIELD_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,)}


def _check_types(record: EpisodeSummary | Outcome, where: str) -> None:
    """Raise a ConfigError naming the first scalar field of ``record`` whose value has another type."""
    for name, declared in record.__annotations__.items():
        types = _FIELD_TYPES.get(str(declared))
        value = getattr(record, name)
        if types is None or (not isinstance(value, bool) and isinstance(value, types)):
            continue
        raise ConfigError(f"expected the summary's {where}{name} to be {declared}, got {type(value).__name__} "
                          f"{value!r}; the journal line was edited or damaged")


def outcome_of(verdict: Mapping[str, Any]) -> Outcome:
    """Score a verdict (``info["last_eval"]``, an ``EvalResult`` as a dict) under its protocol's threshold."""
    if not verdict:
        return Outcome()
    result = from_dict(EvalResult, dict(verdict))
    return _outcome(score(result, _config(result.protocol_id)), result.protocol_id)


def summarize(record: EpisodeRecord, *, level: int, sample: int) -> EpisodeSummary:
    """The summary of one played episode (final-state and best-of-trajectory verdicts scored)."""
    ended = record.terminated or record.truncated
    final = outcome_of(record.last_eval) if ended else Outcome(status=record.episode_end or "unfinished")
    scored = [(_score_verdict(t.verdict), t.verdict) for t in record.turns if t.verdict]
    best_score = best_of(s for s, _ in scored)
    best = next((outcome_of(v) for s, v in scored if s is best_score), Outcome())
    actions = [t.action for t in record.turns]
    model = record.model_tokens
    return EpisodeSummary(
        task_id=record.task_id, level=level, sample=sample, final=final, best=best, reward=record.reward,
        turns=len(record.turns), env_tokens=record.tokens_used,
        model_tokens=int(model.get("prompt_tokens", 0)) + int(model.get("completion_tokens", 0)),
        invalid_actions=sum(isinstance(parse_action(a), ActionError) for a in actions),
        longest_repeat=longest_run(actions), episode_end=record.episode_end, wall_time_s=record.wall_time_s,
    )


def longest_run(items: Sequence[str]) -> int:
    """The length of the longest run of equal consecutive items (0 for none)."""
    best = run = 0
    for i, item in enumerate(items):
        run = run + 1 if i and item == items[i - 1] else 1
        best = max(best, run)
    return best


def geomean(values: Iterable[float]) -> float:
    """The geometric mean of the positive values (0 when there are none)."""
    logs = [math.log(v) for v in values if v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else 0.0


def fast_p(outcomes: Sequence[Outcome], p: float, *, baseline: str = "eager") -> float:
    """KernelBench's fast_p: the fraction of ``outcomes`` that are correct with a speedup above ``p``."""
    if not outcomes:
        return 0.0
    hits = sum(o.correct and _speedup(o, baseline) > p for o in outcomes)
    return hits / len(outcomes)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task: ``1 - C(n - c, k) / C(n, k)`` (Chen et al. 2021).

    Raises:
        ConfigError: Not ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ConfigError(f"expected 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass(frozen=True)
class GroupMetrics:
    """The Table-1 row of one group of episodes (a level, or all of them) under one scoring.

    Attributes:
        group: The level as text, or ``overall``.
        scoring: ``final`` (the submitted state) or ``best`` (the best state of the trajectory).
        episodes: Episodes in the group.
        tasks: Distinct tasks in the group.
        evaluated: Episodes whose verdict is about the candidate.
        pass_rate: Correct / episodes.
        faster_than_eager: Correct and >threshold faster than eager / episodes.
        faster_than_compile: Correct and >threshold faster than torch.compile / episodes.
        geomean_speedup_vs_eager: Over the correct, timed episodes.
        geomean_speedup_vs_compile: Over the correct, timed episodes.
        tiers: Tier (-1, 0, 1, 2, 3) -> episodes.
        fast_p_eager: p -> fast_p against eager.
        fast_p_compile: p -> fast_p against torch.compile.
        pass_at: k -> pass@k (only when some task has more than one sample).
        mean_turns: Turns per episode.
        mean_env_tokens: Env tokens per episode.
        mean_model_tokens: Model tokens per episode (0 when the agent reports none).
    """

    group: str
    scoring: str
    episodes: int
    tasks: int
    evaluated: int
    pass_rate: float
    faster_than_eager: float
    faster_than_compile: float
    geomean_speedup_vs_eager: float
    geomean_speedup_vs_compile: float
    tiers: Mapping[int, int]
    fast_p_eager: Mapping[float, float]
    fast_p_compile: Mapping[float, float]
    pass_at: Mapping[int, float]
    mean_turns: float
    mean_env_tokens: float
    mean_model_tokens: float


def group_metrics(summaries: Sequence[EpisodeSummary], *, group: str, scoring: str = "final") -> GroupMetrics:
    """The metrics of ``summaries`` scored by their ``final`` or ``best`` outcome.

    Raises:
        ConfigError: ``scoring`` is not ``final`` or ``best``.
    """
    if scoring not in ("final", "best"):
        raise ConfigError(f"expected scoring 'final' or 'best', got {scoring!r}")
    outcomes = [getattr(s, scoring) for s in summaries]
    n = len(outcomes)
    correct = [o for o in outcomes if o.correct]
    tiers = Counter(o.tier for o in outcomes)
    return GroupMetrics(
        group=group, scoring=scoring, episodes=n, tasks=len({s.task_id for s in summaries}),
        evaluated=sum(o.evaluated for o in outcomes),
        pass_rate=_rate(len(correct), n),
        faster_than_eager=_rate(sum(o.faster_than_eager() for o in outcomes), n),
        faster_than_compile=_rate(sum(o.faster_than_compile() for o in outcomes), n),
        geomean_speedup_vs_eager=geomean(o.speedup_vs_eager for o in correct),
        geomean_speedup_vs_compile=geomean(o.speedup_vs_compile for o in correct),
        tiers={t: tiers.get(t, 0) for t in TIERS},
        fast_p_eager={p: fast_p(outcomes, p, baseline="eager") for p in FAST_P},
        fast_p_compile={p: fast_p(outcomes, p, baseline="compile") for p in FAST_P},
        pass_at=_pass_at(summaries, scoring),
        mean_turns=_mean(s.turns for s in summaries),
        mean_env_tokens=_mean(s.env_tokens for s in summaries),
        mean_model_tokens=_mean(s.model_tokens for s in summaries),
    )


def by_level(summaries: Sequence[EpisodeSummary], *, scoring: str = "final") -> list[GroupMetrics]:
    """One :class:`GroupMetrics` per level (in level order), then the overall one."""
    levels: dict[int, list[EpisodeSummary]] = defaultdict(list)
    for s in summaries:
        levels[s.level].append(s)
    rows = [group_metrics(levels[lv], group=str(lv), scoring=scoring) for lv in sorted(levels)]
    return [*rows, group_metrics(summaries, group=OVERALL, scoring=scoring)]


def pass_ks(max_samples: int) -> list[int]:
    """The k reported for ``max_samples`` samples per task: 1, the powers of two below it, and itself."""
    if max_samples < 2:
        return []
    return sorted({1, max_samples, *(2**i for i in range(1, max_samples.bit_length()) if 2**i <= max_samples)})


def _pass_at(summaries: Sequence[EpisodeSummary], scoring: str) -> dict[int, float]:
    per_task: dict[str, list[bool]] = defaultdict(list)
    for s in summaries:
        per_task[s.task_id].append(getattr(s, scoring).correct)
    out: dict[int, float] = {}
    for k in pass_ks(max((len(v) for v in per_task.values()), default=0)):
        values = [pass_at_k(len(v), sum(v), k) for v in per_task.values() if len(v) >= k]
        out[k] = _mean(values)
    return out


def _score_verdict(verdict: Mapping[str, Any]) -> Score:
    result = from_dict(EvalResult, dict(verdict))
    return score(result, _config(result.protocol_id))


def _config(protocol_id: str) -> Any:
    try:
        protocol = get_protocol(protocol_id or None)
    except ConfigError:  # a verdict of a protocol this install does not know: the default threshold
        return reward_config(None, threshold=DEFAULT_THRESHOLD)
    return reward_config(None, threshold=protocol.threshold, statistic=protocol.statistic,
                         interval=protocol.tier_interval)


def _outcome(s: Score, protocol_id: str) -> Outcome:
    return Outcome(tier=s.tier, status=s.status, speedup_vs_eager=s.speedup_vs_eager,
                   speedup_vs_compile=s.speedup_vs_compile, threshold=_config(protocol_id).threshold_vs_eager)


def _speedup(o: Outcome, baseline: str) -> float:
    return o.speedup_vs_eager if baseline == "eager" else o.speedup_vs_compile


def _rate(hits: int, n: int) -> float:
    return hits / n if n else 0.0


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0
