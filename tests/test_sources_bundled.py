from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_bundled_tree

from cudagym.errors import ConfigError, DataUnavailableError, UnknownTaskError
from cudagym.solution import Solution
from cudagym.sources.bundled import BundledSource, package_root


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return write_bundled_tree(tmp_path / "bundled")


def test_loads_every_level_in_level_then_numeric_order(bundle):
    source = BundledSource(root=bundle)
    assert source.ids() == [
        "bundled/L1/01_ReLU", "bundled/L1/02_Sigmoid", "bundled/L1/10_Softmax",
        "bundled/L2/01_gemm_bias_gelu", "bundled/L3/01_mlp",
    ]
    task = source.get("bundled/L2/01_gemm_bias_gelu")
    assert task.suite == "bundled" and task.level == 2 and task.name == "01_gemm_bias_gelu"
    assert task.metadata["problem_id"] == 1
    assert Path(task.metadata["origin"]) == bundle / "tasks" / "L2" / "01_gemm_bias_gelu.py"


def test_levels_filter(bundle):
    assert [t.level for t in BundledSource(1, root=bundle)] == [1, 1, 1]
    assert [t.level for t in BundledSource([3, 2], root=bundle)] == [2, 3]
    with pytest.raises(UnknownTaskError, match="the bundled suite has no level 7; its levels are 1, 2, 3") as err:
        BundledSource(7, root=bundle).tasks()
    assert "reinstall" not in str(err.value)
    with pytest.raises(DataUnavailableError, match="reinstall"):  # a broken install still says so
        BundledSource(root=bundle / "nowhere").tasks()


@pytest.mark.parametrize("bad", [0, -1, "1", [1, "2"], [], True])
def test_bad_levels_are_config_errors(bad):
    with pytest.raises(ConfigError, match="expected bundled levels"):
        BundledSource(bad)


def test_solution_dir_and_solution(bundle):
    source = BundledSource(root=bundle)
    folder = source.solution_dir("bundled/L1/10_Softmax")
    assert folder == bundle / "solutions" / "L1" / "10_Softmax"
    solution = source.solution("bundled/L1/10_Softmax")
    assert isinstance(solution, Solution) and solution.format == "extension"
    assert sorted(solution.files) == ["kernels/op.cu", "kernels/op_binding.cpp", "model_new.py"]
    assert "10_Softmax" in solution.files["model_new.py"]


def test_missing_solution_and_unknown_task(bundle):
    import shutil

    shutil.rmtree(bundle / "solutions" / "L3" / "01_mlp")
    source = BundledSource(root=bundle)
    with pytest.raises(DataUnavailableError, match="reference solution for bundled/L3/01_mlp"):
        source.solution("bundled/L3/01_mlp")
    with pytest.raises(UnknownTaskError, match="bundled/L1/03_Nope"):
        source.solution_dir("bundled/L1/03_Nope")


def test_missing_tasks_folder_says_reinstall(tmp_path):
    with pytest.raises(DataUnavailableError, match="reinstall cudagym"):
        BundledSource(root=tmp_path).tasks()


def test_package_root_is_the_installed_bundled_package():
    import cudagym.envs.bundled as bundled_pkg

    assert package_root() == Path(bundled_pkg.__file__).parent
    assert BundledSource().root == package_root()


def test_shipped_bundle_loads_with_a_solution_per_task():
    if not (package_root() / "tasks").is_dir():
        pytest.skip("the bundled tasks (envs/bundled/tasks) are not in this tree yet")
    source = BundledSource()
    tasks = source.tasks()
    assert tasks, "envs/bundled/tasks holds no task files"
    assert {t.suite for t in tasks} == {"bundled"}
    for task in tasks:
        assert task.id == f"bundled/L{task.level}/{task.name}"
        solution = source.solution(task.id)
        assert "model_new.py" in solution.files, f"{task.id}: solution lacks model_new.py"
