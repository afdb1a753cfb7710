"""Shared test fixtures.

GPU tests
    Mark a test ``@pytest.mark.gpu``; on a machine where ``torch.cuda.is_available()`` is False it is
    skipped (hook below). torch is imported only when a gpu-marked test was collected. ``cuda_available()``
    is the same check for use inside tests.

Task data in the real layouts (built by the tests, never downloaded)
    ``kernelbench_tree``      a KernelBench checkout: ``<root>/KernelBench/level{1..4}/<id>_<Name>.py``
                              with 100/100/50/20 problems (``KERNELBENCH_COUNTS``).
    ``kernelbench_parquet``   the HF data set's layout of the same problems:
                              ``<root>/data/level_{N}-00000-of-00001.parquet``, columns code, level, name,
                              problem_id.
    ``ops6k_parquet``         a CUDA-Agent-Ops-6K ``data.parquet`` (columns ops, data_source, code) with
                              ``OPS6K_ROWS`` rows: torch#1..#5 compositions and one transformers row.
    ``write_bundled_tree``    a folder laid out like ``envs/bundled/`` (tasks + extension solutions).
    ``offline_data_env``      no data env vars, HF_HUB_OFFLINE=1, a private CUDAGYM_CACHE_DIR: a test
                              that uses it can neither see the user's data nor reach the network.

Tests that need other sizes or broken files call the builders directly
(``from conftest import write_kernelbench_tree, kernelbench_problem, write_ops6k_parquet, ops6k_records``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

# pytester runs pytest on generated test files (tests of this conftest's gpu hook use it)
pytest_plugins = ("pytester",)

# -------------------------------------------------------------------------------------------- GPU skip


@functools.lru_cache(maxsize=1)
def cuda_available() -> bool:
    """True when torch sees a CUDA device (torch imported on first call only)."""
    import torch

    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``gpu`` where no CUDA device is present."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)


# ------------------------------------------------------------------------------- KernelBench-format text

KERNELBENCH_COUNTS: Mapping[int, int] = {1: 100, 2: 100, 3: 50, 4: 20}

# (name, forward expression of x, extra init line) for single-op problems
_SINGLE_OPS = (
    ("ReLU", "torch.relu(x)", ""),
    ("Sigmoid", "torch.sigmoid(x)", ""),
    ("Tanh", "torch.tanh(x)", ""),
    ("Softmax", "torch.softmax(x, dim=1)", ""),
    ("Sum_reduction_over_a_dimension", "torch.sum(x, dim=1, keepdim=True)", ""),
    ("GELU_", "torch.nn.functional.gelu(x)", ""),
    ("LayerNorm", "self.norm(x)", "self.norm = nn.LayerNorm(dim)"),
    ("Matmul_with_transposed_B", "torch.matmul(x, x.t())", ""),
)


def kernelbench_problem(level: int, problem_id: int) -> tuple[str, str]:
    """A valid KernelBench-format problem ``(file stem, source)``; sizes differ per id so hashes differ."""
    name, expr, init = _SINGLE_OPS[problem_id % len(_SINGLE_OPS)]
    if level == 2:
        name, expr = f"Linear_{name}", expr.replace("(x", "(self.fc(x)", 1)
        init = "self.fc = nn.Linear(dim, dim)" + (f"\n        {init}" if init else "")
    elif level == 3:
        name, expr = f"MLP_{problem_id}_layers", "self.net(x)"
        init = "self.net = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))"
    init_block = f"        {init}\n" if init else ""
    imports = "import torch\nimport torch.nn as nn\n"
    if level == 4:  # KernelBench level 4 builds HF models; parsing must not need transformers
        imports += "from transformers import AutoConfig, AutoModelForCausalLM\n"
        name, expr = f"gpt2_bs{problem_id}_seq{32 * problem_id}", "self.model(x).logits"
        init_block = "        self.model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained('gpt2'))\n"
    source = (
        f'{imports}\n\nclass Model(nn.Module):\n    """Problem {problem_id} of level {level}."""\n\n'
        f"    def __init__(self):\n        super().__init__()\n{init_block}\n"
        f"    def forward(self, x):\n        return {expr}\n\n\n"
        f"batch_size = {16 + problem_id}\ndim = {64 * (level + problem_id % 7)}\n\n\n"
        f"def get_inputs():\n    return [torch.rand(batch_size, dim)]\n\n\n"
        f"def get_init_inputs():\n    return []\n"
    )
    return f"{problem_id}_{name}", source


def write_kernelbench_tree(root: Path, counts: Mapping[int, int] = KERNELBENCH_COUNTS) -> Path:
    """Write a KernelBench checkout under ``root`` (``root/KernelBench/level{N}/...``); returns ``root``."""
    for level, count in counts.items():
        folder = root / "KernelBench" / f"level{level}"
        folder.mkdir(parents=True, exist_ok=True)
        for problem_id in range(1, count + 1):
            stem, source = kernelbench_problem(level, problem_id)
            (folder / f"{stem}.py").write_text(source, encoding="utf-8")
    return root


def write_kernelbench_parquet(root: Path, counts: Mapping[int, int] = KERNELBENCH_COUNTS) -> Path:
    """Write the HF layout ``root/data/level_{N}-00000-of-00001.parquet``; returns ``root``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "data").mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("code", pa.string()), ("level", pa.int64()), ("name", pa.string()),
                        ("problem_id", pa.int64())])
    for level, count in counts.items():
        problems = [kernelbench_problem(level, pid) for pid in range(1, count + 1)]
        table = pa.table(
            {
                "code": [src for _, src in problems],
                "level": [level] * count,
                "name": [stem for stem, _ in problems],
                "problem_id": list(range(1, count + 1)),
            },
            schema=schema,
        )
        pq.write_table(table, root / "data" / f"level_{level}-00000-of-00001.parquet")
    return root


# ------------------------------------------------------------------------------------------- Ops-6K

_OPS6K_LAYERS = {
    "Conv2d": ("nn.Conv2d(3, 8, 3)", 3),
    "ReLU": ("nn.ReLU()", None),
    "BatchNorm2d": ("nn.BatchNorm2d(8)", None),
    "MaxPool2d": ("nn.MaxPool2d(2)", None),
    "Tanh": ("nn.Tanh()", None),
    "GELU": ("nn.GELU()", None),
}


def ops6k_code(ops: Sequence[str], seed: int) -> str:
    """A KernelBench-format module stacking the named torch layers (as the data set's rows do)."""
    layers = ", ".join(_OPS6K_LAYERS[op][0] for op in ops)
    return (
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        f"        self.layers = nn.Sequential({layers})\n\n"
        "    def forward(self, x):\n        return self.layers(x)\n\n\n"
        f"def get_inputs():\n    return [torch.rand({4 + seed}, 3, 32, 32)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )


_TRANSFORMERS_CODE = (
    "import torch\nimport torch.nn as nn\nfrom transformers.models.llama.modeling_llama import LlamaRMSNorm\n\n\n"
    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.norm = LlamaRMSNorm(64)\n\n    def forward(self, x):\n        return self.norm(x)\n\n\n"
    "def get_inputs():\n    return [torch.rand(8, 64)]\n\n\ndef get_init_inputs():\n    return []\n"
)

# (ops, data_source): torch#1..#5 and one transformers row, like the real data set's mix
OPS6K_ROWS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("Conv2d", "ReLU"), "torch#2"),
    (("Tanh",), "torch#1"),
    (("Conv2d", "BatchNorm2d", "ReLU"), "torch#3"),
    (("Conv2d", "GELU"), "torch#2"),
    (("LlamaRMSNorm",), "transformers"),
    (("Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d"), "torch#4"),
    (("Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d", "Tanh"), "torch#5"),
    (("Conv2d", "Tanh"), "torch#2"),
)


def ops6k_records(rows: Sequence[tuple[Sequence[str], str]] = OPS6K_ROWS) -> list[dict[str, object]]:
    """Rows in the data set's schema for ``(ops, data_source)`` pairs."""
    records: list[dict[str, object]] = []
    for index, (ops, data_source) in enumerate(rows):
        code = _TRANSFORMERS_CODE if data_source == "transformers" else ops6k_code(ops, index)
        records.append({"ops": list(ops), "data_source": data_source, "code": code})
    return records


def write_ops6k_parquet(path: Path, records: Sequence[Mapping[str, object]] | None = None) -> Path:
    """Write ``records`` (default :func:`ops6k_records`) as an Ops-6K parquet file at ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = ops6k_records() if records is None else records
    schema = pa.schema([("ops", pa.list_(pa.string())), ("data_source", pa.string()), ("code", pa.string())])
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([dict(r) for r in records], schema=schema)
    pq.write_table(table, path)
    return path


# ------------------------------------------------------------------------------------------ bundled

# (level, file stem, problem id used to generate valid content)
BUNDLED_FAKE_TASKS = (
    (1, "01_ReLU", 1),
    (1, "02_Sigmoid", 2),
    (1, "10_Softmax", 3),
    (2, "01_gemm_bias_gelu", 4),
    (3, "01_mlp", 5),
)


def write_bundled_tree(root: Path) -> Path:
    """A folder laid out like envs/bundled/: tasks/L{n}/NN_Name.py and solutions/L{n}/NN_Name/."""
    for level, stem, pid in BUNDLED_FAKE_TASKS:
        task_dir = root / "tasks" / f"L{level}"
        task_dir.mkdir(parents=True, exist_ok=True)
        (task_dir / f"{stem}.py").write_text(kernelbench_problem(min(level, 3), pid)[1])
        solution = root / "solutions" / f"L{level}" / stem
        (solution / "kernels").mkdir(parents=True, exist_ok=True)
        (solution / "model_new.py").write_text(f"import cuda_extension\n# {stem}\n")
        (solution / "kernels" / "op.cu").write_text(f'extern "C" void launch_{pid}() {{}}\n')
        (solution / "kernels" / "op_binding.cpp").write_text(f"// binding of {stem}\n")
        (solution / "notes.txt").write_text("not part of the solution format\n")
    (root / "tasks" / "L1" / "__init__.py").write_text("")
    (root / "tasks" / "README.md").write_text("# bundled tasks\n")
    return root


# ------------------------------------------------------------------------------------------ fixtures

DATA_ENV_VARS = ("CUDAGYM_KERNELBENCH_DIR", "CUDAGYM_KERNELBENCH_PARQUET", "CUDAGYM_OPS6K_PARQUET")


@pytest.fixture(scope="session")
def kernelbench_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A KernelBench checkout (repository root) with 100/100/50/20 problems; do not modify it."""
    return write_kernelbench_tree(tmp_path_factory.mktemp("kernelbench-checkout"))


@pytest.fixture(scope="session")
def kernelbench_parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HF data set layout (folder holding ``data/level_N-00000-of-00001.parquet``); do not modify it."""
    return write_kernelbench_parquet(tmp_path_factory.mktemp("kernelbench-hf"))


@pytest.fixture(scope="session")
def ops6k_parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Ops-6K ``data.parquet`` holding ``OPS6K_ROWS``; do not modify it."""
    return write_ops6k_parquet(tmp_path_factory.mktemp("ops6k") / "data.parquet")


@pytest.fixture
def offline_data_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No data env vars, ``HF_HUB_OFFLINE=1`` and an empty private cache; yields the cache folder."""
    for name in DATA_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    cache = tmp_path / "cudagym-cache"
    monkeypatch.setenv("CUDAGYM_CACHE_DIR", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield cache


@pytest.fixture
def loopback_listener() -> Iterator[object]:
    """A listener on the host's 127.0.0.1 that counts connections (none may come from a sandbox)."""
    from faults import LoopbackListener

    listener = LoopbackListener()
    try:
        yield listener
    finally:
        listener.close()
