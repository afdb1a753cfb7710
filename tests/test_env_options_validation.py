"""Every gym.make option and reset option is checked where it enters: a bad value is a ConfigError naming it.

Each bad value goes through the public API (gym.make, env.reset, env.step, a protocol name), as a user passes it;
the good forms of the same options still work.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest_env import TOKENIZER, act
from fakes import FakeJudge

from cudagym.errors import ConfigError, UnknownTaskError
from cudagym.judge.build.process import BuildLimits
from cudagym.judge.protocol import CUDAGYM_V0, EXTRA_SETTINGS, get_protocol
from cudagym.workspace import WorkspaceLimits

ENV_ID = "CudaKernel-Bundled-v0"  # the bundled tasks ship with cudagym: no data to fetch
SWISH = "bundled/L1/01_Swish"


def make(**options: Any) -> gym.Env[str, str]:
    """The bundled env through gym.make, on a FakeJudge and the shipped tokenizer unless ``options`` say else."""
    return gym.make(ENV_ID, **{"judge": FakeJudge(), "token_counter": TOKENIZER, **options})


@pytest.mark.parametrize(("option", "value"), [
    ("protocol", 5),
    ("protocol", ["cudagym"]),
    ("solution_format", ["raw"]),
    ("solution_format", 5),
    ("suite", 5),
    ("tasks", [5]),
    ("tasks", []),
    ("tasks", {SWISH: 1}),
    ("task_filter", 5),
    ("suite_options", ["x"]),
    ("suite_options", "root=/data"),
    ("judge_options", ["x"]),
    ("evaluate_on_truncation", "no"),
    ("evaluate_on_truncation", 1),
    ("workspace_limits", {"max_files": -1}),
    ("workspace_limits", {"max_filez": 1}),
    ("workspace_limits", 5),
    ("workspace_limits", WorkspaceLimits),  # the class, not an instance
    ("workspace_dir", 5),
    ("workspace_dir", "/nonexistent/cudagym-ws"),
    ("max_turns", 0),
    ("max_turns", 2.5),
    ("token_budget", -1),
    ("max_action_chars", True),
    ("max_result_chars", "32000"),
    ("scoring", ""),
    ("scoring", 5),
])
def test_a_bad_make_option_is_a_config_error_naming_it(option: str, value: object) -> None:
    kwargs = {option: value}
    if option == "judge_options":
        kwargs["judge"] = "local"  # judge_options configure a backend by name
    with pytest.raises(ConfigError, match=option):
        make(**kwargs)


@pytest.mark.parametrize(("field", "value"), [
    ("max_files", -1), ("max_files", 0), ("max_file_bytes", 0), ("max_path_chars", "x"), ("max_depth", 0),
    ("max_read_bytes", 1.5), ("max_depth", True),
])
def test_workspace_limits_refuse_a_cap_that_is_not_a_positive_int(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"workspace_limits.{field}"):
        WorkspaceLimits(**{field: value})
    with pytest.raises(ConfigError, match=f"workspace_limits.{field}"):
        make(workspace_limits={field: value})


@pytest.mark.parametrize(("option", "value"), [
    ("suite_options", {"root": 5}),
    ("suite_options", {"root": None, "levels": "1"}),
    ("level", "x"),
])
def test_a_bad_suite_value_is_refused_when_the_tasks_load(option: str, value: object) -> None:
    env = make(**{option: value})
    with pytest.raises(ConfigError, match="root|level"):
        env.reset(seed=0)
    env.close()


@pytest.mark.parametrize(("spec", "names"), [
    ("cudagym[build_timeout_s=-1]", "build_timeout_s"),
    ("cudagym[build_timeout_s=0]", "build_timeout_s"),
    ("cudagym[build_max_output_bytes=0]", "build_max_output_bytes"),
    ("cudagym[build_max_artifact_bytes=-5]", "build_max_artifact_bytes"),
    ("cudagym[build_max_log_chars=1.5]", "build_max_log_chars"),
    ("cudagym[build_compiler_memory_bytes=big]", "build_compiler_memory_bytes"),
    ("cudagym[suspicious_speedup_x=0]", "suspicious_speedup_x"),
    ("cudagym[claim_slack_us=-1]", "claim_slack_us"),
    ("cudagym[bracket_slack_us=-1]", "bracket_slack_us"),
    ("cudagym[module_mode=training]", "module_mode"),
    ("cudagym[allow_fast_math=1]", "allow_fast_math"),
    ("cudagym[arm_wait_ms=-1]", "arm_wait_ms"),
    ("cudagym[arm_wait_mss=200]", "arm_wait_mss"),  # a misspelt key is not silently a no-op
])
def test_a_bad_or_unknown_probe_setting_is_refused(spec: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        get_protocol(spec)
    with pytest.raises(ConfigError, match=names):
        make(judge="local", protocol=spec)


@pytest.mark.parametrize(("field", "value"), [
    ("build_timeout_s", -1.0), ("build_timeout_s", 0), ("eval_timeout_s", 0.0), ("num_inputs", 2.0),
    ("seed", -1), ("atol", -1e-4), ("rtol", float("nan")), ("warmup_runs", -1), ("min_runs", "5"),
    ("target_ci_pct", -0.5), ("runner_reference_runs", -1), ("threshold", -0.1), ("threshold", 1.0),
    ("atol_scale", -0.01), ("scaled_inputs", (0.0,)), ("scaled_inputs", 4.0), ("launch_cover_max_us", -1.0),
    ("l2_flush", 1), ("interleave", "yes"),
])
def test_every_numeric_protocol_field_refuses_what_makes_no_sense(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        CUDAGYM_V0.with_changes(id="bad", **{field: value})


def test_every_build_limit_has_its_probe_setting() -> None:
    for f in dataclasses.fields(BuildLimits):
        assert f"build_{f.name}" in EXTRA_SETTINGS


@pytest.mark.parametrize(("options", "match"), [
    ("x", "reset options"),
    (["task"], "reset options"),
    ({"bogus": 1}, "'bogus'.*'task'"),
    ({"tsak": SWISH}, "'tsak'"),
    ({"task": 5}, r"options\['task'\]"),
    ({"task": [SWISH]}, r"options\['task'\]"),
])
def test_bad_reset_options_are_a_config_error(options: object, match: str) -> None:
    env = make()
    with pytest.raises(ConfigError, match=match):
        env.reset(seed=0, options=options)  # type: ignore[arg-type]
    env.close()


def test_an_unknown_task_is_still_an_unknown_task_error() -> None:
    env = make()
    with pytest.raises(UnknownTaskError, match="did you mean"):
        env.reset(options={"task": "L1/01_Swish"})
    env.close()


def test_the_vector_env_refuses_a_reset_mask_it_would_ignore() -> None:
    venv = gym.make_vec(ENV_ID, num_envs=2, judge=FakeJudge(), token_counter=TOKENIZER)
    with pytest.raises(ConfigError, match="reset_mask"):
        venv.reset(seed=0, options={"reset_mask": np.array([True, False])})
    with pytest.raises(ConfigError, match="'bogus'"):
        venv.reset(seed=0, options={"bogus": 1})
    venv.close()


def test_gymnasiums_own_vector_env_takes_its_reset_mask_before_the_sub_envs() -> None:
    venv = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="sync", judge=FakeJudge(), token_counter=TOKENIZER)
    venv.reset(seed=0, options={"task": SWISH})
    obs, _ = venv.reset(options={"reset_mask": np.array([True, False]), "task": SWISH})
    assert obs[0].startswith("# Task:")
    venv.close()


def test_good_values_in_each_form_still_work(tmp_path: Path) -> None:
    env = make(tasks=SWISH, solution_format="raw", protocol="cudagym-v5",
               judge=FakeJudge(protocol=get_protocol("cudagym-v5")), suite_options={"root": None},
               workspace_limits={"max_files": 1}, workspace_dir=tmp_path, evaluate_on_truncation=False,
               scoring="best", max_turns=5, task_filter=lambda task: True)
    assert [t.id for t in env.unwrapped.tasks] == [SWISH]  # one id, not its letters
    assert env.unwrapped.workspace_limits == WorkspaceLimits(max_files=1)
    obs, info = env.reset(seed=0, options={"task": SWISH})
    assert info["task_id"] == SWISH and "at most 1 writable files" in obs
    assert str(env.unwrapped.workspace.root).startswith(str(tmp_path))
    first = env.step(act("write_file", path="model_new.py", content="x = 1\n"))
    second = env.step(act("write_file", path="kernels/a.cu", content="// a\n"))
    assert first[4]["ok"] and not second[4]["ok"] and "cap" in second[0]  # the cap acts, as data
    for options in (None, {}, {"task": None}, {"task": env.unwrapped.tasks[0]}):
        assert env.reset(seed=1, options=options)[1]["task_id"] == SWISH
    env.close()
    limits = WorkspaceLimits(max_file_bytes=10, max_files=2)
    assert make(workspace_limits=limits).unwrapped.workspace_limits is limits
    assert make(tasks=(SWISH,)).unwrapped.tasks[0].id == SWISH


def test_good_protocol_forms_still_work() -> None:
    probe = get_protocol("cudagym[build_timeout_s=30,build_max_output_bytes=4096,allow_fast_math=true,"
                         "module_mode=train,suspicious_speedup_x=20,claim_slack_us=0]")
    assert probe.extra == {"build_timeout_s": 30, "build_max_output_bytes": 4096, "allow_fast_math": True,
                           "module_mode": "train", "suspicious_speedup_x": 20, "claim_slack_us": 0}
    limits = BuildLimits.from_protocol(probe)
    assert limits.timeout_s == 30 and limits.max_output_bytes == 4096
    assert get_protocol(probe.id) == probe  # its id resolves to it again
    assert make(judge="local", protocol=probe.id).unwrapped.protocol.id == probe.id
    assert make(judge="local", protocol=probe).unwrapped.protocol is probe
    edge = CUDAGYM_V0.with_changes(id="edge", warmup_runs=0, target_ci_pct=0, runner_reference_runs=0, atol=0,
                                   build_timeout_s=12, scaled_inputs=[4, 0.5])
    assert edge.scaled_inputs == (4, 0.5)  # a list from JSON is kept as a tuple
    assert json.loads(json.dumps(dataclasses.asdict(edge)))["build_timeout_s"] == 12


def test_a_suite_options_level_that_contradicts_the_env_ids_level_is_refused() -> None:
    import gymnasium as gym

    with pytest.raises(ConfigError, match="suite_options level=2 contradicts this env's level 1"):
        gym.make("CudaKernel-L1-v0", suite_options={"level": 2})

