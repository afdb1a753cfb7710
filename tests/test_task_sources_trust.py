"""Malformed task data meets the loaders: a clear error or a recorded skip, never a deep traceback or mixed-up data.

Each test feeds one kind of bad input (a parquet cell of the wrong type, a file that is not UTF-8, two problems
under one id, an expression nested past the recursion limit...) through the public loaders.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import kernelbench_problem, ops6k_code, write_kernelbench_tree

from cudagym import task as task_module
from cudagym.errors import ConfigError, DataUnavailableError, TaskFormatError
from cudagym.sources import BundledSource, KernelBenchHubSource, KernelBenchSource, Ops6KSource, TaskSource
from cudagym.suites import get_task
from cudagym.task import Task, make_task

pytestmark = pytest.mark.usefixtures("offline_data_env")

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

SOURCE = kernelbench_problem(1, 1)[1]


def _make(source: object, **fields: object) -> Task:
    args: dict[str, object] = {"id": "mine/1_x", "suite": "mine", "level": 1, "name": "1_x", "origin": "mine.py"}
    args.update(fields)
    return make_task(source, **args)  # type: ignore[arg-type]


def _parquet(path: Path, columns: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def _kernelbench_hub(root: Path, **columns: object) -> Path:
    """A one-split KernelBench hub layout whose level-1 file holds ``columns`` (defaults: two good rows)."""
    (stem1, code1), (stem2, code2) = kernelbench_problem(1, 1), kernelbench_problem(1, 2)
    table: dict[str, object] = {"code": [code1, code2], "level": [1, 1], "name": [stem1, stem2], "problem_id": [1, 2]}
    table.update(columns)
    _parquet(root / "data" / "level_1-00000-of-00001.parquet", table)
    return root


# ------------------------------------------------------------------------------------------------ Ops-6K


def test_ops6k_ops_column_of_strings_names_one_op_not_its_letters(tmp_path):
    path = _parquet(tmp_path / "data.parquet", {"ops": ["Conv2d", "Tanh"], "data_source": ["torch#1"] * 2,
                                                "code": [ops6k_code(["Conv2d"], 0), ops6k_code(["Tanh"], 1)]})
    tasks = Ops6KSource(path).tasks()
    assert [t.id for t in tasks] == ["ops6k/000000_Conv2d", "ops6k/000001_Tanh"]
    assert tasks[0].ops == ("Conv2d",)
    assert [t.id for t in Ops6KSource(path, ops="conv2d").tasks()] == ["ops6k/000000_Conv2d"]


def test_ops6k_binary_code_column_is_read_as_utf8_and_bad_bytes_are_named(tmp_path):
    good = ops6k_code(["Tanh"], 0).encode()
    path = _parquet(tmp_path / "data.parquet", {
        "ops": [["Tanh"]] * 3, "data_source": ["torch#1"] * 3,
        "code": pa.array([good, good + b"# caf\xe9\n", None], pa.binary()),
    })
    source = Ops6KSource(path)
    assert [t.id for t in source.tasks()] == ["ops6k/000000_Tanh"]
    assert source.tasks()[0].source == good.decode()
    reasons = {row.row: row.reason for row in source.skipped_rows}
    assert "expected the code column to hold UTF-8 text" in reasons[1] and "b'\\xe9'" in reasons[1]
    assert "got null" in reasons[2]


def test_ops6k_code_cell_of_another_type_is_named(tmp_path):
    path = _parquet(tmp_path / "data.parquet", {"ops": [["Tanh"]], "data_source": ["torch#1"], "code": [42]})
    source = Ops6KSource(path)
    assert source.tasks() == ()
    assert "hold Python source (text), got int" in source.skipped_rows[0].reason
    with pytest.raises(TaskFormatError, match="got int"):
        Ops6KSource(path, strict=True).tasks()


@pytest.mark.parametrize(("option", "value"), [("rows", ["a"]), ("rows", 5), ("rows", [-1]), ("rows", [True]),
                                               ("ops", [1]), ("ops", 5), ("ops", {"relu": 1})])
def test_ops6k_bad_row_and_op_filters_are_config_errors(option, value):
    with pytest.raises(ConfigError, match=f"expected {option} to be"):
        Ops6KSource("unused.parquet", **{option: value})


# ------------------------------------------------------------------------------------------- KernelBench


@pytest.mark.parametrize("problem_id", [pa.array([None, 2], pa.int64()), ["one", "2"]])
def test_kernelbench_hub_unusable_problem_id_falls_back_to_the_name(tmp_path, problem_id):
    source = KernelBenchHubSource(1, parquet=_kernelbench_hub(tmp_path, problem_id=problem_id))
    tasks = source.tasks()
    assert [t.id for t in tasks] == ["L1/1_Sigmoid", "L1/2_Tanh"]
    assert [t.metadata["problem_id"] for t in tasks] == [1, 2]


def test_kernelbench_hub_row_without_name_or_number_is_skipped_not_named_none(tmp_path):
    hub = _kernelbench_hub(tmp_path, name=pa.array([None, "Tanh"], pa.string()),
                           problem_id=pa.array([1, None], pa.int64()))
    source = KernelBenchHubSource(1, parquet=hub)
    assert source.tasks() == ()
    reasons = [p.reason for p in source.skipped_problems]
    assert len(reasons) == 2
    assert "expected a name like 19_ReLU" in reasons[0] and "got name None" in reasons[0]
    assert "expected an int problem_id" in reasons[1] and "got problem_id None" in reasons[1]


def test_kernelbench_hub_two_different_problems_under_one_id_are_reported(tmp_path):
    (_, code1), (_, code2) = kernelbench_problem(1, 1), kernelbench_problem(1, 2)
    hub = _kernelbench_hub(tmp_path, name=["1_Same", "1_Same"], problem_id=[1, 1], code=[code1, code2])
    source = KernelBenchHubSource(1, parquet=hub)
    assert [t.source for t in source.tasks()] == [code1]
    assert [p.id for p in source.skipped_problems] == ["L1/1_Same"]
    assert "a different source" in source.skipped_problems[0].reason
    same = KernelBenchHubSource(1, parquet=_kernelbench_hub(tmp_path / "same", name=["1_Same", "1_Same"],
                                                            problem_id=[1, 1], code=[code1, code1]))
    assert len(same) == 1 and same.skipped == 0  # the same split read twice is no conflict


def test_kernelbench_checkout_file_that_is_not_utf8_is_skipped_not_altered(tmp_path):
    root = write_kernelbench_tree(tmp_path, {1: 2})
    bad = root / "KernelBench" / "level1" / "1_Sigmoid.py"
    bad.write_bytes(bad.read_bytes().replace(b"Problem 1", b"Probl\xe8me 1"))
    source = KernelBenchSource(1, root=root)
    assert source.ids() == ["L1/2_Tanh"]
    assert "expected utf-8 text" in source.skipped_problems[0].reason
    assert "offset" in source.skipped_problems[0].reason


def test_kernelbench_checkout_reads_files_as_python_does(tmp_path):
    root = write_kernelbench_tree(tmp_path, {1: 2})
    level = root / "KernelBench" / "level1"
    (level / "1_Sigmoid.py").write_bytes(b"\xef\xbb\xbf" + SOURCE.replace("\n", "\r\n").encode())  # BOM, CRLF
    latin = "# -*- coding: latin-1 -*-\n# caf\u00e9\n" + kernelbench_problem(1, 2)[1]
    (level / "2_Tanh.py").write_bytes(latin.encode("latin-1"))
    source = KernelBenchSource(1, root=root)
    assert source.skipped == 0
    assert source.get("L1/1_Sigmoid").source == SOURCE
    assert "caf\u00e9" in source.get("L1/2_Tanh").source


def test_task_id_with_a_space_routes_to_its_suite(tmp_path):
    root = write_kernelbench_tree(tmp_path, {1: 1})
    level = root / "KernelBench" / "level1"
    (level / "1_Sigmoid.py").rename(level / "1_My Sigmoid.py")
    assert get_task("L1/1_My Sigmoid", root=str(root)).name == "1_My Sigmoid"


# ------------------------------------------------------------------------------------------------ bundled


def test_bundled_file_that_is_not_utf8_is_a_task_format_error(tmp_path):
    folder = tmp_path / "tasks" / "L1"
    folder.mkdir(parents=True)
    (folder / "01_X.py").write_bytes(SOURCE.replace("Problem 1", "Probl\u00e8me 1").encode("latin-1"))
    with pytest.raises(TaskFormatError, match=r"01_X\.py: expected utf-8 text .*b'\\xe8'"):
        BundledSource(root=tmp_path).tasks()


@pytest.mark.parametrize("kind", ["missing", "file", "empty"])
def test_bundled_root_that_is_wrong_names_the_option(tmp_path, kind):
    root = tmp_path / "mine"
    if kind == "file":
        root.write_text("not a folder")
    elif kind == "empty":
        root.mkdir()
    what = {"missing": "does not exist", "file": "is a file", "empty": "has no tasks/ folder"}[kind]
    with pytest.raises(DataUnavailableError, match=f"{what}\\); check suite_options\\['root'\\]"):
        BundledSource(root=root).tasks()


# ------------------------------------------------------------------------------------------- make_task


@pytest.mark.parametrize(("source", "got"), [(SOURCE.encode(), "got bytes; decode it first"), (None, "got NoneType")],
                         ids=["bytes", "none"])
def test_make_task_source_that_is_not_text_is_named(source, got):
    with pytest.raises(TaskFormatError, match=got):
        _make(source)


def test_make_task_source_with_undecodable_characters_is_a_task_format_error():
    with pytest.raises(TaskFormatError, match="undecodable character"):
        _make(SOURCE + "# \udce9\n")


def test_make_task_hashes_a_chain_deeper_than_the_recursion_limit():
    chain = _make(SOURCE + "z = " + " + ".join(["1"] * 1500) + "\n")
    assert len(chain.content_hash) == 64
    assert _make(SOURCE).content_hash == _make("# a comment\n" + SOURCE).content_hash
    # past the parser's own limit (the recursion limit in force; torch raises it for its compiler, so it is set
    # here): a TaskFormatError, not a RecursionError from inside
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        with pytest.raises(TaskFormatError, match="nested too deeply"):
            _make(SOURCE + "z = " + " + ".join(["1"] * 4000) + "\n")
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.parametrize(("fields", "match"), [
    ({"id": None}, "task id to be a non-empty str"),
    ({"id": ""}, "task id to be a non-empty str"),
    ({"id": "mine/1\nx"}, "task id to be one line"),
    ({"name": 3}, "task name to be a non-empty str"),
    ({"level": "1"}, "task level to be an int >= 0"),
    ({"level": True}, "task level to be an int >= 0"),
    ({"metadata": [("ops", "x")]}, "metadata to be a mapping"),
])
def test_make_task_checks_the_record_fields(fields, match):
    with pytest.raises(TaskFormatError, match=match):
        _make(SOURCE, **fields)


def test_make_task_ops_given_as_one_name_is_one_op():
    assert _make(SOURCE, metadata={"ops": "Conv2d"}).ops == ("Conv2d",)


def test_read_task_file_names_the_file_and_the_byte(tmp_path):
    path = tmp_path / "task.py"
    path.write_bytes(b"x = '\xff'\n")
    with pytest.raises(TaskFormatError, match=r"task\.py: expected utf-8 text .*b'\\xff' at offset 5"):
        task_module.read_task_file(path)


# ----------------------------------------------------------------------------------------- task identity


class _ListSource(TaskSource):
    suite = "mine"

    def __init__(self, tasks: Sequence[Task]) -> None:
        super().__init__()
        self._given = tasks

    def _load(self) -> Sequence[Task]:
        return self._given


def test_two_different_tasks_under_one_id_are_an_error_not_a_silent_pick():
    first = _make(SOURCE, origin="a.py")
    other = _make(kernelbench_problem(1, 2)[1], origin="b.py")
    with pytest.raises(TaskFormatError, match="two different tasks have the id 'mine/1_x' .*a.py and b.py"):
        _ListSource([first, other]).tasks()
    same = _ListSource([first, _make(SOURCE, origin="a copy.py")])
    assert same.tasks() == (first,) and same.get("mine/1_x") is first
