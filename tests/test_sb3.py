"""Launch-configuration tuning for Stable-Baselines3: the kernel families, the numeric env, check_env, PPO."""

from __future__ import annotations

import warnings
from dataclasses import asdict
from typing import Any

import numpy as np
import pytest
from conftest_env import TOKENIZER
from fakes import FakeJudge, incorrect_result
from script_module import load_script

from cudagym.errors import ConfigError
from cudagym.integrations import kernel_families
from cudagym.integrations.kernel_families import FAMILIES, get_family
from cudagym.integrations.launch_params import Family, LaunchParams, all_params
from cudagym.integrations.matmul_families import TileParams, TinyParams
from cudagym.integrations.sb3 import FEATURES, LaunchTuningEnv
from cudagym.integrations.stencil_families import StencilParams
from cudagym.judge.build.kernel_signature import parse_kernels

sb3 = pytest.importorskip("stable_baselines3")
from stable_baselines3.common.env_checker import check_env  # noqa: E402


def test_every_family_renders_every_configuration() -> None:
    configs = list(all_params())
    assert len(configs) == 60 and len(set(configs)) == 60
    for family in FAMILIES.values():
        space = family.space
        ordered = list(space.configs())
        assert family.default in ordered and len(set(ordered)) == space.size
        for params in ordered:
            assert space.decode(space.indices(params)) == params and ordered[space.flat(params)] == params
            files = family.files(params)
            assert set(files) == {"model_new.py", f"kernels/{family.name}.cu"}
            source = files[f"kernels/{family.name}.cu"]
            kernels = parse_kernels(source)
            assert kernels and source.count("__launch_bounds__(") == len(kernels), family.task_id
            assert all(f"kernels.{k.name}(grid=" in files["model_new.py"] for k in kernels), family.task_id
            assert space.label(params).replace("x", " ").split() == [str(v) for v in asdict(params).values()]
            compile(files["model_new.py"], "model_new.py", "exec")  # valid Python
            if isinstance(params, LaunchParams):
                vt = {1: "float", 2: "float2", 4: "float4"}[params.vector_width]
                assert f"__launch_bounds__({params.block_size})" in source and f"= {params.block_size}, " in \
                    files["model_new.py"]
                assert f"const {vt}" in source and (params.vector_width == 1 or "float4" not in source.replace(vt, ""))
    assert "float4" in get_family("bundled/L1/01_Swish").files(LaunchParams(vector_width=4))["kernels/swish.cu"]
    with pytest.raises(ConfigError, match="block_size"):
        LaunchParams(block_size=100)
    with pytest.raises(ConfigError, match="tile_m in"):
        TileParams(tile_m=48)


def test_the_tile_families_render_what_their_configuration_says() -> None:
    tril = get_family("bundled/L1/10_TrilMatmul")
    params = TileParams(tile_m=128, tile_n=32, tile_k=8, outputs_per_thread=32)
    assert params.threads == 128
    source = tril.files(params)["kernels/tril_matmul.cu"]
    assert "__launch_bounds__(128)" in source and "As[8][128]" in source and "float acc[8][4]" in source
    assert "if (col0 > row0 + 127)" in source  # tiles above the diagonal skip the K loop
    assert "erff" in get_family("bundled/L2/01_GemmGeluScaleShift").files(TileParams())[
        "kernels/gemm_gelu_scale_shift.cu"]
    dw = get_family("bundled/L2/02_DWConvBNReLU").files(StencilParams(64, 16, 4))
    source = dw["kernels/dwconv_bn_relu.cu"]
    assert "__launch_bounds__(256)" in source and "tile[18][66]" in source
    column = get_family("bundled/L1/14_SumSquaresDim1")
    assert [k.name for k in parse_kernels(column.files(column.default)["kernels/sum_squares_dim1.cu"])] == [
        "sum_squares_dim1", "sum_splits"]
    for task, names in (("bundled/L3/03_DWSeparableResidualBlock", ["dw_bn_relu", "pw_bn_residual"]),
                        ("bundled/L3/04_SEResidualBlock", ["channel_mean", "se_squeeze", "se_excite"])):
        family = get_family(task)
        assert [k.name for k in parse_kernels(family.files(family.default)[f"kernels/{family.name}.cu"])] == names
    tiny = get_family("bundled/L1/11_BatchedTinyMatmul").files(TinyParams(4, 256, 1))
    assert "__launch_bounds__(1024)" in tiny["kernels/tiny_bmm.cu"]
    with pytest.raises(ConfigError, match="indices below"):
        tril.space.decode([0, 0, 0, 3])


def test_every_bundled_task_has_a_family_named_in_the_module_docstring() -> None:
    from cudagym.sources.bundled import BundledSource

    bundled = {t.id for t in BundledSource().tasks()}
    assert set(FAMILIES) == bundled and len(bundled) == 26
    for task_id in bundled:
        assert task_id.removeprefix("bundled/") in kernel_families.__doc__, task_id
    with pytest.raises(ConfigError, match="expected a task with a kernel family"):
        get_family("bundled/L9/99_Nothing")


def test_each_family_model_keeps_the_reference_constructor_and_state_names() -> None:
    # the harness builds ModelNew from get_init_inputs() and loads the reference's state dict into it
    import torch

    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    for task_id, family in FAMILIES.items():
        task = source.get(task_id)
        reference: dict = {}
        exec(compile(task.source, task_id, "exec"), reference)
        code = family.files(family.default)["model_new.py"].replace(
            'kernels = runtime.load(', 'kernels = (lambda path: None)(')  # nothing to launch: construct only
        candidate: dict = {}
        exec(compile(code, "model_new.py", "exec"), candidate)
        init = reference["get_init_inputs"]()
        torch.manual_seed(0)
        ref_state = reference["Model"](*init).state_dict()
        new_state = candidate["ModelNew"](*init).state_dict()
        assert list(ref_state) == list(new_state), task_id
        assert all(ref_state[k].shape == new_state[k].shape for k in ref_state), task_id


def fake_env(task: str = "bundled/L1/01_Swish", **kwargs: object) -> LaunchTuningEnv:
    judge = kwargs.pop("judge", FakeJudge())
    return LaunchTuningEnv(task, judge=judge, env_kwargs={"token_counter": TOKENIZER}, **kwargs)  # type: ignore[arg-type]


def test_a_step_writes_the_solution_and_observes_the_verdict() -> None:
    judge = FakeJudge()
    env = fake_env(judge=judge, budget=2)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (len(FEATURES),) and not obs.any()
    obs, reward, terminated, truncated, info = env.step(np.array([2, 0, 2]))
    assert info["params"] == {"block_size": 256, "items_per_thread": 1, "vector_width": 4}
    assert reward == pytest.approx(100 / 90) and not terminated and not truncated
    named = dict(zip(FEATURES, obs, strict=True))
    assert named["tier"] == 2 and named["correct"] == 1 and named["registers"] == 16
    assert named["speedup_vs_eager"] == pytest.approx(100 / 90) and named["budget_spent"] == 0.5
    assert named["knob_2_index"] == 1.0 and named["knob_0_index"] == 0.5 and named["knob_3_index"] == 0
    files = env.inner.workspace.snapshot().files
    assert "swish(grid=(grid,)" in files["model_new.py"] and "__launch_bounds__(256)" in files["kernels/swish.cu"]
    assert judge.evaluations("profile")
    *_, truncated, _ = env.step(np.array([0, 0, 0]))
    assert truncated
    env.close()


def test_wrong_and_unevaluated_configurations() -> None:
    env = fake_env(judge=FakeJudge(eval_fn=lambda *a: incorrect_result()), action_space="discrete")
    env.reset()
    obs, reward, *_ = env.step(59)
    assert reward == -1.0 and obs[0] == -1
    assert env.decode(59) == LaunchParams(1024, 8, 4)
    with pytest.raises(ConfigError, match="expected an action"):
        env.step(60)
    env.close()
    cpu = fake_env(judge=FakeJudge(gpu="none"))
    cpu.reset()
    obs, reward, *_ = cpu.step(np.array([1, 1, 1]))
    assert reward == 0.0 and obs[1] == 0 and obs[3] == 1  # not evaluated, but built
    cpu.close()
    with pytest.raises(ConfigError, match="budget"):
        fake_env(budget=0)


@pytest.mark.parametrize("task", sorted(FAMILIES))
def test_check_env_passes_for_every_family_and_both_action_spaces(task: str) -> None:
    for space in ("multidiscrete", "discrete"):
        env = fake_env(task, action_space=space, budget=3)
        assert env.action_space.shape == ((len(env.space.nvec),) if space == "multidiscrete" else ())
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # SB3's checker warns about what it dislikes: none may fire
            check_env(env)
        env.close()


def test_a_tile_family_step_decodes_four_knobs_and_writes_its_kernel() -> None:
    env = fake_env("bundled/L1/10_TrilMatmul", budget=2)
    env.reset(seed=0)
    assert list(env.action_space.nvec) == [3, 3, 3, 3]
    obs, reward, *_, info = env.step(np.array([2, 0, 1, 2]))
    assert info["params"] == {"tile_m": 128, "tile_n": 32, "tile_k": 16, "outputs_per_thread": 64}
    named = dict(zip(FEATURES, obs, strict=True))
    assert [named[f"knob_{k}_index"] for k in range(4)] == [1.0, 0.0, 0.5, 1.0] and reward > 0
    files = env.inner.workspace.snapshot().files
    assert "__launch_bounds__(64)" in files["kernels/tril_matmul.cu"]  # 128 x 32 outputs / 64 per thread
    env.close()


def test_sb3_ppo_trains_on_it() -> None:
    from stable_baselines3 import PPO

    env = fake_env(budget=4)
    model = PPO("MlpPolicy", env, n_steps=8, batch_size=8, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=16)
    action, _ = model.predict(env.reset()[0], deterministic=True)
    assert env.action_space.contains(action)
    env.close()


def test_check_env_with_the_real_judge_builds_on_cpu() -> None:
    # no GPU here: verify/profile report no_gpu, but the raw build (NVRTC or nvcc) runs and ptxas counts
    from cudagym.judge.local import LocalJudge

    judge = LocalJudge(devices="none")  # its own: the process-wide default may be another test's stand-in
    env = LaunchTuningEnv("bundled/L2/05_BiasGeluResidual", budget=2, judge=judge)
    try:
        check_env(env)
        env.reset()
        obs, reward, *_ , info = env.step(np.array([4, 3, 0]))
        if info["status"] == "no_gpu":
            assert reward == 0.0 and obs[FEATURES.index("built")] == 1 and obs[FEATURES.index("registers")] > 0
        else:  # on a GPU machine
            assert info["status"] == "ok"
    finally:
        env.close()
        judge.close()


def test_the_example_compares_ppo_with_random_search(tmp_path, capsys) -> None:
    import json
    import re

    module = load_script("examples/sb3_launch_tuning.py", "sb3_launch_tuning")

    def timed_by_block(task, solution, mode):  # bigger blocks are faster: a landscape with one best corner
        from fakes import timed_result
        block = int(solution.files["model_new.py"].split("BLOCK, PER_BLOCK = ")[1].split(",")[0])
        return timed_result(1000.0 / block)

    summary = module.main(["--budget", "6", "--confirm", "2", "--seeds", "2", "--out", str(tmp_path)],
                          judge=FakeJudge(eval_fn=timed_by_block))
    out = capsys.readouterr().out
    assert "random: 6 evaluations" in out and "   ppo: 6 evaluations" in out and "confirm (2 rounds)" in out
    assert [run["seed"] for run in summary["runs"]] == [0, 1]
    assert all(run["ppo"]["evaluations"] == run["random"]["evaluations"] == 6 for run in summary["runs"])
    rows = [line for line in out.splitlines() if line.startswith("| 0 |") or line.startswith("| 1 |")]
    assert len(rows) == 2 and all(re.search(r"\| \d+x\d+x\d \| [0-9.]+ \| \d+x\d+x\d \|", row) for row in rows)
    assert "confirmed seed(s)" in out
    saved = json.loads((tmp_path / "sb3_launch_tuning.json").read_text())
    assert saved["runs"][0]["confirm"]["random_median_us"] > 0


def test_the_example_tunes_a_tile_family(tmp_path, capsys) -> None:

    module = load_script("examples/sb3_launch_tuning.py", "sb3_launch_tuning_tiles")

    def timed_by_tile(task, solution, mode):  # taller tiles are faster
        from fakes import timed_result
        tile_m = int(solution.files["model_new.py"].split("TILE_M, TILE_N, THREADS = ")[1].split(",")[0])
        return timed_result(1000.0 / tile_m)

    summary = module.main(["--task", "bundled/L2/06_Conv1x1BNReLU", "--budget", "4", "--confirm", "1"],
                          judge=FakeJudge(eval_fn=timed_by_tile))
    out = capsys.readouterr().out
    assert "config = tile_m x tile_n x tile_k x outputs_per_thread" in out
    run = summary["runs"][0]
    assert set(run["random"]["best"]) == {"tile_m", "tile_n", "tile_k", "outputs_per_thread"}
    assert run["random"]["evaluations"] == run["ppo"]["evaluations"] == 4


def sample(family: Family, count: int = 2, seed: int = 0) -> list[Any]:
    """The family's default, its first and last configurations, and ``count`` more drawn with ``seed``."""
    import random

    ordered = list(family.space.configs())
    rest = [p for p in ordered if p not in (family.default, ordered[0], ordered[-1])]
    return [family.default, ordered[0], ordered[-1], *random.Random(seed).sample(rest, count)]


def test_every_family_builds_with_the_real_judge() -> None:
    # the raw build (NVRTC, else nvcc) and ptxas run without a GPU: a sample of every family's space compiles
    # for the judge's target, with no register spills worth a warning and no build warnings ignored
    from cudagym.judge.local import LocalJudge
    from cudagym.solution import Solution
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    with LocalJudge(devices="none") as judge:  # its own: the process-wide default may be another test's stand-in
        for task_id, family in FAMILIES.items():
            task = source.get(task_id)
            for params in sample(family):
                result = judge.build(task, Solution("raw", family.files(params)))
                assert result.ok, (task_id, params, result.message, result.log[:2000])
                assert result.kernels and all(k.registers > 0 for k in result.kernels), (task_id, params)
