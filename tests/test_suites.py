from __future__ import annotations

import re

import pytest
from conftest import OPS6K_ROWS, kernelbench_problem, write_bundled_tree

from cudagym import suites
from cudagym.errors import ConfigError, DataUnavailableError, UnknownTaskError
from cudagym.sources.bundled import BundledSource
from cudagym.sources.kernelbench import KernelBenchHubSource, KernelBenchSource
from cudagym.sources.ops6k import Ops6KSource
from cudagym.suites import Suite, get_suite, get_task, load_source, load_tasks, register_suite, suite_of

pytestmark = pytest.mark.usefixtures("offline_data_env")


def test_builtin_suites_are_registered():
    assert {"kernelbench", "ops6k", "bundled"} <= set(suites.suite_names())
    with pytest.raises(UnknownTaskError, match="unknown suite 'nope'; expected one of: kernelbench"):
        get_suite("nope")


def test_load_source_builds_the_right_source_lazily(kernelbench_tree, kernelbench_parquet, ops6k_parquet):
    assert isinstance(load_source("kernelbench", level=1, root=kernelbench_tree), KernelBenchSource)
    assert isinstance(load_source("kernelbench", level=1, parquet=kernelbench_parquet), KernelBenchHubSource)
    assert isinstance(load_source("ops6k", path=ops6k_parquet), Ops6KSource)
    assert isinstance(load_source("bundled"), BundledSource)
    load_source("kernelbench", level=2)  # no data anywhere, but nothing is read yet


def test_load_tasks_per_suite(kernelbench_tree, ops6k_parquet, tmp_path):
    assert len(load_tasks("kernelbench", level=1, root=kernelbench_tree)) == 100
    assert len(load_tasks("kernelbench", level=[3, 4], root=kernelbench_tree)) == 70
    assert len(load_tasks("kernelbench", root=kernelbench_tree)) == 270
    assert len(load_tasks("ops6k", path=ops6k_parquet, min_ops=3)) == 3
    bundle = write_bundled_tree(tmp_path / "b")
    assert len(load_tasks("bundled", root=bundle)) == 5


def test_generic_level_filter_means_the_suites_own_level(ops6k_parquet, tmp_path):
    bundle = write_bundled_tree(tmp_path / "b")
    assert {t.level for t in load_tasks("bundled", root=bundle, level=2)} == {2}
    two = load_tasks("ops6k", path=ops6k_parquet, level=2)
    assert len(two) == sum(1 for _, ds in OPS6K_ROWS if ds == "torch#2")
    assert {t.level for t in two} == {2}
    with pytest.raises(ConfigError, match="one int level"):
        load_tasks("ops6k", path=ops6k_parquet, level=[1, 2])


def test_unknown_filters_are_config_errors():
    with pytest.raises(ConfigError, match=r"suite 'bundled' accepts the options \(suite_options keys\) level, levels, "
                       "root; got min_ops$"):
        load_source("bundled", min_ops=2)


def test_a_misspelt_option_names_each_accepted_one_once_and_the_close_match():
    with pytest.raises(ConfigError) as err:
        load_source("kernelbench", rooot="/data")
    message = str(err.value)
    assert "level, root, parquet, revision, strict; got rooot; did you mean 'root' for 'rooot'?" in message
    assert message.count("level") == 1


def test_none_filters_are_ignored(kernelbench_tree):
    assert len(load_tasks("kernelbench", level=None, root=kernelbench_tree, parquet=None)) == 270


def test_ids_pick_tasks_in_the_given_order(kernelbench_tree):
    wanted = [f"L1/{kernelbench_problem(1, i)[0]}" for i in (9, 2, 40)]
    tasks = load_tasks("kernelbench", level=1, root=kernelbench_tree, ids=wanted)
    assert [t.id for t in tasks] == wanted
    with pytest.raises(UnknownTaskError):
        load_tasks("kernelbench", level=1, root=kernelbench_tree, ids=["L1/999_Nothing"])


def test_missing_data_propagates_with_instructions():
    with pytest.raises(DataUnavailableError, match="CUDAGYM_KERNELBENCH_PARQUET"):
        load_tasks("kernelbench", level=1)
    with pytest.raises(DataUnavailableError, match="CUDAGYM_OPS6K_PARQUET"):
        load_tasks("ops6k")


def test_get_task_routes_by_prefix(kernelbench_tree, ops6k_parquet, tmp_path, monkeypatch):
    stem = kernelbench_problem(3, 12)[0]
    task = get_task(f"L3/{stem}", root=kernelbench_tree)
    assert task.suite == "kernelbench" and task.level == 3 and task.name == stem
    monkeypatch.setenv("CUDAGYM_KERNELBENCH_DIR", str(kernelbench_tree))
    assert get_task(f"L3/{stem}") == task
    bundle = write_bundled_tree(tmp_path / "b")
    assert get_task("bundled/L1/02_Sigmoid", root=bundle).level == 1
    monkeypatch.setenv("CUDAGYM_OPS6K_PARQUET", str(ops6k_parquet))
    ops_task = get_task("ops6k/000002_Conv2d_BatchNorm2d_ReLU")
    assert ops_task.metadata["row"] == 2 and ops_task.level == 3


def test_get_task_for_ops6k_reads_one_row(ops6k_parquet, monkeypatch):
    monkeypatch.setenv("CUDAGYM_OPS6K_PARQUET", str(ops6k_parquet))
    source = suites.source_for_id("ops6k/000006_Conv2d_BatchNorm2d_ReLU_MaxPool2d_Tanh")
    assert isinstance(source, Ops6KSource) and source.rows == frozenset({6})
    assert len(source) == 1


def test_get_task_errors(kernelbench_tree, ops6k_parquet):
    with pytest.raises(UnknownTaskError, match="cannot tell the suite of task id 'foo/bar'"):
        get_task("foo/bar")
    with pytest.raises(UnknownTaskError, match="cannot tell the suite"):
        get_task("L5/1_Thing")  # KernelBench has levels 1-4 only
    stem = kernelbench_problem(1, 19)[0]
    with pytest.raises(UnknownTaskError, match=re.escape(f"did you mean L1/{stem}")):
        get_task(f"L1/{stem}_", root=kernelbench_tree)
    with pytest.raises(UnknownTaskError, match="ops6k/000002_Wrong"):
        get_task("ops6k/000002_Wrong", path=ops6k_parquet)


def test_suite_of():
    assert suite_of("L4/7_gpt2").name == "kernelbench"
    assert suite_of("bundled/L2/03_gemm_bias_gelu").name == "bundled"
    assert suite_of("ops6k/000123_Conv2d_ReLU").name == "ops6k"


def test_register_custom_suite(monkeypatch, kernelbench_tree):
    monkeypatch.setattr(suites, "SUITES", dict(suites.SUITES))
    mine = Suite(
        name="mine", summary="level 2 of a checkout under another name",
        factory=lambda root=None: KernelBenchSource(2, root=root), filters=("root",),
        id_pattern=re.compile(r"^L2/\S+$"), route=lambda m: {}, level_filter=lambda level: {},
    )
    with pytest.raises(ConfigError, match="already registered"):
        register_suite(Suite(**{**mine.__dict__, "name": "bundled"}))
    register_suite(mine)
    assert len(load_tasks("mine", root=kernelbench_tree)) == 100
