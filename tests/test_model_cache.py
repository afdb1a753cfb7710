"""Tasks that load pretrained models (KernelBench level 4) through the real sandbox, offline, from the model cache.

A tiny GPT-2 saved in the Hugging Face hub cache's layout stands in for a downloaded model: with the cache in
``PoolOptions.model_cache`` the trusted worker and the candidate's runner, both confined and without network,
load it; without it the verdict says where models come from. The static scan and ``cudagym tasks
fetch-models`` are tested on KernelBench-shaped sources and a stand-in ``huggingface_hub``.
"""

from __future__ import annotations

import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus
from cudagym.judge.worker import PoolOptions, WorkerPool
from cudagym.solution import Solution
from cudagym.sources.models import fetch_models, models_of, pretrained_models
from cudagym.task import make_task

transformers = pytest.importorskip("transformers")

REPO = "cudagym-test/tiny-gpt2"
COMMIT = "0123456789abcdef0123456789abcdef01234567"

TASK = f'''
import torch
from transformers import AutoModelForCausalLM, AutoConfig

class Model(torch.nn.Module):
    def __init__(self, model_name, config):
        super().__init__()
        self.model_name = model_name
        self.config = config
        self.model = AutoModelForCausalLM.from_pretrained(self.model_name, config=self.config)

    def forward(self, x):
        return self.model(x).logits

model_name = "{REPO}"
config = AutoConfig.from_pretrained(model_name)

def get_inputs():
    return [torch.randint(0, config.vocab_size, (2, 8))]

def get_init_inputs():
    return [model_name, config]
'''

CANDIDATE = '''
import torch
from transformers import AutoModelForCausalLM

class ModelNew(torch.nn.Module):
    def __init__(self, model_name, config):
        super().__init__()
        self.model = AutoModelForCausalLM.from_pretrained(model_name, config=config)

    def forward(self, x):
        return self.model(x).logits
'''


def hub_cache(root: Path) -> Path:
    """A hub cache holding :data:`REPO` at :data:`COMMIT` (config and safetensors weights), as a download leaves it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    repo = root / ("models--" + REPO.replace("/", "--"))
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32))
    model.save_pretrained(repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return root


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hub_cache(tmp_path_factory.mktemp("models"))


def pool_with(model_cache: str) -> WorkerPool:
    options = PoolOptions(job_fn="cudagym.judge.split.trusted:run_job_on_cpu", runner=True, startup_timeout_s=180.0,
                          spare_runners=1, model_cache=model_cache)
    return WorkerPool(["0"], options=options)


def judge(pool: WorkerPool) -> EvalResult:
    job = Job(
        job_id="l4",
        task=make_task(TASK, id="test/l4_tiny_gpt2", suite="test", level=4, name="l4_tiny_gpt2", origin="test"),
        solution=Solution("inline", {"model_new.py": textwrap.dedent(CANDIDATE)}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=EvalMode.PROFILE,
        protocol=CUDAGYM_V0.with_changes(id="test-l4", guards=(), num_inputs=2, warmup_runs=1, warmup_ms=0.0,
                                         min_runs=3, max_runs=3, target_ci_pct=0.0),
        baselines=KnownBaselines(),
    )
    return pool.submit(job).result(timeout=300)


@pytest.fixture(scope="module")
def with_cache(cache: Path) -> Iterator[WorkerPool]:
    with pool_with(str(cache)) as pool:
        yield pool


def test_a_pretrained_task_loads_offline_from_the_model_cache_in_both_confined_processes(with_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    result = judge(with_cache)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert len(result.checks) == 2 and all(c.passed and c.max_abs_error == 0.0 for c in result.checks)
    assert result.candidate.runs == 3 and result.eager.runs == 3
    assert "made by the trusted process" in result.log  # the reference ran in the worker, the candidate in its runner
    assert all(info.network_isolated for info in with_cache.info())  # no hub to fall back on: the cache alone


def test_without_the_cache_the_verdict_says_where_models_come_from(tmp_path):
    (tmp_path / "empty").mkdir()
    with pool_with(str(tmp_path / "empty")) as pool:
        result = judge(pool)
    assert result.status is EvalStatus.INFRA_ERROR, result.message
    assert "the task is invalid" in result.message and REPO in result.message
    assert "cudagym tasks fetch-models" in result.message and "CUDAGYM_MODEL_CACHE" in result.message
    assert f"this task loads {REPO}" in result.message


def test_a_model_cache_that_is_not_a_folder_is_a_clear_error(tmp_path):
    from cudagym.errors import ConfigError

    with pytest.raises(ConfigError, match="the model cache .*missing is not a folder"):
        pool_with(str(tmp_path / "missing"))


def test_the_pool_mounts_the_cache_read_only_and_sets_the_hub_offline(cache):
    options = PoolOptions(model_cache=str(cache), pythonpath=("/opt/x",))
    assert options.reads() == ("/opt/x", str(cache))
    assert options.model_env() == {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                   "HF_HUB_DISABLE_TELEMETRY": "1"}
    none = PoolOptions(model_cache="")
    assert none.reads() == () and none.model_env() == {}


def test_the_default_cache_is_used_only_where_it_exists(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAGYM_MODEL_CACHE", str(tmp_path / "models"))
    assert PoolOptions().model_cache_path() == ""
    (tmp_path / "models").mkdir()
    assert PoolOptions().model_cache_path() == str((tmp_path / "models").resolve())


def test_the_scan_finds_literals_and_module_level_names_passed_to_from_pretrained():
    assert pretrained_models(TASK) == [REPO]
    both = 'from transformers import AutoModel\nm = AutoModel.from_pretrained("a/b")\nn = "c/d"\n' \
           'def f():\n    return AutoModel.from_pretrained(n), AutoModel.from_pretrained("a/b")\n'
    assert pretrained_models(both) == ["a/b", "c/d"]
    assert pretrained_models("x = (") == [] and pretrained_models("import torch") == []
    tasks = [make_task(TASK, id=f"test/t{i}", suite="test", level=4, name=f"t{i}", origin="test") for i in range(2)]
    assert models_of(tasks) == {REPO: ["test/t0", "test/t1"]}


def test_fetching_takes_configs_and_one_kind_of_weights_and_names_what_failed(tmp_path, monkeypatch):
    calls = []

    def list_repo_files(repo):
        if repo == "gone/model":
            raise OSError("404 Client Error: Repository Not Found")
        return ["config.json", "model.safetensors", "pytorch_model.bin"] if repo == "a/b" else ["pytorch_model.bin"]

    def snapshot_download(repo, cache_dir, allow_patterns):
        calls.append((repo, cache_dir, allow_patterns))
        return str(Path(cache_dir) / repo)

    fake = types.SimpleNamespace(list_repo_files=list_repo_files, snapshot_download=snapshot_download)
    monkeypatch.setitem(sys.modules, "huggingface_hub", fake)
    snapshots = fetch_models(["a/b", "c/d"], tmp_path / "cache")
    assert snapshots == [tmp_path / "cache" / "a/b", tmp_path / "cache" / "c/d"]
    assert calls == [("a/b", str(tmp_path / "cache"), ["*.json", "*.safetensors"]),
                     ("c/d", str(tmp_path / "cache"), ["*.json", "*.bin"])]
    from cudagym.errors import DataUnavailableError

    with pytest.raises(DataUnavailableError, match="could not fetch the model gone/model .*Repository Not Found"):
        fetch_models(["gone/model"], tmp_path / "cache")


def test_the_command_lists_and_fetches_a_checkouts_level_4_models(tmp_path, monkeypatch, capsys):
    from cudagym.cli import main

    level4 = tmp_path / "KernelBench" / "KernelBench" / "level4"
    level4.mkdir(parents=True)
    (level4 / "1_tiny_gpt2_bs2_seq8.py").write_text(TASK)
    (level4 / "2_tiny_gpt2_bs4_seq8.py").write_text(TASK)
    root = str(tmp_path / "KernelBench")
    assert main(["tasks", "fetch-models", "--root", root, "--level", "4", "--list"]) == 0
    out = capsys.readouterr().out
    assert f"{REPO}  L4/1_tiny_gpt2_bs2_seq8, L4/2_tiny_gpt2_bs4_seq8" in out and "not fetched (--list)" in out
    fetched = []
    fake = types.SimpleNamespace(list_repo_files=lambda repo: ["config.json", "model.safetensors"],
                                 snapshot_download=lambda repo, cache_dir, allow_patterns: fetched.append(repo)
                                 or str(Path(cache_dir) / "snapshot"))
    monkeypatch.setitem(sys.modules, "huggingface_hub", fake)
    dest = tmp_path / "models"
    assert main(["tasks", "fetch-models", "--root", root, "--level", "4", "--dest", str(dest)]) == 0
    out = capsys.readouterr().out
    assert fetched == [REPO] and f"fetched {REPO} -> {dest / 'snapshot'}" in out
    assert f"1 model(s) in {dest} (the judge reads it with CUDAGYM_MODEL_CACHE={dest})" in out
    assert main(["tasks", "fetch-models", "--root", root, "--level", "1"]) == 2  # no level-1 folder here
