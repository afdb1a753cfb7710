"""The Gymnasium environment: an agent writes CUDA kernels for a PyTorch reference through text tool calls."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode

from cudagym import env_options
from cudagym.errors import ConfigError, UnknownTaskError
from cudagym.judge.backends import JUDGES, check_option_names, options_key
from cudagym.judge.interface import EvalMode, Judge
from cudagym.judge.protocol import Protocol, get_protocol
from cudagym.judge.records import EvalResult, Hardware, to_dict
from cudagym.observation import MIN_RESULT_CHARS, render_eval, render_score, truncate
from cudagym.prompt import EpisodeLimits, build_prompt
from cudagym.reward import RewardConfig, Score, better, reward_config, score
from cudagym.solution import Solution, SolutionFormat, get_format
from cudagym.spaces import UnicodeText
from cudagym.task import Task
from cudagym.toolcalls import (
    JUDGE_TOOLS,
    TOOL_NAMES,
    ActionError,
    ToolCall,
    may_name_judge_tool,
    parse_action,
    tool_schemas,
)
from cudagym.tools import ToolContext, ToolResult, evaluate_solution, run_tool
from cudagym.workspace import Workspace, WorkspaceLimits

logger = logging.getLogger(__name__)

MAX_OBSERVATION_CHARS = 1 << 20  # the prompt and every observation are cut to this (a visible marker shows it)
# suite_options that say where the data is or how to read it, not which tasks to keep
_DATA_OPTIONS = frozenset({"root", "parquet", "path", "revision", "refresh", "strict"})


@dataclass
class _Episode:
    """The mutable state of one episode."""

    task: Task
    workspace: Workspace
    hardware: Hardware
    turn: int = 0
    tokens_used: int = 0
    done: bool = False
    last_eval: EvalResult | None = None
    # What scoring needs of the evaluated states, not all of them: each holds a snapshot of up to
    # max_files * max_file_bytes, and an agent that verifies every turn would keep hundreds alive.
    last: tuple[Score, Solution] | None = None  # the latest verdict's score and the state it judged
    best: tuple[Score, Solution] | None = None  # the first state that earned the best score so far


class CudaKernelEnv(gym.Env[str, str]):
    """An agent makes a PyTorch module faster by writing CUDA kernels through text tool calls.

    ## Description

    Each episode is one task: a PyTorch reference module in KernelBench format (``class Model``,
    ``get_inputs()``, ``get_init_inputs()``). The agent works in a fresh workspace directory holding the
    read-only ``INSTRUCTIONS.md`` (the prompt) and ``model.py`` (the reference), the solution format's
    protected files, and the writable ``model_new.py`` and ``kernels/``. It reads and edits files, builds,
    checks and times its solution, and submits. A judge (``cudagym.judge``) builds and evaluates
    solutions in its own processes under a fixed protocol; this process never runs candidate code.

    ## Action Space

    ``UnicodeText(0, 1048576)``: a string holding one tool call, either a JSON object
    ``{"name": "write_file", "arguments": {"path": "model_new.py", "content": "..."}}`` (``arguments`` may
    be a JSON string) or free text with the call inside ``<tool_call>{...}</tool_call>``; when several
    tagged calls are present the first runs. Tools: ``read_file(path, offset?, limit?)``,
    ``write_file(path, content)``, ``edit_file(path, old, new, replace_all?)``, ``list_files(path?)``,
    ``compile()``, ``verify()``, ``profile()``, ``submit()``. Their JSON schemas are
    ``env.unwrapped.tool_schemas``. A malformed action, an unknown tool or bad arguments is not run: the
    observation says what was wrong and shows the expected form, and it counts as a turn.

    ## Observation Space

    ``UnicodeText(0, 1048576)``: text. At reset, the task prompt (rules, tools, the solution format with
    a worked example, the judge's GPU and protocol, the reference source). After each step, the tool's
    result: file contents, compiler errors with file:line and per-kernel registers/shared memory/spills,
    per-input correctness with max abs/rel error, rule violations, timing tables against eager and
    torch.compile, the per-kernel breakdown. Tool results are cut to ``max_result_chars`` with a visible
    marker. ``info`` holds the same facts as JSON-serialisable values: ``task_id``, ``turn``, ``tool``,
    ``ok``, ``error``, ``tokens_used``, ``token_counter``, ``evaluated`` and, once something was
    evaluated, ``last_eval`` (``cudagym.judge.records.to_dict`` of an ``EvalResult``).

    ## Rewards

    0 on every step but the last. At the end of the episode, the final evaluation (the judge's
    ``SUBMIT`` mode on the workspace's files) is scored, in the default ``tier`` mode:

    - -1: does not build, crashes, times out, is wrong, or breaks a rule
    - 1: correct, not more than 5% faster than eager PyTorch
    - 2: correct, more than 5% faster than eager, not than torch.compile
    - 3: correct, more than 5% faster than both eager and torch.compile
    - 0: not evaluated: the judge has no GPU, or the judge itself failed (``info["evaluated"]`` is False)

    The thresholds are the protocol's (5% by default). ``reward="speedup"`` gives torch.compile time /
    candidate time when correct and -1 otherwise (the CUDA Agent paper's ablation). ``scoring="best"``
    scores the best evaluated state of the episode instead of the final one; the best state is re-judged
    in ``SUBMIT`` mode when it is not the final one, so every reward comes from a full evaluation.

    ## Starting State

    A task drawn uniformly from the task list with ``self.np_random`` (deterministic for a seed), or the
    one named by ``reset(options={"task": "L1/19_ReLU"})``; a fresh workspace with no solution files.
    ``task`` (an id, a ``Task``, or None to draw one) is the only reset option: options that are not a dict,
    another key or another type raise ``ConfigError``; an id that is not in the task list, ``UnknownTaskError``.

    ## Episode End

    1. Termination: the agent calls ``submit()``.
    2. Truncation: ``max_turns`` tool calls were made (each action is a turn, malformed or not).
    3. Truncation: ``token_budget`` tokens were used (the prompt, every action and every observation,
       counted with ``token_counter``; ``info["token_counter"]`` names it).

    A truncated episode is judged on its files as they are (``evaluate_on_truncation``). The registered
    ``max_episode_steps`` (gym.make's TimeLimit) equals the default ``max_turns``; when you raise
    ``max_turns``, pass the same ``max_episode_steps`` so TimeLimit does not end the episode first.

    ## Arguments

    ```python
    import gymnasium as gym
    env = gym.make("cudagym:CudaKernel-L1-v0", suite_options={"root": "/data/KernelBench"}, reward="tier")
    obs, info = env.reset(seed=0, options={"task": "L1/19_ReLU"})
    ```

    | parameter | type | default | description |
    |---|---|---|---|
    | suite | str | "bundled" | task suite: kernelbench, ops6k or bundled |
    | level | int or None | None | level filter (KernelBench level, bundled level, Ops-6K op count) |
    | tasks | str or list of str or None | None | exactly these task ids, in this order (one id: a str) |
    | task_filter | callable or None | None | keep only tasks for which it returns True |
    | suite_options | dict or None | None | forwarded to the suite loader: data paths and filters |
    | solution_format | str | "extension" | extension, inline or raw |
    | protocol | str or Protocol or None | None | evaluation protocol (the judge's own when None) |
    | judge | str or Judge | "local" | a judge backend name ("local", "ray") or a Judge instance |
    | judge_options | dict or None | None | the backend's options as plain data; envs with equal ones share a judge |
    | reward | str or dict or RewardConfig | "tier" | tier or speedup, or a RewardConfig |
    | scoring | str or None | None | final or best (the reward config's own when None) |
    | token_counter | object | None | a name, tiktoken Encoding, HF tokenizer or callable; shipped BPE when None |
    | max_turns | int | 200 | tool calls before truncation |
    | token_budget | int | 131072 | tokens before truncation |
    | max_action_chars | int | 1048576 | longest action accepted |
    | max_result_chars | int | 32000 | longest tool result before it is cut with a marker (at least 92) |
    | evaluate_on_truncation | bool | True | judge the files when the episode is truncated |
    | workspace_limits | WorkspaceLimits or dict or None | None | file size and count caps (a dict: some fields) |
    | workspace_dir | str or None | None | an existing folder where workspaces are made (the temp dir when None) |
    | render_mode | str or None | None | None or "ansi" (the last observation) |

    Every argument is checked when the env is made (``suite_options`` and ``level`` when the tasks first load,
    ``judge_options``' values when the judge is made at the first reset; their keys at once): a wrong type, a count
    or size below 1 (``max_result_chars`` below 92), an unknown key or name is a ``cudagym.errors.ConfigError``
    that names the argument, what it expects and what it got.

    ## Version History

    * v0: Initial version: tiered reward (-1/1/2/3), eight text tools, tool calls as JSON or
      ``<tool_call>`` tags, truncation at 200 turns or 131,072 tokens.
    * v0, token counting fixed (no id change): ``token_budget`` is counted with the shipped
      ``cudagym:code-bpe-16k`` unless ``token_counter`` names another. Before, the default was tiktoken's
      ``o200k_base`` where it happened to be cached or downloadable and the shipped BPE elsewhere, so the
      same episode was cut off at different points on different hosts; ``info["token_counter"]`` says which
      counted. Pass ``token_counter="o200k_base"`` for the old count where o200k_base is available.
    """

    # render_fps: a text env has no frame rate; 1 keeps gymnasium's checker from warning about it
    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 1, "autoreset_mode": AutoresetMode.NEXT_STEP}
    _parsed: tuple[str, ToolCall | ActionError] | None = None  # waits_on_judge's parse, kept for step()

    def __init__(
        self,
        suite: str = "bundled",
        *,
        level: int | None = None,
        tasks: str | Sequence[str] | None = None,
        task_filter: Callable[[Task], bool] | None = None,
        suite_options: Mapping[str, Any] | None = None,
        solution_format: str = "extension",
        protocol: str | Protocol | None = None,
        judge: str | Judge = "local",
        judge_options: Mapping[str, Any] | None = None,
        reward: str | Mapping[str, Any] | RewardConfig = "tier",
        scoring: str | None = None,
        token_counter: Any = None,
        max_turns: int = 200,
        token_budget: int = 131072,
        max_action_chars: int = 1 << 20,
        max_result_chars: int = 32000,
        evaluate_on_truncation: bool = True,
        workspace_limits: WorkspaceLimits | Mapping[str, int] | None = None,
        workspace_dir: str | os.PathLike[str] | None = None,
        render_mode: str | None = None,
    ) -> None:
        # Every option is checked here, where it enters (cudagym.env_options says where each one's check lives).
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ConfigError(f"expected render_mode None or 'ansi', got {render_mode!r}")
        for name, value in (("max_turns", max_turns), ("token_budget", token_budget),
                            ("max_action_chars", max_action_chars), ("max_result_chars", max_result_chars)):
            env_options.positive_int(name, value)
        if max_result_chars < MIN_RESULT_CHARS:  # a shorter cut could not show its marker
            raise ConfigError(f"expected max_result_chars >= {MIN_RESULT_CHARS} (room for the truncation marker and "
                              f"some of the result), got {max_result_chars}")
        self._suite = env_options.suite_name(suite)
        self._level = level
        self._task_ids = env_options.task_ids(tasks)
        self._task_filter = env_options.task_filter(task_filter)
        self._suite_options = env_options.plain_dict("suite_options", suite_options)
        given = self._suite_options.get("level")
        if level is not None and given is not None and given != level:  # the id's level would win in silence
            raise ConfigError(f"suite_options level={given!r} contradicts this env's level {level} (its id names "
                              "the level); use the env id of that level, or leave level out of suite_options")
        if not isinstance(judge, Judge) and not (isinstance(judge, str) and judge in JUDGES):
            raise ConfigError(f"expected judge to be a Judge or one of {sorted(JUDGES)}, got {judge!r}")
        self._format = get_format(solution_format)
        self._protocol = self._resolve_protocol(protocol, judge)
        if judge_options and isinstance(judge, Judge):
            raise ConfigError("judge_options configure a judge backend by name; a Judge instance is already "
                              "configured: pass one or the other")
        self._judge_options = env_options.plain_dict("judge_options", judge_options)
        options_key(self._judge_options)  # plain data, or a clear error now rather than in a sub-process
        if isinstance(judge, str):
            check_option_names(judge, self._judge_options)  # a misspelt key now, not at the first reset
        self._judge_spec = judge
        self._judge: Judge | None = judge if isinstance(judge, Judge) else None
        reward_spec = dict(reward) if isinstance(reward, Mapping) else reward
        config = reward_config(reward_spec, threshold=self._protocol.threshold, statistic=self._protocol.statistic,
                               interval=self._protocol.tier_interval)
        self.reward_config: RewardConfig = (  # RewardConfig checks scoring
            replace(config, scoring=scoring) if scoring is not None else config)  # type: ignore[arg-type]
        self._counter_spec = token_counter
        self._counter: Any = None
        self.max_turns = max_turns
        self.token_budget = token_budget
        self.max_result_chars = max_result_chars
        self.evaluate_on_truncation = env_options.flag("evaluate_on_truncation", evaluate_on_truncation)
        self.workspace_limits = WorkspaceLimits.of(workspace_limits)
        self._workspace_dir = env_options.workspace_dir(workspace_dir)
        self.render_mode = render_mode
        self.max_action_chars = max_action_chars
        self.max_observation_chars = MAX_OBSERVATION_CHARS
        self.action_space = UnicodeText(max_action_chars)
        self.observation_space = UnicodeText(MAX_OBSERVATION_CHARS)
        self._pool: tuple[Task, ...] | None = None
        self._episode: _Episode | None = None
        self._last_observation = ""

    # -- public properties --------------------------------------------------------------------------

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function-calling schemas, for native function calling."""
        return tool_schemas()

    @property
    def tool_names(self) -> tuple[str, ...]:
        """Names of the tools an action may call."""
        return TOOL_NAMES

    @property
    def solution_format(self) -> SolutionFormat:
        """The solution format agents write."""
        return self._format

    @property
    def protocol(self) -> Protocol:
        """The evaluation protocol."""
        return self._protocol

    @property
    def workspace(self) -> Workspace | None:
        """The current episode's workspace (None before the first reset and after close)."""
        return self._episode.workspace if self._episode else None

    @property
    def task(self) -> Task | None:
        """The current episode's task (None before the first reset)."""
        return self._episode.task if self._episode else None

    @property
    def tasks(self) -> tuple[Task, ...]:
        """The task list episodes are drawn from (loads it on first use)."""
        return self._task_pool()

    # -- gymnasium API ------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on a task drawn from the seed, or the one ``options["task"]`` names.

        Raises:
            ConfigError: ``options`` is not a dict, holds a key other than ``task``, or a ``task`` that is not a
                str, a Task or None.
            UnknownTaskError: ``options["task"]`` is not one of this env's tasks.
        """
        wanted = env_options.reset_options(options)
        super().reset(seed=seed)
        self._end_episode()
        task = self._pick_task(wanted)
        judge = self._get_judge()
        hardware = judge.hardware()
        prompt = build_prompt(
            task, fmt=self._format, protocol=self._protocol, hardware=hardware, reward=self.reward_config,
            limits=EpisodeLimits(self.max_turns, self.token_budget, self._token_counter().name,
                                 self.workspace_limits),
        )
        workspace = self._new_workspace(prompt, task)
        self._episode = _Episode(task=task, workspace=workspace, hardware=hardware)
        observation = _valid_text(truncate(prompt, self.max_observation_chars))
        self._episode.tokens_used = self._count(observation)
        self._last_observation = observation
        return observation, self._info(None, reward_evaluated=False)

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """Run the tool call in ``action``; never raises for what the action holds."""
        ep = self._require_episode()
        call = self._parse(action)  # parse (errors are data)
        result = run_tool(call, self._context(ep))  # dispatch; the evaluation tools call the judge
        ep.turn += 1
        self._record(ep, result)
        text = truncate(result.text, self.max_result_chars)  # format
        ep.tokens_used += self._count(action if isinstance(action, str) else "") + self._count(text)
        terminated = result.ends_episode
        truncated = not terminated and (ep.turn >= self.max_turns or ep.tokens_used >= self.token_budget)
        reward, evaluated = 0.0, False
        if terminated or truncated:  # reward: only the episode's end is scored
            final, ending = self._finish(ep, truncated)
            reward, evaluated = final.reward, final.evaluated
            ep.tokens_used += self._count("\n\n" + ending)
            text = f"{text}\n\n{ending}"
            ep.done = True
        observation = _valid_text(truncate(text, self.max_observation_chars))
        if self._episode is ep:  # a reset() during this step (another thread) started a new episode: keep its
            self._last_observation = observation  # observation; this result goes to this step's caller only
        info = self._info(result, reward_evaluated=evaluated, ep=ep)
        if terminated or truncated:
            info["episode_end"] = "submit" if terminated else self._truncation_cause(ep)
        return observation, reward, terminated, truncated, info

    def render(self) -> str | None:
        """The last observation (``render_mode="ansi"``); None otherwise."""
        return self._last_observation if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Remove the workspace and stop a judge this env created; safe to call twice."""
        self._end_episode()
        if self._judge is not None and not isinstance(self._judge_spec, Judge):
            self._judge.close()  # also drops this env's jobs that no GPU has started
            self._judge = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_parsed", None)
        if not isinstance(self._judge_spec, Judge):
            state["_judge"] = None  # a judge this env made (workers, pipes) is made again where unpickled
        if self._counter_spec is None:
            state["_counter"] = None
        return state

    def waits_on_judge(self, action: object) -> bool:
        """True when ``step(action)`` would wait on the judge: a build or evaluation tool, or the last turn.

        A scheduling hint: the vector env starts such sub-envs first, so that their builds run while the
        others' file tools do. The parse is kept for a ``step()`` that follows with this same action (an
        episode cut off by ``token_budget`` also waits on its final evaluation; that is not foreseen here).
        """
        ep = self._episode
        if ep is None or ep.done:
            return False
        if ep.turn + 1 >= self.max_turns and self.evaluate_on_truncation:
            return True
        if isinstance(action, str) and not may_name_judge_tool(action):
            return False
        call = parse_action(action, max_chars=self.max_action_chars)
        if isinstance(action, str):
            self._parsed = (action, call)
        return isinstance(call, ToolCall) and call.name in JUDGE_TOOLS

    # -- the parts of reset and step ----------------------------------------------------------------

    def _parse(self, action: object) -> ToolCall | ActionError:
        parsed, self._parsed = self._parsed, None
        if parsed is not None and parsed[0] is action:
            return parsed[1]
        return parse_action(action, max_chars=self.max_action_chars)

    def _context(self, ep: _Episode) -> ToolContext:
        return ToolContext(ep.workspace, ep.task, self._get_judge(), ep.hardware)

    def _record(self, ep: _Episode, result: ToolResult) -> None:
        if result.evaluation is not None and result.solution is not None:
            ep.last_eval = result.evaluation
            self._remember(ep, score(result.evaluation, self.reward_config), result.solution)

    @staticmethod
    def _remember(ep: _Episode, scored: Score, solution: Solution) -> None:
        """Keep a verdict's score and state as the latest, and as the best when it ranks above every earlier one."""
        ep.last = (scored, solution)
        if ep.best is None or better(scored, ep.best[0]):
            ep.best = (scored, solution)

    def _finish(self, ep: _Episode, truncated: bool) -> tuple[Score, str]:
        """The episode's reward and the text that ends its last observation."""
        lines = []
        if truncated:
            lines.append(f"The episode was cut off ({self._truncation_cause(ep)}).")
            if not self.evaluate_on_truncation:
                final = Score(reward=0.0, tier=0, evaluated=False, status="not evaluated on truncation")
                return final, "\n".join([*lines, render_score(final, scoring="final")])
            solution = ep.workspace.snapshot()
            verdict = evaluate_solution(self._context(ep), solution, EvalMode.SUBMIT)
            ep.last_eval = verdict
            self._remember(ep, score(verdict, self.reward_config), solution)
            lines.append("Final evaluation of the files as they are:\n" + render_eval(verdict, "submit"))
        assert ep.last is not None  # submit's verdict, or the one just made on truncation
        final = ep.last[0]
        if self.reward_config.scoring == "best":
            final = self._best(ep, final, lines)
        lines.append(render_score(final, scoring=self.reward_config.scoring))
        return final, "\n".join(lines)

    def _best(self, ep: _Episode, final: Score, lines: list[str]) -> Score:
        # Only SUBMIT-mode verdicts become rewards: a better earlier state is judged again in SUBMIT mode
        # (its verify/profile verdict may have skipped the re-verification of suspicious speedups).
        assert ep.best is not None and ep.last is not None
        best_score, solution = ep.best
        if not better(best_score, final):
            return final
        final_solution = ep.last[1]
        if solution.content_hash == final_solution.content_hash:
            return final
        verdict = evaluate_solution(self._context(ep), solution, EvalMode.SUBMIT)
        lines.append("Best evaluated state, judged again in submit mode:\n" + render_eval(verdict, "submit"))
        rejudged = score(verdict, self.reward_config)
        ep.last_eval = verdict if better(rejudged, final) else ep.last_eval
        return rejudged if better(rejudged, final) else final

    def _info(self, result: ToolResult | None, *, reward_evaluated: bool, ep: _Episode | None = None) -> dict[str, Any]:
        ep = ep if ep is not None else self._require_episode(allow_done=True)
        info: dict[str, Any] = {
            "task_id": ep.task.id,
            "suite": ep.task.suite,
            "level": ep.task.level,
            "turn": ep.turn,
            "tool": result.tool if result else "",
            "ok": result.ok if result else True,
            "error": result.error if result else "",
            "tokens_used": ep.tokens_used,
            "token_budget": self.token_budget,
            "token_counter": self._token_counter().name,
            "max_turns": self.max_turns,
            "solution_format": self._format.name,
            "protocol_id": self._protocol.id,
            "gpu": ep.hardware.gpu,
            "evaluated": reward_evaluated,
        }
        if ep.last_eval is not None:
            info["last_eval"] = to_dict(ep.last_eval)
        return info

    def _truncation_cause(self, ep: _Episode) -> str:
        return "max_turns" if ep.turn >= self.max_turns else "token_budget"

    def _require_episode(self, allow_done: bool = False) -> _Episode:
        if self._episode is None:
            raise ResetNeeded("expected reset() before step(): no episode is running")
        if self._episode.done and not allow_done:
            raise ResetNeeded("expected reset() after the episode ended (terminated or truncated)")
        return self._episode

    def _end_episode(self) -> None:
        if self._episode is not None:
            if self._judge is not None and not isinstance(self._judge_spec, Judge):
                self._judge.cancel_pending()  # jobs of the old episode that no GPU has started have no reader
            self._episode.workspace.close()
            self._episode = None

    # -- lazily built collaborators -----------------------------------------------------------------

    def _task_pool(self) -> tuple[Task, ...]:
        if self._pool is None:
            from cudagym.suites import load_source

            filters = dict(self._suite_options)
            if self._level is not None:
                filters["level"] = self._level
            source = load_source(self._suite, **filters)
            pool = source.tasks() if self._task_ids is None else tuple(source.get(i) for i in self._task_ids)
            if self._task_filter is not None:
                pool = tuple(t for t in pool if self._task_filter(t))
            if not pool:
                skipped = getattr(source, "skipped", 0)
                raise UnknownTaskError(self._empty_pool_message(source.describe(), filters, skipped))
            self._pool = tuple(pool)
            _warn_missing_modules(self._pool)
        return self._pool

    def _empty_pool_message(self, where: str, filters: Mapping[str, Any], skipped: int) -> str:
        """Why no task is left: the filters that were set, or the data itself (and its malformed rows)."""
        chosen = {k: v for k, v in filters.items() if k not in _DATA_OPTIONS and v is not None}
        if self._task_filter is not None:
            chosen["task_filter"] = getattr(self._task_filter, "__qualname__", "a callable")
        bad = f"; {skipped} malformed row(s) or file(s) were skipped (strict=True in suite_options names them)" \
            if skipped else ""
        if chosen:
            shown = ", ".join(f"{k}={v!r}" for k, v in chosen.items())
            return f"no task of suite {self._suite!r} in {where} matched {shown}{bad}; loosen these filters"
        return f"suite {self._suite!r} loaded no task from {where}: the data holds none{bad}; check the data"

    def _new_workspace(self, prompt: str, task: Task) -> Workspace:
        try:
            return Workspace.create(instructions=prompt, reference=task.source, fmt=self._format,
                                    limits=self.workspace_limits, parent=self._workspace_dir)
        except OSError as exc:
            if self._workspace_dir is None:
                raise
            raise ConfigError(f"expected workspace_dir to be a folder this process can make folders in, got "
                              f"{self._workspace_dir!r} ({exc.strerror or exc})") from exc

    def _pick_task(self, options: Mapping[str, Any]) -> Task:
        wanted = options.get("task")
        if isinstance(wanted, Task):
            return wanted
        pool = self._task_pool()
        if wanted is None:
            return pool[int(self.np_random.integers(len(pool)))]
        for task in pool:
            if task.id == wanted:
                return task
        raise UnknownTaskError(
            f"reset(options={{'task': {wanted!r}}}): expected one of this env's {len(pool)} tasks "
            f"(suite {self._suite!r}){_did_you_mean(str(wanted), [t.id for t in pool])}; pass tasks=[...] or "
            "another suite to reach it"
        )

    def _get_judge(self) -> Judge:
        if self._judge is None:
            spec = self._judge_spec
            if not isinstance(spec, str) or spec not in JUDGES:
                raise ConfigError(f"expected judge to be a Judge or one of {sorted(JUDGES)}, got {spec!r}")
            factory = JUDGES[spec]
            self._judge = factory(self._protocol, **self._judge_options) if self._judge_options else factory(
                self._protocol)
        return self._judge

    def _token_counter(self) -> Any:
        if self._counter is None:
            from cudagym.tokens import get_token_counter

            self._counter = get_token_counter(self._counter_spec)
        return self._counter

    def _count(self, text: str) -> int:
        from cudagym.tokens import count_remembered

        # an action may hold lone surrogates (a str from anywhere); no tokenizer but the shipped one encodes them
        return int(count_remembered(self._token_counter(), _valid_text(text))) if text else 0

    @staticmethod
    def _resolve_protocol(protocol: str | Protocol | None, judge: str | Judge) -> Protocol:
        if isinstance(judge, Judge):
            if protocol is not None and get_protocol(protocol).id != judge.protocol.id:
                raise ConfigError(
                    f"expected protocol to match the judge's ({judge.protocol.id}), got "
                    f"{get_protocol(protocol).id}; configure the judge with it, or leave protocol unset"
                )
            return judge.protocol
        return get_protocol(protocol)


def _valid_text(text: str) -> str:
    """``text`` as valid Unicode: each lone surrogate becomes U+FFFD (pairs join); ``text`` itself when it has none.

    Observations must encode as UTF-8 (tokenizers, JSON journals and chat endpoints refuse lone surrogates), and
    an action's token count must not raise for the characters the agent sent.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", errors="surrogatepass").decode("utf-16", errors="replace")
    return text


def _warn_missing_modules(pool: Sequence[Task]) -> None:
    """One warning when tasks import an optional package that is not installed (KernelBench level 4)."""
    from cudagym.suites import OPTIONAL_TASK_MODULES, missing_task_modules

    for module, users in missing_task_modules(pool).items():
        logger.warning(
            "%d task(s) (e.g. %s) import %s, which is not installed: their references cannot run in the GPU "
            "worker; pip install \"cudagym[%s]\"", len(users), users[0], module, OPTIONAL_TASK_MODULES[module])


def _did_you_mean(wanted: str, ids: Sequence[str]) -> str:
    """``; did you mean ...?`` with ids ending in ``wanted`` (``19_ReLU`` -> ``L1/19_ReLU``) or close to it."""
    import difflib

    suffix = [i for i in ids if i.endswith("/" + wanted.lstrip("/"))]
    close = suffix or difflib.get_close_matches(wanted, ids, n=3, cutoff=0.6)
    if not close:
        return f", e.g. {ids[0]!r}" if ids else ""
    return f"; did you mean {', '.join(repr(c) for c in close[:3])}?"
