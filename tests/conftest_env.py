"""Helpers for the env's tests: a tiny KernelBench tree, env construction with a FakeJudge, action builders.

Not a conftest (tests/conftest.py belongs to the task sources); test modules import what they use.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import write_kernelbench_tree
from fakes import FakeJudge

from cudagym.env import CudaKernelEnv

# A shipped, offline tokenizer: env tests never wait on a tiktoken download.
TOKENIZER = "cudagym:code-bpe-16k"
SMALL_COUNTS = {1: 4, 2: 3, 3: 2, 4: 1}


def small_kernelbench(root: Path) -> Path:
    """A KernelBench checkout with 4/3/2/1 problems per level; returns the checkout root."""
    return write_kernelbench_tree(root, SMALL_COUNTS)


def make_env(tree: Path, judge: FakeJudge | None = None, **kwargs: Any) -> CudaKernelEnv:
    """A level-1 KernelBench env on ``tree`` with a FakeJudge and the shipped tokenizer."""
    options: dict[str, Any] = {
        "suite": "kernelbench", "level": 1, "suite_options": {"root": str(tree)},
        "judge": judge if judge is not None else FakeJudge(), "token_counter": TOKENIZER,
    }
    options.update(kwargs)
    return CudaKernelEnv(**options)


def act(name: str, **arguments: Any) -> str:
    """An OpenAI-style JSON action."""
    return json.dumps({"name": name, "arguments": arguments})


SOLUTION = {
    "model_new.py": "import torch\nimport cuda_extension\n\n\nclass ModelNew(torch.nn.Module):\n"
    "    def forward(self, x):\n        return cuda_extension.relu(x)\n",
    "kernels/relu.cu": '__global__ void relu_kernel(const float* x, float* y, int n) {}\n'
    'extern "C" void relu_launch(const float* x, float* y, int n, cudaStream_t s) {}\n',
    "kernels/relu_binding.cpp": '#include "../binding_registry.h"\n',
}


def write_solution_actions(files: dict[str, str] = SOLUTION) -> list[str]:
    """write_file actions for every file of a solution."""
    return [act("write_file", path=path, content=text) for path, text in files.items()]
