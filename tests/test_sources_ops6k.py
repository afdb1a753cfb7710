from __future__ import annotations

import logging
from pathlib import Path

import pytest
from conftest import OPS6K_ROWS, ops6k_records, write_ops6k_parquet

from cudagym.errors import ConfigError, DataUnavailableError, TaskFormatError
from cudagym.sources.ops6k import NON_TORCH_LEVEL, Ops6KSource, level_of, op_key, task_name

pytestmark = pytest.mark.usefixtures("offline_data_env")


def test_every_row_becomes_a_task_with_row_based_id(ops6k_parquet):
    source = Ops6KSource(ops6k_parquet)
    tasks = source.tasks()
    assert len(tasks) == len(OPS6K_ROWS)
    assert source.skipped == 0
    first = tasks[0]
    assert first.id == "ops6k/000000_Conv2d_ReLU"
    assert first.suite == "ops6k" and first.level == 2 and first.name == "000000_Conv2d_ReLU"
    assert first.ops == ("Conv2d", "ReLU")
    assert first.metadata["data_source"] == "torch#2" and first.metadata["row"] == 0
    assert first.source == ops6k_records()[0]["code"]


def test_level_is_number_of_composed_torch_ops(ops6k_parquet):
    levels = {t.metadata["row"]: t.level for t in Ops6KSource(ops6k_parquet)}
    assert levels == {
        i: (int(ds.split("#")[1]) if ds.startswith("torch#") else NON_TORCH_LEVEL)
        for i, (_, ds) in enumerate(OPS6K_ROWS)
    }
    assert levels[4] == 0  # the transformers row


def test_filters_by_number_of_ops(ops6k_parquet):
    two_or_three = Ops6KSource(ops6k_parquet, min_ops=2, max_ops=3).tasks()
    assert sorted({t.level for t in two_or_three}) == [2, 3]
    assert len(two_or_three) == sum(1 for _, ds in OPS6K_ROWS if ds in ("torch#2", "torch#3"))
    torch_only = Ops6KSource(ops6k_parquet, min_ops=1)
    assert all(t.metadata["data_source"].startswith("torch#") for t in torch_only)
    assert len(torch_only) == len(OPS6K_ROWS) - 1


def test_filters_by_op_names_case_insensitively(ops6k_parquet):
    tasks = Ops6KSource(ops6k_parquet, ops=["conv2d", "nn.RELU"]).tasks()
    assert [t.metadata["row"] for t in tasks] == [0, 2, 5, 6]
    single = Ops6KSource(ops6k_parquet, ops="tanh").tasks()
    assert [t.metadata["row"] for t in single] == [1, 6, 7]
    assert Ops6KSource(ops6k_parquet, ops=["Conv3d"]).tasks() == ()


def test_limit_and_rows_keep_ids_stable(ops6k_parquet):
    everything = {t.metadata["row"]: t for t in Ops6KSource(ops6k_parquet)}
    limited = Ops6KSource(ops6k_parquet, min_ops=2, limit=2).tasks()
    assert [t.metadata["row"] for t in limited] == [0, 2]
    assert limited[1] == everything[2]
    picked = Ops6KSource(ops6k_parquet, rows=[6, 3]).tasks()
    assert [t.id for t in picked] == [everything[3].id, everything[6].id]


def test_malformed_rows_are_skipped_logged_and_counted(tmp_path, caplog):
    records = ops6k_records()
    records[1] = {**records[1], "code": "import torch\n\nclass Model:\n    pass\n"}  # no forward, no inputs
    records[3] = {**records[3], "code": None}
    records[5] = {**records[5], "code": "def broken(:\n"}
    path = write_ops6k_parquet(tmp_path / "data.parquet", records)
    source = Ops6KSource(path)
    with caplog.at_level(logging.WARNING, logger="cudagym.sources.ops6k"):
        tasks = source.tasks()
    assert len(tasks) == len(records) - 3
    assert source.skipped == 3
    assert [s.row for s in source.skipped_rows] == [1, 3, 5]
    assert "row 5" in source.skipped_rows[2].reason and "not valid Python" in source.skipped_rows[2].reason
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 3 and "row 1" in warned[0].getMessage()


def test_strict_raises_on_a_malformed_row(tmp_path):
    records = ops6k_records()
    records[2] = {**records[2], "code": "x = 1\n"}
    path = write_ops6k_parquet(tmp_path / "data.parquet", records)
    with pytest.raises(TaskFormatError, match="row 2"):
        Ops6KSource(path, strict=True).tasks()


def test_filtered_out_malformed_rows_are_not_counted(tmp_path):
    records = ops6k_records()
    records[1] = {**records[1], "code": "x = 1\n"}  # torch#1 row
    path = write_ops6k_parquet(tmp_path / "data.parquet", records)
    source = Ops6KSource(path, min_ops=2)
    source.tasks()
    assert source.skipped == 0


def test_env_var_and_folder_with_data_parquet(ops6k_parquet, monkeypatch):
    monkeypatch.setenv("CUDAGYM_OPS6K_PARQUET", str(ops6k_parquet))
    assert len(Ops6KSource()) == len(OPS6K_ROWS)
    assert Ops6KSource(ops6k_parquet.parent).ids() == Ops6KSource(ops6k_parquet).ids()


def test_hub_snapshot_is_read_when_no_path(ops6k_parquet, offline_data_env, monkeypatch):
    import huggingface_hub

    calls = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs["local_files_only"], kwargs["repo_type"]))
        if kwargs["local_files_only"]:
            raise FileNotFoundError("not cached")
        return str(ops6k_parquet.parent)

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    assert len(Ops6KSource(max_ops=1)) == 2  # torch#1 and the transformers row (level 0)
    assert calls == [("BytedTsinghua-SIA/CUDA-Agent-Ops-6K", True, "dataset"),
                     ("BytedTsinghua-SIA/CUDA-Agent-Ops-6K", False, "dataset")]


def test_offline_without_data_says_how_to_provide_it():
    with pytest.raises(DataUnavailableError) as err:
        Ops6KSource().tasks()
    message = str(err.value)
    for needle in ("BytedTsinghua-SIA/CUDA-Agent-Ops-6K", 'gym.make("CudaKernel-Ops6K-v0", suite_options={"path":',
                   "`cudagym tasks list --suite ops6k --path <path>`", "CUDAGYM_OPS6K_PARQUET",
                   "hf download BytedTsinghua-SIA/CUDA-Agent-Ops-6K --repo-type dataset"):
        assert needle in message


def test_wrong_parquet_schema_and_garbage_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"code": ["x"], "level": [1]}), tmp_path / "other.parquet")
    with pytest.raises(DataUnavailableError, match="missing ops, data_source"):
        Ops6KSource(tmp_path / "other.parquet").tasks()
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"definitely not parquet")
    with pytest.raises(DataUnavailableError, match="could not read parquet file") as err:
        Ops6KSource(garbage).tasks()
    assert err.value.__cause__ is None and err.value.__suppress_context__
    with pytest.raises(DataUnavailableError, match="does not exist"):
        Ops6KSource(tmp_path / "nope.parquet").tasks()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataUnavailableError, match="found none"):
        Ops6KSource(empty).tasks()


@pytest.mark.parametrize("kwargs", [{"min_ops": -1}, {"max_ops": "2"}, {"limit": 1.5}, {"limit": True}])
def test_bad_filter_values_are_config_errors(kwargs):
    with pytest.raises(ConfigError, match="expected"):
        Ops6KSource(Path("unused.parquet"), **kwargs)


def test_helpers():
    assert level_of("torch#4") == 4 and level_of(" torch # 2 ") == 2
    assert level_of("transformers") == NON_TORCH_LEVEL and level_of(None) == NON_TORCH_LEVEL
    assert op_key("nn.Conv2d") == "conv2d" and op_key(" ReLU ") == "relu"
    assert task_name(12, ["nn.Conv2d", "Leaky ReLU", "?"]) == "000012_Conv2d_LeakyReLU"
    assert task_name(123456, []) == "123456"


def test_parsed_rows_are_shared_in_process_and_reparsed_when_the_file_changes(tmp_path):
    path = write_ops6k_parquet(tmp_path / "data.parquet")
    first = Ops6KSource(path).tasks()
    again = Ops6KSource(path, min_ops=2).tasks()
    assert all(any(a is f for f in first) for a in again)  # the same parsed objects, not parsed twice
    records = ops6k_records()
    records[0] = {**records[0], "code": records[0]["code"] + "\n\nextra = 1  # a change\n"}
    write_ops6k_parquet(path, records)
    changed = Ops6KSource(path, rows=[0]).tasks()[0]
    assert changed.source == records[0]["code"] and changed.content_hash != first[0].content_hash
