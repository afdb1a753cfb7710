from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cudagym.errors import DataUnavailableError
from cudagym.sources import hub
from cudagym.sources.hub import HubDataset, cache_dir, fetch_snapshot, files_for_split, parquet_files, read_rows

DATASET = HubDataset(repo_id="someone/some-data", allow_patterns=("*.parquet",), path_env="SOME_PARQUET")


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("CUDAGYM_CACHE_DIR", raising=False)
    assert cache_dir() == tmp_path / "home" / ".cache" / "cudagym"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "cudagym"
    monkeypatch.setenv("CUDAGYM_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    assert hub.hub_cache_dir() == tmp_path / "mine" / "hf"


@pytest.mark.parametrize(("value", "offline"), [("1", True), ("TRUE", True), ("yes", True), ("0", False), ("", False)])
def test_hub_offline_reads_hf_hub_offline(monkeypatch, value, offline):
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert hub.hub_offline() is offline


def test_files_for_split_matches_whole_split_names():
    files = [Path("data/level_1-00000-of-00001.parquet"), Path("data/level_10-00000-of-00001.parquet"),
             Path("default/level_1/0000.parquet"), Path("data/level_2-00000-of-00001.parquet")]
    assert files_for_split(files, "level_1") == [files[0], files[2]]
    assert files_for_split(files, "level_2") == [files[3]]
    other = [Path("x/train.parquet")]
    assert files_for_split(other, "level_3") == other  # no file names the split: use them all


def test_parquet_files_file_or_folder(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    for rel in ("a/2.parquet", "a/b/1.parquet", "a/notes.txt"):
        (tmp_path / rel).write_bytes(b"")
    assert parquet_files(tmp_path / "a", how_to="HOW") == [tmp_path / "a/2.parquet", tmp_path / "a/b/1.parquet"]
    assert parquet_files(tmp_path / "a/2.parquet", how_to="HOW") == [tmp_path / "a/2.parquet"]
    with pytest.raises(DataUnavailableError, match="does not exist; HOW"):
        parquet_files(tmp_path / "missing", how_to="HOW")


def test_read_rows_in_file_order_with_optional_columns(tmp_path):
    pq.write_table(pa.table({"code": ["a", "b"], "extra": [1, 2]}), tmp_path / "1.parquet")
    pq.write_table(pa.table({"code": ["c"], "unused": [0.5]}), tmp_path / "2.parquet")
    rows = read_rows([tmp_path / "1.parquet", tmp_path / "2.parquet"], ["code"], how_to="", optional=["extra"])
    assert rows == [{"code": "a", "extra": 1}, {"code": "b", "extra": 2}, {"code": "c", "extra": None}]


def test_fetch_snapshot_downloads_into_the_cudagym_cache(monkeypatch, tmp_path):
    import huggingface_hub

    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    seen = []

    def fake(repo_id, **kwargs):
        seen.append(kwargs)
        if kwargs["local_files_only"]:
            return str(snapshot)  # cached, but holds no parquet yet: must download
        (snapshot / "data.parquet").write_bytes(b"x")
        return str(snapshot)

    monkeypatch.setenv("CUDAGYM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    assert fetch_snapshot(DATASET, revision="v1") == snapshot
    assert [s["local_files_only"] for s in seen] == [True, False]
    assert all(s["revision"] == "v1" and s["cache_dir"] == str(tmp_path / "cache" / "hf") for s in seen)
    seen.clear()
    fetch_snapshot(DATASET, refresh=True)
    assert [s["local_files_only"] for s in seen] == [False]


def test_how_to_provide_names_every_way(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDAGYM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("CUDAGYM_OFFLINE", raising=False)
    dataset = HubDataset(repo_id="someone/some-data", allow_patterns=("*.parquet",), path_env="SOME_PARQUET",
                         suite="some", env_id="Some-v0", other_ways=("a checkout: ask someone",))
    text = dataset.how_to_provide()
    for needle in ("(1) a checkout: ask someone", 'gym.make("Some-v0", suite_options={"path": "<path>"})',
                   "`cudagym tasks list --suite some --path <path>`", "SOME_PARQUET=<path>",
                   f"hf download someone/some-data --repo-type dataset --cache-dir {tmp_path / 'hf'}"):
        assert needle in text
    # with the hub client installed and the network allowed there is nothing to install or unset
    assert "pip install" not in text and "unset" not in text


def test_how_to_provide_asks_to_install_or_unset_only_what_stands_in_the_way(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    monkeypatch.setenv("CUDAGYM_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    text = DATASET.how_to_provide()
    assert 'install pyarrow (pip install "cudagym[hf]")' in text and "huggingface_hub and" not in text
    assert "unset CUDAGYM_OFFLINE to allow the one download" in text and "HF_HUB_OFFLINE" not in text


def test_cudagym_offline_keeps_the_loader_off_the_network(monkeypatch, tmp_path):
    import huggingface_hub

    asked = []

    def snapshot_download(repo_id, **kwargs):
        asked.append(kwargs["local_files_only"])
        raise FileNotFoundError("not cached")

    monkeypatch.setenv("CUDAGYM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("CUDAGYM_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(DataUnavailableError, match="nothing is downloaded while CUDAGYM_OFFLINE is set"):
        fetch_snapshot(DATASET)
    assert asked == [True]  # the cache was looked at; the network never
    assert hub.hub_offline()
