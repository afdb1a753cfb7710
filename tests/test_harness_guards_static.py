"""Guard registry and the static (source) checks: each exploit spelled out is named; clean code passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudagym.errors import ConfigError
from cudagym.judge.guards import guard_names, registry, select_guards
from cudagym.judge.guards.base import Guard, register
from cudagym.judge.guards.kernels import (
    calls_libraries,
    classify,
    judge_kernel_mix,
    judge_profile_fit,
    kernel_identifiers,
)
from cudagym.judge.guards.source_scan import cpp_calls, strip_cpp
from cudagym.judge.harness.profiling import OTHER, DeviceEvent, KernelProfile, breakdown, condense
from cudagym.judge.protocol import PROTOCOLS
from cudagym.solution import Solution

ROOT = Path(__file__).resolve().parents[1]
STATIC = ["torch_fallback", "reference_reuse", "timer_patch", "host_threads", "lazy_output"]

CLEAN = '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, n))

    def forward(self, x):
        out = torch.empty_like(x)
        stream = torch.cuda.current_stream()
        return cuda_extension.relu(x.contiguous().view(-1), out, self.weight)
'''

CLEAN_BINDING = '''#include "binding_registry.h"
#include <c10/cuda/CUDAStream.h>
extern "C" int launch_relu(const float* x, float* y, long long n, cudaStream_t s);
namespace {
// torch::relu(x) would be a fallback, but this is a comment: "at::matmul(a, b)"
torch::Tensor relu(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2, "expected 2-D, got ", x.sizes());
  auto y = torch::empty_like(x);
  launch_relu(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), at::cuda::getCurrentCUDAStream().stream());
  return y;
}
}
REGISTER_BINDING(relu, relu);
'''


class FakeCtx:
    """What check_sources needs: the sources and a place to flag."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources
        self.violations: list[tuple[str, str]] = []

    def flag(self, guard: str, message: str) -> None:
        self.violations.append((guard, message))


def static_violations(sources: dict[str, str]) -> dict[str, str]:
    ctx = FakeCtx(sources)
    for guard in select_guards(STATIC):
        guard.check_sources(ctx)
    return dict(ctx.violations)


def test_registry_has_every_guard_of_the_design_and_the_protocol_presets():
    expected = {"torch_fallback", "reference_reuse", "timer_patch", "side_stream", "host_threads", "lazy_output",
                "result_cache", "stale_memory", "input_mutation", "precision", "hard_coding", "decoy_kernels",
                "tampering", "file_access", "network", "degenerate_output", "suspicious_speedup"}
    assert set(guard_names()) == expected
    for protocol in PROTOCOLS.values():
        if "all" not in protocol.guards:
            assert set(protocol.guards) <= expected, protocol.id
    for cls in registry().values():
        assert cls.summary and cls.__doc__


def test_select_all_orders_by_hook_order_and_unknown_names_are_rejected():
    guards = select_guards(["all"])
    assert [g.order for g in guards] == sorted(g.order for g in guards)
    assert guards[0].name == "side_stream"  # its after_forward must run before anything syncs
    assert guards[-1].order >= 90
    assert [g.name for g in select_guards(["precision", "precision"])] == ["precision"]
    assert select_guards([]) == []
    with pytest.raises(ConfigError, match="unknown guard.*nope"):
        select_guards(["nope"])


def test_guard_names_are_unique_on_register():
    class Duplicate(Guard):
        name = "precision"

    with pytest.raises(ConfigError, match="taken"):
        register(Duplicate)


def test_clean_solution_passes_every_static_check():
    assert static_violations({"model_new.py": CLEAN, "kernels/relu_binding.cpp": CLEAN_BINDING}) == {}


@pytest.mark.parametrize("solution_dir", sorted((ROOT / "envs/bundled/solutions").glob("L*/*")), ids=lambda p: p.name)
def test_bundled_reference_solutions_pass_every_static_check(solution_dir):
    solution = Solution.from_dir(solution_dir, "extension")
    assert static_violations(dict(solution.files)) == {}


@pytest.mark.parametrize(
    ("code", "guard", "words"),
    [
        ("import torch.nn.functional as F\ndef forward(x):\n    return F.relu(x)\n", "torch_fallback",
         "torch.nn.functional.relu"),
        ("import torch\ndef forward(a, b):\n    return torch.matmul(a, b)\n", "torch_fallback", "torch.matmul"),
        ("from torch import sigmoid\ndef helper(x):\n    return sigmoid(x)\n", "torch_fallback", "torch.sigmoid"),
        ("def forward(a, b):\n    return a @ b\n", "torch_fallback", "@ operator"),
        ("import torch\nclass M:\n    def forward(self, x):\n        return torch.compile(g)(x)\n", "torch_fallback",
         "torch.compile"),
        ("import torch\nf = lambda x: torch.ops.aten.relu(x)\n", "torch_fallback", "torch.ops.aten.relu"),
        ("from model import Model\n", "reference_reuse", "imports the reference module"),
        ("import model\n", "reference_reuse", "imports the reference module"),
        ("class ModelNew(Model):\n    pass\n", "reference_reuse", "`Model`"),
        ("try:\n    import cuda_extension\nexcept ImportError:\n    pass\n", "reference_reuse", "try/except"),
        ("import gc\nobjs = gc.get_objects()\n", "reference_reuse", "imports gc"),
        ("import sys\nm = sys.modules\n", "reference_reuse", "sys.modules"),
        ("exec('x = 1')\n", "reference_reuse", "calls exec"),
        ("import torch\ntorch.cuda.synchronize = lambda: None\n", "timer_patch", "torch.cuda.synchronize"),
        ("import time as t\nt.perf_counter = lambda: 0.0\n", "timer_patch", "time.perf_counter"),
        ("import torch\nsetattr(torch.cuda.Event, 'elapsed_time', f)\n", "timer_patch", "setattr on torch.cuda.Event"),
        ("from unittest import mock\n", "timer_patch", "unittest"),
        ("import threading\n", "host_threads", "imports threading"),
        ("from concurrent.futures import ThreadPoolExecutor\n", "host_threads", "concurrent.futures"),
        ("import torch\nclass Lazy(torch.Tensor):\n    pass\n", "lazy_output", "subclasses torch.Tensor"),
        ("y = torch.Tensor._make_subclass(C, x)\n", "lazy_output", "_make_subclass"),
    ],
)
def test_each_static_exploit_is_named(code, guard, words):
    found = static_violations({"model_new.py": code})
    assert guard in found, found
    assert words in found[guard]


@pytest.mark.parametrize(
    ("code", "guard", "words"),
    [
        ("auto y = at::relu(x);", "torch_fallback", "at::relu"),
        ("return torch::matmul(a, b);", "torch_fallback", "torch::matmul"),
        ("auto y = torch::nn::functional::gelu(x);", "torch_fallback", "torch::nn::functional::gelu"),
        ("auto y = x.sum(1);", "torch_fallback", ".sum()"),
        ("std::thread t([]{}); t.detach();", "host_threads", "std::thread"),
        ("pthread_create(&t, nullptr, f, nullptr);", "host_threads", "pthread_create"),
    ],
)
def test_each_cpp_exploit_is_named(code, guard, words):
    found = static_violations({"model_new.py": CLEAN, "kernels/op_binding.cpp": f"void f() {{ {code} }}\n"})
    assert guard in found, found
    assert words in found[guard]


def test_init_and_module_code_may_build_buffers_with_torch():
    code = ("import torch\nMASK = torch.tril(torch.ones(4, 4))\nclass ModelNew(torch.nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n"
            "        self.register_buffer('mask', torch.tril(torch.ones(8, 8)))\n"
            "    def forward(self, x):\n        return torch.tril(x)\n")
    found = static_violations({"model_new.py": code})
    assert found["torch_fallback"] == "torch computes in the solution: model_new.py:8 calls torch.tril"


def test_cpp_in_load_inline_strings_is_scanned_with_its_line():
    code = ('import torch\nsrc = """\n#include <torch/extension.h>\n'
            'torch::Tensor f(torch::Tensor x) { return at::gelu(x); }\n"""\n')
    found = static_violations({"model_new.py": code})
    assert "model_new.py:4 calls at::gelu" in found["torch_fallback"]


def test_cpp_scan_ignores_comments_and_strings_and_keeps_lines():
    text = '// at::relu(x)\n/* torch::mm(a, b)\n */ const char* s = "at::gelu(x)";\nat::empty_like(x);\n'
    stripped = strip_cpp(text)
    assert stripped.count("\n") == text.count("\n")
    calls = [c for c in cpp_calls(text) if c.namespace]
    assert [(c.name, c.line) for c in calls] == [("empty_like", 4)]


def test_kernel_classes_and_the_decoy_rule():
    assert classify("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()") == "moves"
    assert classify("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>()") == "torch"
    assert classify("triton_poi_fused_mul_sigmoid_0") == "torch"
    assert classify("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32") == "library"
    assert classify("void swish_kernel(float const*, float*, long long)") == "own"
    own = DeviceEvent("void swish_kernel(float const*, float*, long long)", 90.0, 7, False)
    aten = DeviceEvent("void at::native::vectorized_elementwise_kernel<4, at::native::sigmoid>()", 80.0, 7, False)
    copy = DeviceEvent("Memcpy DtoD (Device -> Device)", 500.0, 7, True)
    assert judge_kernel_mix([own, copy], built_kernels=1) == ""
    assert "only" in judge_kernel_mix([DeviceEvent(own.name, 10.0, 7, False), aten], built_kernels=1)
    assert "none of the 1 compiled" in judge_kernel_mix([aten], built_kernels=1)
    assert judge_kernel_mix([copy], built_kernels=1) == ""


def test_library_kernels_are_the_candidates_only_where_its_sources_call_a_library():
    # a forward that stepped out of the dispatcher audit and ran x.matmul(...): cuBLAS's GEMM, torch's epilogue
    gemm = DeviceEvent("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_cublas", 80.0, 7, False)
    relu = DeviceEvent("void at::native::vectorized_elementwise_kernel<4, at::native::clamp_min>()", 10.0, 7, False)
    noop = DeviceEvent("cudagym_noop", 1.0, 7, False)  # the decoy kernel the build compiled
    assert judge_kernel_mix([gemm, relu, noop], built_kernels=1) == ""  # its sources' word taken: allowed
    message = judge_kernel_mix([gemm, relu, noop], built_kernels=1, libraries_called=False)
    assert "only 1%" in message and "your sources call neither" in message and "xmma_gemm" in message
    # a kernel the build compiled is the candidate's even when its name looks like a library's
    own_gemm = DeviceEvent("void tiled_gemm_kernel<64>(float const*, float const*, float*, int)", 80.0, 7, False)
    assert "none of the 1 compiled" in judge_kernel_mix([own_gemm, relu], built_kernels=1, libraries_called=False)
    assert judge_kernel_mix([own_gemm, relu], built_kernels=1, libraries_called=False,
                            own_names=kernel_identifiers(["_Z17tiled_gemm_kernelILi64EEvPKfS1_Pfi"])) == ""


def test_what_names_a_library_call_and_a_compiled_kernel():
    assert calls_libraries(['#include <cublas_v2.h>\ncublasSgemm(handle, ...);'])
    assert calls_libraries(["import cupy as cp\ny = cp.matmul(a, b)"])
    assert calls_libraries(["#include <cute/tensor.hpp>"]) and calls_libraries(["cudnnConvolutionForward("])
    assert not calls_libraries(["y = x.matmul(w.t()).add(b).clamp_min(0)", "__global__ void k(float* x) {}"])
    assert kernel_identifiers(["_Z12swish_kernelPKfPfx", "_ZN2ns11tile_matmulILi4EEEvPKf", "cudagym_noop"]) == {
        "swish_kernel", "tile_matmul", "cudagym_noop"}
    # as the builds list them (demangled, here the bundled L2/01 solution's), and as the profiler names them
    built = ["(anonymous namespace)::gemm_gelu_kernel(float const*, float const*, float*, int, int)",
             "void ns::conv_tile<4, std::pair<int, int>>(float*)"]
    assert kernel_identifiers(built) == {"gemm_gelu_kernel", "conv_tile"}
    ran = DeviceEvent("void (anonymous namespace)::gemm_gelu_kernel(float const*, float const*, float*, int, int)",
                      90.0, 7, False)
    assert classify(ran.name) == "library"  # by its name alone
    assert judge_kernel_mix([ran], built_kernels=1, libraries_called=False,
                            own_names=kernel_identifiers(built)) == ""


def test_breakdown_is_per_forward_and_sums_the_tail():
    events = [DeviceEvent(f"k{i}", float(i + 1), 0, False) for i in range(25) for _ in range(2)]
    rows = breakdown(events, repeats=2, limit=20)
    assert len(rows) == 21 and rows[0].name == "k24" and rows[0].time_us == 25.0 and rows[0].calls == 1
    assert rows[-1].name == "(other kernels)"
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    assert breakdown([], repeats=3) == ()


def test_only_the_raw_runtime_of_the_judge_may_be_imported():
    import ast

    from cudagym.judge.guards.tampering import judge_imports

    code = "from cudagym import runtime\nimport cudagym.runtime\nfrom cudagym.judge import harness\nimport cudagym\n"
    assert judge_imports(ast.parse(code)) == [("cudagym.judge.harness", 3), ("cudagym", 4)]


@pytest.mark.parametrize("folder", sorted((ROOT / "tests/formats").iterdir()), ids=lambda p: p.name)
def test_the_format_test_candidates_pass_every_static_check(folder):
    fmt = folder.name.rsplit("_", 1)[1]  # swish_raw, swish_inline: the honest candidates of test_formats_gpu
    assert static_violations(dict(Solution.from_dir(folder, fmt).files)) == {}


@pytest.mark.parametrize("fmt", ["extension", "inline", "raw"])
def test_the_prompt_examples_of_every_format_pass_every_static_check(fmt):
    import ast

    from cudagym.judge.guards.tampering import judge_imports
    from cudagym.solution import get_format

    files = get_format(fmt).example_files()
    assert static_violations(files) == {}
    assert judge_imports(ast.parse(files["model_new.py"])) == []


def test_importing_the_harness_and_guard_packages_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys, cudagym.judge.harness, cudagym.judge.guards;"
            "print(cudagym.judge.harness.CONTEXT_POISONED_MARKER != '', 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]


def _forwards(*kernels: tuple[str, float, float, int], repeats: int = 3, period_us: float = 10_000.0) -> KernelProfile:
    """A profile of ``repeats`` forwards, each running ``kernels`` (name, start in the forward, duration, stream)."""
    events = [DeviceEvent(name, us, stream, False, start_us=r * period_us + start)
              for r in range(repeats) for name, start, us, stream in kernels]
    return KernelProfile.of(events, repeats)


def test_profiled_kernels_that_outlast_the_timed_calls_are_named() -> None:
    note, problem = judge_profile_fit(_forwards(("my_kernel", 0.0, 90.0, 7)), 100.0)  # honest: fits the timed call
    assert problem == "" and "0.900x its timed median" in note
    note, problem = judge_profile_fit(_forwards(("my_kernel", 0.0, 150.0, 7)), 100.0)  # at the limit: allowed
    assert problem == ""
    note, problem = judge_profile_fit(_forwards(("my_kernel", 0.0, 400.0, 7)), 100.0)  # slow while profiled
    assert "busy 400.0 us but its timed median is 100.0 us" in problem and "4.000x" in note
    # a decoy that spreads its profiled work over two streams is compared all the same (busy time, not the sum)
    note, problem = judge_profile_fit(_forwards(("a", 0.0, 400.0, 7), ("b", 50.0, 400.0, 9)), 100.0)
    assert "busy 450.0 us" in problem and "2 stream(s)" in note
    assert judge_profile_fit(KernelProfile((), 0.0, 3), 0.0) == ("no profile or timing to set side by side", "")


def test_overlapping_kernels_count_once_in_the_fit() -> None:
    # KernelBench L1/65 on the H200 (cuDNN's FFT convolution): its kernels' durations summed to 1.53x the timed
    # median, in the eager baseline's profile too, so they overlap (programmatic dependent launch, most likely);
    # here each kernel starts before the one before it ends, and the GPU was busy 1x the timed median
    fft = _forwards(("fft_r2c", 0.0, 4000.0, 7), ("gemm_cf32", 1500.0, 5000.0, 7), ("fft_c2r", 5000.0, 4000.0, 7))
    assert fft.busy_per_forward_us == 9000.0 and fft.summed_per_forward_us == 13000.0
    note, problem = judge_profile_fit(fft, 9000.0)
    assert problem == "" and "1.000x its timed median" in note and "summed 13000.0 us" in note


def test_a_long_profile_is_condensed_without_losing_time() -> None:
    # KernelBench L1/57 runs 3,675 kernels a forward: the runner's reply once kept its first 5,000 events of
    # 11,000, and the fit saw 0.63x of the work; rows per name and stream keep every event's time and count
    events = [DeviceEvent(f"k{i % 3}", 2.0, 7, False, start_us=10.0 * i) for i in range(11_025)]
    profile = KernelProfile.of(events, 3)
    assert len(profile.events) == 3 and sum(e.calls for e in profile.events) == 11_025
    assert profile.summed_per_forward_us == profile.busy_per_forward_us == 2.0 * 11_025 / 3
    many = [DeviceEvent(f"kernel_{i}", float(i + 1), 7, False, start_us=1000.0 * i) for i in range(50)]
    rows = condense(many, limit=10)
    assert len(rows) == 10 and rows[0].name == "kernel_49" and rows[-1].name == OTHER
    assert sum(e.duration_us for e in rows) == sum(e.duration_us for e in many) and rows[-1].calls == 41
    # torch's work summed into the other row is never the candidate's
    assert "none of the 1 compiled kernel(s) ran" in judge_kernel_mix(
        [DeviceEvent(OTHER, 100.0, 7, False, calls=41)], built_kernels=1)


class _Profiled:
    """What ``decoy_kernels`` reads of an evaluation after timing: a timed median and the profiles taken in turn."""

    def __init__(self, profiles: list[KernelProfile], median_us: float) -> None:
        from types import SimpleNamespace

        from cudagym.judge.records import BuildResult, BuildStatus, KernelResources, TimingStats

        self.on_gpu = True
        self.protocol = SimpleNamespace(timing="cuda_events")
        self.timed = {"candidate": TimingStats(median_us=median_us, runs=30)}
        build = BuildResult(BuildStatus.OK, "extension", kernels=(KernelResources("swish_kernel"),))
        self.job = SimpleNamespace(build=build, solution=SimpleNamespace(files={"k.cu": "__global__ swish_kernel"}))
        self.profiles, self.taken = list(profiles), 0
        self.notes: list[str] = []
        self.flags: list[tuple[str, str]] = []

    def kernel_profile(self) -> KernelProfile:
        return self.profiles[min(self.taken, len(self.profiles) - 1)]

    def kernel_events(self) -> list[DeviceEvent]:
        return list(self.kernel_profile().events)

    def forget_kernel_events(self) -> None:
        self.taken += 1

    def note(self, text: str) -> None:
        self.notes.append(text)

    def flag(self, guard: str, message: str) -> None:
        self.flags.append((guard, message))


def test_the_fits_retake_is_held_to_the_kernel_mix_too() -> None:
    from cudagym.judge.guards.kernels import DecoyKernels

    own_slow = _forwards(("swish_kernel", 0.0, 400.0, 7))  # its own kernel, 4x the timed median
    torch_fast = _forwards(("void at::native::vectorized_elementwise_kernel<sigmoid>", 0.0, 90.0, 7))
    own_fast = _forwards(("swish_kernel", 0.0, 95.0, 7))
    transient = _Profiled([own_slow, own_fast], 100.0)  # one slow profile, then its honest self: passes
    DecoyKernels().after_timing(transient)
    assert transient.flags == [] and transient.taken == 1 and "a retake" in transient.notes[-1]
    counted = _Profiled([own_slow, torch_fast], 100.0)  # its own kernels to the first profile, torch's to the retake
    DecoyKernels().after_timing(counted)
    assert [g for g, _ in counted.flags] == ["decoy_kernels"] and "in the profile's retake" in counted.flags[0][1]
    still_slow = _Profiled([own_slow, own_slow], 100.0)  # slow in both: the fit names it
    DecoyKernels().after_timing(still_slow)
    assert [g for g, _ in still_slow.flags] == ["decoy_kernels"] and "timed median" in still_slow.flags[0][1]
