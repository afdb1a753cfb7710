from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import KERNELBENCH_COUNTS, kernelbench_problem, write_kernelbench_parquet, write_kernelbench_tree

from cudagym.errors import ConfigError, DataUnavailableError, TaskFormatError, UnknownTaskError
from cudagym.sources.kernelbench import (
    KernelBenchHubSource,
    KernelBenchSource,
    find_checkout,
    kernelbench_source,
    normalize_levels,
)
from cudagym.task import content_hash

pytestmark = pytest.mark.usefixtures("offline_data_env")


def not_chained(exc: BaseException) -> bool:
    """True when a traceback of ``exc`` would show no exception from inside a library."""
    return exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__)


# ------------------------------------------------------------------------------------------- checkout


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_checkout_gives_100_100_50_20_tasks(kernelbench_tree, level):
    source = KernelBenchSource(level, root=kernelbench_tree)
    tasks = source.tasks()
    assert len(tasks) == KERNELBENCH_COUNTS[level]
    assert {t.level for t in tasks} == {level}
    assert {t.suite for t in tasks} == {"kernelbench"}
    assert len({t.content_hash for t in tasks}) == len(tasks)


def test_checkout_ids_follow_numeric_problem_order(kernelbench_tree):
    source = KernelBenchSource(1, root=kernelbench_tree)
    ids = source.ids()
    stem1, _ = kernelbench_problem(1, 1)
    stem10, _ = kernelbench_problem(1, 10)
    stem19, _ = kernelbench_problem(1, 19)
    assert ids[0] == f"L1/{stem1}"
    assert ids[9] == f"L1/{stem10}"  # 10 after 9, not after 1
    assert [t.metadata["problem_id"] for t in source] == list(range(1, 101))
    task = source.get(f"L1/{stem19}")
    assert task.name == stem19
    assert task.metadata["origin"].endswith(f"level1/{stem19}.py")
    assert task.source == kernelbench_problem(1, 19)[1]


def test_all_levels_in_level_order(kernelbench_tree):
    tasks = KernelBenchSource(root=kernelbench_tree).tasks()
    assert len(tasks) == sum(KERNELBENCH_COUNTS.values())
    levels = [t.level for t in tasks]
    assert levels == sorted(levels)


def test_root_may_be_repo_root_or_kernelbench_dir_or_env(kernelbench_tree, monkeypatch):
    by_repo = KernelBenchSource(2, root=kernelbench_tree).tasks()
    by_inner = KernelBenchSource(2, root=kernelbench_tree / "KernelBench").tasks()
    monkeypatch.setenv("CUDAGYM_KERNELBENCH_DIR", str(kernelbench_tree))
    by_env = KernelBenchSource(2).tasks()
    assert by_repo == by_inner == by_env
    assert find_checkout(kernelbench_tree) == kernelbench_tree / "KernelBench"


def test_task_files_are_parsed_not_executed(tmp_path):
    root = write_kernelbench_tree(tmp_path, {1: 2})
    marker = tmp_path / "executed"
    stem, source = kernelbench_problem(1, 3)
    booby_trap = f"open({str(marker)!r}, 'w').write('ran')\nraise SystemExit(3)\n" + source
    (root / "KernelBench" / "level1" / f"{stem}.py").write_text(booby_trap)
    tasks = KernelBenchSource(1, root=root).tasks()
    assert len(tasks) == 3
    assert not marker.exists()


def test_other_files_in_a_level_dir_are_ignored(tmp_path):
    root = write_kernelbench_tree(tmp_path, {1: 3})
    level_dir = root / "KernelBench" / "level1"
    (level_dir / "__init__.py").write_text("")
    (level_dir / "README.md").write_text("# notes")
    (level_dir / "notes.txt").write_text("x")
    assert len(KernelBenchSource(1, root=root)) == 3


def test_a_malformed_file_is_skipped_logged_and_counted_not_fatal_to_its_level(tmp_path, caplog):
    root = write_kernelbench_tree(tmp_path, {1: 3})
    bad = root / "KernelBench" / "level1" / "2_Broken.py"
    bad.write_text("import torch\n\ndef get_inputs():\n    return []\n")
    (root / "KernelBench" / "level1" / "5_NotPython.py").write_text("this is not python at all (((\n")
    source = KernelBenchSource(1, root=root)
    with caplog.at_level("WARNING", logger="cudagym.sources.kernelbench"):
        ids = source.ids()
    assert len(ids) == 3 and "L1/2_Broken" not in ids
    assert [s.id for s in source.skipped_problems] == ["L1/2_Broken", "L1/5_NotPython"]
    assert "2_Broken.py" in source.skipped_problems[0].reason and "Model" in source.skipped_problems[0].reason
    assert "not valid Python" in source.skipped_problems[1].reason
    assert sum("skipping KernelBench problem" in r.getMessage() for r in caplog.records) == 2


def test_strict_raises_on_a_malformed_file_naming_it(tmp_path):
    root = write_kernelbench_tree(tmp_path, {1: 3})
    (root / "KernelBench" / "level1" / "2_Broken.py").write_text("import torch\n\ndef get_inputs():\n    return []\n")
    with pytest.raises(TaskFormatError) as err:
        KernelBenchSource(1, root=root, strict=True).tasks()
    assert "2_Broken.py" in str(err.value)
    assert "Model" in str(err.value)


def test_missing_checkout_says_how_to_provide_it(tmp_path):
    source = KernelBenchSource(1)  # construction is lazy: no error yet
    with pytest.raises(DataUnavailableError) as err:
        source.tasks()
    message = str(err.value)
    for needle in ('gym.make("CudaKernel-L1-v0", suite_options={"root": "<path>"})', "--root <path>",
                   "CUDAGYM_KERNELBENCH_DIR=<path>", "git clone", 'suite_options={"parquet": "<path>"}',
                   "CUDAGYM_KERNELBENCH_PARQUET=<path>", "hf download ScalingIntelligence/KernelBench"):
        assert needle in message
    with pytest.raises(DataUnavailableError, match="level1"):
        KernelBenchSource(1, root=tmp_path).tasks()


def test_missing_level_dir_is_data_unavailable(tmp_path):
    root = write_kernelbench_tree(tmp_path, {1: 2})
    with pytest.raises(DataUnavailableError, match="level 3"):
        KernelBenchSource(3, root=root).tasks()


@pytest.mark.parametrize("bad", [0, 5, [1, 7], "1", True, []])
def test_levels_outside_1_to_4_are_config_errors(bad):
    with pytest.raises(ConfigError, match="expected KernelBench levels"):
        KernelBenchSource(bad)


def test_normalize_levels():
    assert normalize_levels(None) == (1, 2, 3, 4)
    assert normalize_levels([3, 1, 3]) == (1, 3)


def test_unknown_id_suggests_close_matches(kernelbench_tree):
    source = KernelBenchSource(1, root=kernelbench_tree)
    stem, _ = kernelbench_problem(1, 19)
    with pytest.raises(UnknownTaskError, match="did you mean"):
        source.get(f"L1/{stem}x")


# ------------------------------------------------------------------------------------------------ hub


def test_hf_parquet_gives_the_same_tasks_as_the_checkout(kernelbench_tree, kernelbench_parquet):
    for level in (1, 2, 3, 4):
        checkout = KernelBenchSource(level, root=kernelbench_tree).tasks()
        hub = KernelBenchHubSource(level, parquet=kernelbench_parquet).tasks()
        assert [t.id for t in hub] == [t.id for t in checkout]
        assert [t.content_hash for t in hub] == [t.content_hash for t in checkout]
        assert [t.metadata["problem_id"] for t in hub] == [t.metadata["problem_id"] for t in checkout]


def test_hf_parquet_via_env_var_and_single_file(kernelbench_parquet, monkeypatch):
    monkeypatch.setenv("CUDAGYM_KERNELBENCH_PARQUET", str(kernelbench_parquet))
    assert len(KernelBenchHubSource(3)) == 50
    single = kernelbench_parquet / "data" / "level_4-00000-of-00001.parquet"
    tasks = KernelBenchHubSource(4, parquet=single).tasks()
    assert len(tasks) == 20 and tasks[0].id == f"L4/{kernelbench_problem(4, 1)[0]}"


def test_rows_are_picked_by_level_column_in_a_mixed_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [kernelbench_problem(level, pid) + (level, pid) for level in (1, 2) for pid in (2, 1)]
    table = pa.table({
        "code": [r[1] for r in rows], "level": [r[2] for r in rows],
        "name": [r[0] + ".py" for r in rows],  # tolerate a stray .py suffix
        "problem_id": [r[3] for r in rows],
    })
    pq.write_table(table, tmp_path / "all.parquet")
    tasks = KernelBenchHubSource(2, parquet=tmp_path / "all.parquet").tasks()
    assert [t.id for t in tasks] == [f"L2/{kernelbench_problem(2, 1)[0]}", f"L2/{kernelbench_problem(2, 2)[0]}"]


def test_hub_download_is_used_on_a_cache_miss(kernelbench_parquet, offline_data_env, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.delenv("HF_HUB_OFFLINE")
    calls = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        if kwargs["local_files_only"]:
            raise LocalEntryNotFoundError("not cached")
        return str(kernelbench_parquet)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    tasks = KernelBenchHubSource(1).tasks()
    assert len(tasks) == 100
    assert [c[1]["local_files_only"] for c in calls] == [True, False]
    repo_id, kwargs = calls[1]
    assert repo_id == "ScalingIntelligence/KernelBench"
    assert kwargs["repo_type"] == "dataset"
    assert Path(kwargs["cache_dir"]).is_relative_to(offline_data_env)
    assert any(p.endswith(".parquet") for p in kwargs["allow_patterns"])


def test_cached_snapshot_is_used_without_network(kernelbench_parquet, monkeypatch):
    import huggingface_hub

    calls = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append(kwargs["local_files_only"])
        assert kwargs["local_files_only"], "network asked although the snapshot is cached"
        return str(kernelbench_parquet)

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    assert len(KernelBenchHubSource(2)) == 100
    assert calls == [True]


def test_offline_without_cache_says_how_to_provide_data():
    # the real huggingface_hub, HF_HUB_OFFLINE=1 and an empty cache (offline_data_env)
    with pytest.raises(DataUnavailableError) as err:
        KernelBenchHubSource(1).tasks()
    message = str(err.value)
    for needle in ("ScalingIntelligence/KernelBench", "unset HF_HUB_OFFLINE", 'suite_options={"root": "<path>"}',
                   "CUDAGYM_KERNELBENCH_DIR", 'suite_options={"parquet": "<path>"}', "--parquet <path>",
                   "CUDAGYM_KERNELBENCH_PARQUET", "hf download ScalingIntelligence/KernelBench"):
        assert needle in message
    assert "pip install" not in message  # huggingface_hub and pyarrow are installed here
    assert not_chained(err.value)


def test_download_failure_is_wrapped_not_a_raw_traceback(monkeypatch):
    import huggingface_hub

    def failing(repo_id, **kwargs):
        if kwargs["local_files_only"]:
            raise FileNotFoundError("no cache")
        raise ConnectionError("Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", failing)
    with pytest.raises(DataUnavailableError) as err:
        KernelBenchHubSource(1).tasks()
    assert "ConnectionError: Name or service not known" in str(err.value)
    assert "CUDAGYM_KERNELBENCH_PARQUET" in str(err.value)
    assert not_chained(err.value)


def test_missing_huggingface_hub_says_pip_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import now raises ImportError
    with pytest.raises(DataUnavailableError, match=r'pip install "cudagym\[hf\]"'):
        KernelBenchHubSource(1).tasks()


def test_missing_pyarrow_says_pip_install(kernelbench_parquet, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DataUnavailableError, match=r'pip install "cudagym\[hf\]"'):
        KernelBenchHubSource(1, parquet=kernelbench_parquet).tasks()


def test_missing_level_split_is_data_unavailable(tmp_path):
    root = write_kernelbench_parquet(tmp_path, {1: 3})
    with pytest.raises(DataUnavailableError, match="level_2"):
        KernelBenchHubSource(2, parquet=root).tasks()


def test_malformed_row_is_skipped_by_default_and_raises_when_strict(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    good = kernelbench_problem(1, 3)[1]
    table = pa.table({"code": ["x = 1\n", good, None], "level": [1, 1, 1], "name": ["7_Bad", "3_Good", "9_Null"],
                      "problem_id": [7, 3, 9]})
    pq.write_table(table, tmp_path / "data" / "level_1-00000-of-00001.parquet")
    source = KernelBenchHubSource(1, parquet=tmp_path)
    assert source.ids() == ["L1/3_Good"]
    assert [s.id for s in source.skipped_problems] == ["L1/7_Bad", "L1/9_Null"]
    assert "7_Bad" in source.skipped_problems[0].reason
    with pytest.raises(TaskFormatError, match="7_Bad"):
        KernelBenchHubSource(1, parquet=tmp_path, strict=True).tasks()


def test_kernelbench_source_picks_checkout_or_parquet(kernelbench_tree, kernelbench_parquet, monkeypatch):
    assert isinstance(kernelbench_source(1, root=kernelbench_tree), KernelBenchSource)
    assert isinstance(kernelbench_source(1, parquet=kernelbench_parquet), KernelBenchHubSource)
    assert isinstance(kernelbench_source(1), KernelBenchHubSource)
    monkeypatch.setenv("CUDAGYM_KERNELBENCH_DIR", str(kernelbench_tree))
    source = kernelbench_source(1)
    assert isinstance(source, KernelBenchSource) and len(source) == 100


def test_checkout_copy_keeps_hashes_across_comment_changes(tmp_path, kernelbench_tree):
    root = tmp_path / "copy"
    shutil.copytree(kernelbench_tree / "KernelBench" / "level1", root / "level1")
    path = next((root / "level1").glob("5_*.py"))
    original = path.read_text()
    path.write_text("# a comment added upstream\n" + original.replace("\n\n\n", "\n\n"))
    task = KernelBenchSource(1, root=root).get(f"L1/{path.stem}")
    assert task.content_hash == content_hash(original)


def test_level_column_written_as_text_is_understood(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    stem, code = kernelbench_problem(3, 4)
    pq.write_table(pa.table({"code": [code], "level": ["level_3"], "name": [stem], "problem_id": [4]}),
                   tmp_path / "level_3.parquet")
    assert KernelBenchHubSource(3, parquet=tmp_path).ids() == [f"L3/{stem}"]
