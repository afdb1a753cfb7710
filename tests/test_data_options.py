"""Every way a data-source error names to provide the data works, in gym.make and CLI terms."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import pytest

import cudagym  # noqa: F401  (registers the ids)
from cudagym import cli
from cudagym.errors import DataUnavailableError
from cudagym.sources.kernelbench import KernelBenchHubSource, KernelBenchSource
from cudagym.sources.ops6k import Ops6KSource

pytestmark = pytest.mark.usefixtures("offline_data_env")


def error_of(source) -> str:
    with pytest.raises(DataUnavailableError) as err:
        source.tasks()
    return str(err.value)


def suggested_options(message: str, env_id: str) -> list[str]:
    """The suite_options keys that the message's gym.make calls name."""
    return re.findall(rf'gym\.make\("{re.escape(env_id)}", suite_options=\{{"(\w+)": "<path>"\}}\)', message)


def tasks_of(env_id: str, options: dict[str, str]) -> int:
    env = gym.make(env_id, suite_options=options)
    try:
        return len(env.unwrapped.tasks)
    finally:
        env.close()


def test_kernelbench_error_suggestions_work_in_gym_make(kernelbench_tree, kernelbench_parquet) -> None:
    for message in (error_of(KernelBenchSource(1)), error_of(KernelBenchHubSource(1))):
        assert suggested_options(message, "CudaKernel-L1-v0") == ["root", "parquet"]
    assert tasks_of("CudaKernel-L1-v0", {"root": str(kernelbench_tree)}) == 100
    assert tasks_of("CudaKernel-L1-v0", {"parquet": str(kernelbench_parquet)}) == 100


def test_ops6k_error_suggestion_works_in_gym_make(ops6k_parquet) -> None:
    message = error_of(Ops6KSource())
    assert suggested_options(message, "CudaKernel-Ops6K-v0") == ["path"]
    assert tasks_of("CudaKernel-Ops6K-v0", {"path": str(ops6k_parquet)}) == 8


def test_the_readme_data_keywords_that_never_existed_are_gone() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "kernelbench_dir=" not in readme and "ops6k_path=" not in readme


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_takes_the_data_locations_the_errors_name(capsys, kernelbench_tree, kernelbench_parquet,
                                                      ops6k_parquet) -> None:
    code, out, _ = run_cli(capsys, "tasks", "list", "--suite", "kernelbench", "--root", str(kernelbench_tree),
                           "--level", "3", "--json")
    assert code == 0 and len(json.loads(out)) == 50
    code, out, _ = run_cli(capsys, "tasks", "list", "--suite", "kernelbench", "--parquet", str(kernelbench_parquet),
                           "--level", "4", "--json")
    assert code == 0 and len(json.loads(out)) == 20
    code, out, _ = run_cli(capsys, "tasks", "list", "--suite", "ops6k", "--path", str(ops6k_parquet), "--json")
    assert code == 0 and len(json.loads(out)) == 8
    code, out, _ = run_cli(capsys, "tasks", "show", "ops6k/000001_Tanh", "--path", str(ops6k_parquet))
    assert code == 0 and "id:           ops6k/000001_Tanh" in out


def test_cli_ops6k_filters(capsys, ops6k_parquet) -> None:
    code, out, _ = run_cli(capsys, "tasks", "list", "--suite", "ops6k", "--path", str(ops6k_parquet),
                           "--min-ops", "2", "--max-ops", "4", "--ops", "relu", "--json")
    assert code == 0 and [t["id"] for t in json.loads(out)] == [
        "ops6k/000000_Conv2d_ReLU", "ops6k/000002_Conv2d_BatchNorm2d_ReLU",
        "ops6k/000005_Conv2d_BatchNorm2d_ReLU_MaxPool2d"]
    code, out, _ = run_cli(capsys, "tasks", "list", "--suite", "ops6k", "--path", str(ops6k_parquet), "--limit", "2",
                           "--json")
    assert code == 0 and len(json.loads(out)) == 2


def test_cli_data_option_of_another_suite_is_a_clear_usage_error(capsys, kernelbench_tree) -> None:
    code, _, err = run_cli(capsys, "tasks", "list", "--suite", "kernelbench", "--path", "x.parquet")
    assert code == 2
    assert "accepts the options (suite_options keys) level, root, parquet, revision, strict; got path" in err


def test_level_4_without_transformers_warns_with_the_extra_to_install(kernelbench_tree, monkeypatch,
                                                                     caplog) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # not installed, whatever this host has
    env = gym.make("CudaKernel-L4-v0", suite_options={"root": str(kernelbench_tree)})
    try:
        with caplog.at_level("WARNING", logger="cudagym.env"):
            assert len(env.unwrapped.tasks) == 20
    finally:
        env.close()
    (record,) = [r for r in caplog.records if "transformers" in r.getMessage()]
    message = record.getMessage()
    assert "20 task(s) (e.g. L4/1_" in message and 'pip install "cudagym[kernelbench-l4]"' in message


def test_level_1_warns_about_nothing(kernelbench_tree, caplog) -> None:
    env = gym.make("CudaKernel-L1-v0", suite_options={"root": str(kernelbench_tree)})
    try:
        with caplog.at_level("WARNING", logger="cudagym.env"):
            assert len(env.unwrapped.tasks) == 100
    finally:
        env.close()
    assert not [r for r in caplog.records if "is not installed" in r.getMessage()]


def test_an_empty_ops6k_result_without_filters_blames_the_data_not_the_filters(tmp_path) -> None:
    from conftest import write_ops6k_parquet

    from cudagym.errors import UnknownTaskError

    bad = write_ops6k_parquet(tmp_path / "data.parquet", [
        {"ops": ["ReLU"], "data_source": "torch#1", "code": "not python ((("},
        {"ops": ["Tanh"], "data_source": "torch#1", "code": "x = 1\n"},
    ])
    env = gym.make("CudaKernel-Ops6K-v0", suite_options={"path": str(bad)})
    with pytest.raises(UnknownTaskError) as err:
        _ = env.unwrapped.tasks
    message = str(err.value)
    assert "loaded no task" in message and "the data holds none" in message and "loosen" not in message
    assert "2 malformed row(s) or file(s) were skipped" in message


def test_an_empty_result_with_filters_names_the_filters(ops6k_parquet) -> None:
    from cudagym.errors import UnknownTaskError

    env = gym.make("CudaKernel-Ops6K-v0", suite_options={"path": str(ops6k_parquet), "ops": ["NoSuchOp"]})
    with pytest.raises(UnknownTaskError, match=r"matched ops=\['NoSuchOp'\]; loosen these filters"):
        _ = env.unwrapped.tasks
