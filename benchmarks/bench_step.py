"""Step overhead of the env's file tools and action parsing (FakeJudge; no GPU, no build).

Run: ``pytest benchmarks/bench_step.py --benchmark-columns=median,mean,min,max,rounds``.
Target: each file-tool step() and each parse <= 1 ms median (p50) on a 2-core CPU (compile and reset are
shown beside them, without a target).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fakes import FakeJudge  # noqa: E402

from cudagym.env import CudaKernelEnv  # noqa: E402
from cudagym.task import make_task  # noqa: E402
from cudagym.toolcalls import parse_action  # noqa: E402

REFERENCE = (
    "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
    "        super().__init__()\n\n    def forward(self, x):\n        return torch.relu(x)\n\n\n"
    "batch_size = 16\ndim = 16384\n\n\ndef get_inputs():\n    return [torch.rand(batch_size, dim)]\n\n\n"
    "def get_init_inputs():\n    return []\n"
)
TASK = make_task(REFERENCE, id="L1/19_ReLU", suite="kernelbench", level=1, name="19_ReLU", origin="bench")

# a realistic kernel file: ~2 KB of CUDA
KERNEL = (
    "#include <cuda_runtime.h>\n\n"
    "__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    int stride = blockDim.x * gridDim.x;\n"
    "    for (; i < n / 4; i += stride) {\n"
    "        float4 v = reinterpret_cast<const float4*>(x)[i];\n"
    "        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);\n"
    "        reinterpret_cast<float4*>(y)[i] = v;\n"
    "    }\n"
    "}\n\n"
    'extern "C" void relu_launch(const float* x, float* y, int n, int config, cudaStream_t stream) {\n'
    "    int threads = 256;\n"
    "    int blocks = (n / 4 + threads - 1) / threads;\n"
    "    relu_kernel<<<blocks, threads, 0, stream>>>(x, y, n);\n"
    "}\n"
) * 3


def act(name: str, **arguments: object) -> str:
    return json.dumps({"name": name, "arguments": arguments})


@pytest.fixture
def env(tmp_path: Path) -> CudaKernelEnv:
    e = CudaKernelEnv(judge=FakeJudge(), token_counter="cudagym:code-bpe-16k", max_turns=10**9,
                      token_budget=10**15, workspace_dir=str(tmp_path))
    e.reset(seed=0, options={"task": TASK})
    e.step(act("write_file", path="kernels/relu.cu", content=KERNEL))
    e.step(act("write_file", path="model_new.py", content="import cuda_extension\nx = 1\n"))
    yield e
    e.close()


def test_parse_json_action(benchmark) -> None:
    action = act("write_file", path="kernels/relu.cu", content=KERNEL)
    assert benchmark(parse_action, action).name == "write_file"


def test_parse_tagged_action(benchmark) -> None:
    action = "I will vectorise the loads with float4.\n<tool_call>" + act("compile") + "</tool_call>"
    assert benchmark(parse_action, action).name == "compile"


def test_step_read_file(benchmark, env: CudaKernelEnv) -> None:
    obs, *_ = benchmark(env.step, act("read_file", path="kernels/relu.cu"))
    assert obs.startswith("kernels/relu.cu (lines 1-")


def test_step_write_file(benchmark, env: CudaKernelEnv) -> None:
    obs, *_ = benchmark(env.step, act("write_file", path="kernels/relu.cu", content=KERNEL))
    assert obs.startswith("Overwrote kernels/relu.cu")


def test_step_edit_file(benchmark, env: CudaKernelEnv) -> None:
    # alternate two edits so every call changes the file
    actions = [act("edit_file", path="model_new.py", old="x = 1", new="x = 2"),
               act("edit_file", path="model_new.py", old="x = 2", new="x = 1")]
    state = {"i": 0}

    def step() -> str:
        state["i"] ^= 1
        return env.step(actions[state["i"] ^ 1])[0]

    assert benchmark(step).startswith("Edited model_new.py")


def test_step_edit_file_many_matches(benchmark, env: CudaKernelEnv) -> None:
    # replace_all over a full file of one-character matches (256 KiB: 262,144 of them), the size cap's worst case
    full = "\n" * (256 * 1024)

    def step() -> str:
        env.step(act("write_file", path="model_new.py", content=full))
        return env.step(act("edit_file", path="model_new.py", old="\n", new="x", replace_all=True))[0]

    assert benchmark.pedantic(step, rounds=3, iterations=1).startswith("Edited model_new.py")


def test_step_list_files(benchmark, env: CudaKernelEnv) -> None:
    obs, *_ = benchmark(env.step, act("list_files"))
    assert "kernels/relu.cu" in obs


def test_step_malformed_action(benchmark, env: CudaKernelEnv) -> None:
    obs, *_ = benchmark(env.step, "I think I should compile now but forgot the tags")
    assert obs.startswith("Error:")


def test_step_compile(benchmark, env: CudaKernelEnv) -> None:
    # the env's side of a build: parse, snapshot the workspace, hand it to the judge (FakeJudge: instant), render
    obs, *_ = benchmark(env.step, act("compile"))
    assert obs.startswith("Build OK")


def test_reset_on_the_same_task(benchmark, env: CudaKernelEnv) -> None:
    # a vector env's autoreset: prompt, fresh workspace, the prompt's token count (remembered after the first)
    obs, _ = benchmark(env.reset, seed=0, options={"task": TASK})
    assert obs.startswith("# Task:")
