"""Token counting on env-sized texts: the shipped BPE per observation, and re-resolving the default counter."""

from __future__ import annotations

import pytest

from cudagym.tokens import SHIPPED_NAME, get_token_counter

OBSERVATION = (
    'kernels/relu.cu(12): error: identifier "threadIdx_x" is undefined\n'
    "ptxas info    : Used 18 registers, 380 bytes cmem[0]\n"
    "| input | pass | max_abs_err | max_rel_err |\n|---|---|---|---|\n| 0 | yes | 0.0 | 0.0 |\n"
    "__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {\n"
    "    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n    if (i < n) y[i] = fmaxf(x[i], 0.f);\n}\n"
) * 40  # about 16 kB, a long compiler or profiler observation


@pytest.fixture(scope="module")
def shipped():
    return get_token_counter(SHIPPED_NAME)


def test_count_one_observation_shipped(benchmark, shipped):
    n = benchmark(shipped.count, OBSERVATION)
    assert n > 0


def test_count_one_short_action_shipped(benchmark, shipped):
    action = '<tool_call>{"name": "compile", "arguments": {}}</tool_call>'
    assert benchmark(shipped.count, action) > 0


def test_resolve_default_counter_again(benchmark):
    get_token_counter()  # the first call may probe the cache or the network; later ones reuse the outcome
    assert benchmark(get_token_counter).name
