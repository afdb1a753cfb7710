"""Every kernel family computes its task's reference on the CPU, through a CPU emulation of its CUDA C.

No GPU here: ``sb3_cuda_emulator`` compiles each rendered ``.cu`` with g++ against a header that runs every CUDA
thread of a block as an OS thread (barriers and warp shuffles included), and ``model_new.py`` launches it as it
would launch the judge-built cubin. Inputs are small versions of each task's (with ragged sizes: partial tiles,
partial vectors, several scan chunks), the reference's state is loaded into ``ModelNew``, and the outputs must
agree at the default protocol's tolerance (atol = rtol = 1e-4). The GPU test (``tests/test_sb3_gpu.py``) is
the judge's word on real hardware; this one catches indexing, bounds and barrier mistakes before it runs.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from sb3_cuda_emulator import compiler, run_solution

from cudagym.integrations.kernel_families import FAMILIES
from cudagym.sources.bundled import BundledSource

pytestmark = pytest.mark.skipif(compiler() is None, reason="needs g++ (C++20) for the CPU emulation")


def _randn(*shape: int) -> Callable[[], list[torch.Tensor]]:
    return lambda: [torch.randn(*shape)]


# task: (constructor arguments, inputs), small and ragged
CASES: dict[str, tuple[list[Any], Callable[[], list[torch.Tensor]]]] = {
    "bundled/L1/01_Swish": ([], _randn(7, 133)),
    "bundled/L1/02_NewGELU": ([], _randn(7, 133)),
    "bundled/L1/03_Mish": ([], _randn(7, 133)),
    "bundled/L1/04_RMSNormChannels": ([8], _randn(2, 8, 6, 6)),
    "bundled/L1/05_Softmax": ([], lambda: [3 * torch.randn(3, 200)]),
    "bundled/L1/06_LogSoftmax": ([], lambda: [3 * torch.randn(3, 200)]),
    "bundled/L1/07_LayerNormLarge": ([(4, 6, 6)], _randn(2, 4, 6, 6)),
    "bundled/L1/08_CumSum": ([1], lambda: [torch.rand(3, 1000)]),
    "bundled/L1/09_DiagMatmul": ([], lambda: [torch.randn(50), torch.randn(50, 36)]),
    "bundled/L1/10_TrilMatmul": ([], lambda: [torch.randn(100, 100) / 10, torch.randn(100, 100)]),
    "bundled/L1/11_BatchedTinyMatmul": ([], lambda: [torch.randn(5, 16, 16), torch.randn(5, 16, 16)]),
    "bundled/L1/12_MatmulSmallKScale": ([0.37], lambda: [torch.randn(70, 16), torch.randn(16, 130)]),
    "bundled/L1/13_DepthwiseConv2d": ([3], _randn(2, 3, 19, 23)),
    "bundled/L1/14_SumSquaresDim1": ([], _randn(2, 37, 20)),
    "bundled/L2/01_GemmGeluScaleShift": ([24, 50], _randn(37, 24)),
    "bundled/L2/02_DWConvBNReLU": ([3], _randn(2, 3, 19, 23)),
    "bundled/L2/03_ResidualAddLayerNorm": ([64], lambda: [torch.randn(5, 64), torch.randn(5, 64)]),
    "bundled/L2/04_ScaleCausalMaskSoftmax": ([1.5, 32], _randn(2, 2, 20, 20)),
    "bundled/L2/05_BiasGeluResidual": ([40], lambda: [torch.randn(6, 40), torch.randn(6, 40)]),
    "bundled/L2/06_Conv1x1BNReLU": ([8, 12], _randn(2, 8, 5, 7)),
    "bundled/L2/07_GroupNormSiLU": ([4, 8], _randn(2, 8, 6, 6)),
    "bundled/L2/08_BNReLUResidual": ([8], lambda: [torch.randn(2, 8, 5, 5), torch.randn(2, 8, 5, 5)]),
    "bundled/L3/01_TinyMLP": ([32, 32, 16], _randn(150, 32)),
    "bundled/L3/02_CausalAttentionHead": ([64, 80], lambda: [torch.randn(2, 75, 64) for _ in range(3)]),
    "bundled/L3/03_DWSeparableResidualBlock": ([6], _randn(2, 6, 9, 11)),
    "bundled/L3/04_SEResidualBlock": ([32, 4], lambda: [torch.randn(2, 32, 6, 6) + torch.randn(2, 32, 1, 1),
                                                        torch.randn(2, 32, 6, 6)]),
}


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("emulated")


def check(task: str, params: Any, build_dir: Path) -> None:
    family, (init, inputs) = FAMILIES[task], CASES[task]
    torch.manual_seed(1)
    want, got = run_solution(BundledSource().get(task).source, family.files(params), init, inputs(), build_dir)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=lambda m: f"{task} {params}: {m}")


def test_the_cases_cover_every_family() -> None:
    assert set(CASES) == set(FAMILIES)


@pytest.mark.slow  # 26 g++ builds and runs: about 1-5 minutes on 2 busy cores
@pytest.mark.parametrize("task", sorted(CASES))
def test_the_default_configuration_matches_the_reference(task: str, build_dir: Path) -> None:
    check(task, FAMILIES[task].default, build_dir)


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(CASES))
def test_the_corners_and_a_random_sample_match_the_reference(task: str, build_dir: Path) -> None:
    ordered = list(FAMILIES[task].space.configs())
    for params in [ordered[0], ordered[-1], *random.Random(task).sample(ordered, 3)]:
        check(task, params, build_dir)


def test_the_emulation_passes_a_family_and_fails_it_with_one_index_wrong(build_dir: Path) -> None:
    # the harness itself, on the cheapest family: the kernel as rendered agrees, a B column off by one does not
    family = FAMILIES["bundled/L1/11_BatchedTinyMatmul"]
    files = family.files(family.default)
    source = files["kernels/tiny_bmm.cu"]
    broken = {**files, "kernels/tiny_bmm.cu": source.replace("Bs[p][k * 16 + j]", "Bs[p][k * 16 + (j ^ 1)]")}
    assert broken["kernels/tiny_bmm.cu"] != source
    task, inputs = BundledSource().get(family.task_id).source, CASES[family.task_id][1]()
    want, got = run_solution(task, files, [], inputs, build_dir)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    want, got = run_solution(task, broken, [], inputs, build_dir)
    assert not torch.allclose(got, want, atol=1e-4, rtol=1e-4)
