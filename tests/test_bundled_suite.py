"""The bundled suite: every task parses, every reference solution is complete and compiles, inputs are sized.

CPU tests check the structure (KernelBench format, the extension layout, ModelNew mirroring Model), compile
every kernel with nvcc for sm_90 and every binding with g++ against torch's headers, and build each Model
and its inputs in a subprocess to check shapes, dtypes and sizes. The GPU test runs every reference on the
device, checks its output depends on the input, and prints the eager time table (run it with ``-s``).
Correctness and speed of the solutions on the GPU: ``envs/bundled/check_solutions.py`` and the judge's tests.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cudagym.task import make_task

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "envs" / "bundled"
TEMPLATES = REPO / "cudagym" / "templates" / "extension"
TASK_PATHS = sorted(BUNDLED.glob("tasks/L*/*.py"))
TASK_IDS = [f"{p.parent.name}/{p.stem}" for p in TASK_PATHS]
CU_FILES = sorted(BUNDLED.glob("solutions/L*/*/kernels/*.cu"))
BINDINGS = sorted(BUNDLED.glob("solutions/L*/*/kernels/*_binding.cpp"))
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
NVCC = shutil.which("nvcc") or (str(CUDA_HOME / "bin" / "nvcc") if (CUDA_HOME / "bin" / "nvcc").exists() else None)
GXX = shutil.which("g++")
MAX_INPUT_BYTES = 4 * 2**30


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _solution(tid: str) -> Path:
    return BUNDLED / "solutions" / tid


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _registered_names(text: str) -> list[str]:
    return re.findall(r"REGISTER_BINDING\(\s*(\w+)\s*,", text)


# ---------------------------------------------------------------------------------------------------------
# the suite as a whole


def test_suite_has_24_tasks_over_three_levels():
    levels = [tid.split("/")[0] for tid in TASK_IDS]
    assert len(TASK_IDS) >= 24
    assert min(levels.count("L1") - 10, levels.count("L2") - 8, levels.count("L3") - 4) >= 0


def test_every_task_has_a_solution_and_every_solution_a_task():
    solutions = sorted(f"{p.parent.name}/{p.name}" for p in BUNDLED.glob("solutions/L*/*") if p.is_dir())
    assert solutions == TASK_IDS


def test_data_folders_hold_no_python_packages():
    assert not list((BUNDLED / "tasks").rglob("__init__.py"))
    assert not list((BUNDLED / "solutions").rglob("__init__.py"))


def test_binding_and_launcher_names_are_unique_across_the_suite():
    # unique names let all bindings share one translation unit (below) and one process without clashes
    registered = [n for b in BINDINGS for n in _registered_names(b.read_text())]
    launchers = [n for c in CU_FILES for n in re.findall(r'extern "C"[^(]*?\b(\w+)\s*\(', c.read_text())]
    assert len(registered) == len(set(registered)), registered
    assert len(launchers) == len(set(launchers)), launchers


def test_task_content_hashes_are_distinct():
    hashes = {make_task(p.read_text(), id=t, suite="bundled", level=1, name=p.stem, origin=str(p)).content_hash
              for t, p in zip(TASK_IDS, TASK_PATHS, strict=True)}
    assert len(hashes) == len(TASK_IDS)


# ---------------------------------------------------------------------------------------------------------
# one task at a time


@pytest.mark.parametrize("tid", TASK_IDS)
def test_task_parses_in_kernelbench_format(tid):
    path = BUNDLED / "tasks" / f"{tid}.py"
    level = int(tid[1])
    task = make_task(path.read_text(), id=f"bundled/{tid}", suite="bundled", level=level, name=path.stem,
                     origin=str(path))
    assert task.id == f"bundled/{tid}" and task.level == level
    assert task.ops, "expected the reference to call at least one torch operator"
    tree = ast.parse(path.read_text())
    constants = [n for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, (ast.Constant, ast.BinOp))]
    assert constants, "expected module-level size constants"
    makers = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    assert makers & {"rand", "randn"}, "expected get_inputs to draw inputs with torch.rand/randn"
    assert ast.get_docstring(tree), "expected a module docstring saying what the task computes"


@pytest.mark.parametrize("tid", TASK_IDS)
def test_solution_has_the_extension_layout(tid):
    sol = _solution(tid)
    assert (sol / "model_new.py").is_file()
    cus = sorted((sol / "kernels").glob("*.cu"))
    assert cus, "expected kernels/*.cu"
    registered = []
    for cu in cus:
        binding = cu.with_name(f"{cu.stem}_binding.cpp")
        assert binding.is_file(), f"expected {binding.name} next to {cu.name}"
        src = cu.read_text()
        assert src.startswith("//") and "beat" in src.split("#include")[0], "expected a leading why-it-wins comment"
        assert not re.search(r"#include\s*[<\"](torch|ATen|c10)/", src), "kernels must be pure CUDA"
        assert 'extern "C"' in src and "cudaStream_t" in src
        text = binding.read_text()
        assert '#include "binding_registry.h"' in text and "#include <c10/cuda/CUDAStream.h>" in text
        assert "getCurrentCUDAStream" in text and "is_cuda()" in text and "is_contiguous()" in text
        registered += _registered_names(text)
    assert registered
    tree = ast.parse((sol / "model_new.py").read_text())
    imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "cuda_extension" in imports
    forward = _method(_class(tree, "ModelNew"), "forward")
    calls = [n for n in ast.walk(forward) if isinstance(n, ast.Call)]
    assert calls
    for call in calls:  # forward computes nothing itself: every call is a custom op
        assert isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name), ast.unparse(call)
        assert call.func.value.id == "cuda_extension", ast.unparse(call)
        assert call.func.attr in registered, f"{call.func.attr} is not registered by any binding"


def _holders(init: ast.FunctionDef) -> set[str]:
    """Names of submodules, parameters and buffers __init__ creates (self.x = nn.*(...), register_buffer)."""
    names = set()
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = ast.unparse(node.value.func)
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and \
                        target.value.id == "self" and func.startswith("nn."):
                    names.add(target.attr)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "self.register_buffer":
            names.add(ast.literal_eval(node.args[0]))
    return names


@pytest.mark.parametrize("tid", TASK_IDS)
def test_model_new_mirrors_model_signature_and_parameter_names(tid):
    model = _class(ast.parse((BUNDLED / "tasks" / f"{tid}.py").read_text()), "Model")
    new = _class(ast.parse((_solution(tid) / "model_new.py").read_text()), "ModelNew")
    m_init, n_init = _method(model, "__init__"), _method(new, "__init__")
    assert [a.arg for a in m_init.args.args] == [a.arg for a in n_init.args.args]
    assert [ast.dump(d) for d in m_init.args.defaults] == [ast.dump(d) for d in n_init.args.defaults]
    assert [a.arg for a in _method(model, "forward").args.args] == [a.arg for a in _method(new, "forward").args.args]
    assert _holders(m_init) == _holders(n_init)


# ---------------------------------------------------------------------------------------------------------
# inputs and state dicts, executed on the CPU in subprocesses (only construction, never a full-size forward)

_PROBE = r"""
import json, sys, types
import torch
sys.modules["cuda_extension"] = types.ModuleType("cuda_extension")  # ModelNew imports it; nothing is called
root, ids = sys.argv[1], sys.argv[2:]
out = {}
for tid in ids:
    ns = {"__name__": "task"}
    exec(compile(open(f"{root}/tasks/{tid}.py").read(), tid, "exec"), ns)
    init = ns["get_init_inputs"]()
    torch.manual_seed(0)
    model = ns["Model"](*init)
    new_ns = {"__name__": "model_new"}
    exec(compile(open(f"{root}/solutions/{tid}/model_new.py").read(), tid + "/model_new.py", "exec"), new_ns)
    new = new_ns["ModelNew"](*init)
    ref_sd, new_sd = model.state_dict(), new.state_dict()
    new.load_state_dict(ref_sd, strict=True)
    torch.manual_seed(1)
    inputs = ns["get_inputs"]()
    out[tid] = {
        "state": sorted((k, list(v.shape), str(v.dtype)) for k, v in ref_sd.items()),
        "new_state": sorted((k, list(v.shape), str(v.dtype)) for k, v in new_sd.items()),
        "params_finite": all(bool(torch.isfinite(v).all()) for v in ref_sd.values() if v.is_floating_point()),
        "inputs": [[list(t.shape), str(t.dtype), str(t.device), t.numel() * t.element_size(),
                    bool(torch.isfinite(t).all())] if isinstance(t, torch.Tensor) else repr(t) for t in inputs],
    }
    del model, new, inputs
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probed() -> dict[str, dict]:
    halves = [TASK_IDS[0::2], TASK_IDS[1::2]]  # two processes: 2 CPUs

    def run(ids: list[str]) -> dict[str, dict]:
        proc = subprocess.run([sys.executable, "-c", _PROBE, str(BUNDLED), *ids], capture_output=True, text=True,
                              timeout=900, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(2) as pool:
        parts = list(pool.map(run, halves))
    return {k: v for part in parts for k, v in part.items()}


@pytest.mark.parametrize("tid", TASK_IDS)
def test_inputs_are_cpu_float32_and_sized_for_the_gpu(probed, tid):
    got = probed[tid]
    assert got["inputs"], "expected at least one input"
    total = 0
    for entry in got["inputs"]:
        assert isinstance(entry, list), f"expected tensors, got {entry}"
        shape, dtype, device, nbytes, finite = entry
        assert dtype == "torch.float32" and device == "cpu" and finite
        total += nbytes
    assert 0 < total < MAX_INPUT_BYTES, f"inputs take {total / 2**20:.0f} MB"


@pytest.mark.parametrize("tid", TASK_IDS)
def test_model_new_state_dict_matches_model(probed, tid):
    got = probed[tid]
    assert got["state"] == got["new_state"]
    assert got["params_finite"]


# ---------------------------------------------------------------------------------------------------------
# compilers


@pytest.fixture(scope="session")
def nvcc_results(tmp_path_factory) -> dict[Path, subprocess.CompletedProcess]:
    if NVCC is None:
        pytest.skip("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    out = tmp_path_factory.mktemp("nvcc")

    def compile_one(cu: Path) -> subprocess.CompletedProcess:
        obj = out / f"{cu.parent.parent.name}_{cu.stem}.o"
        return subprocess.run([NVCC, "-c", "-arch=sm_90", "-O3", "-std=c++17", str(cu), "-o", str(obj)],
                              capture_output=True, text=True, timeout=600)

    with ThreadPoolExecutor(2) as pool:  # two CPUs; the whole suite takes about a minute
        return dict(zip(CU_FILES, pool.map(compile_one, CU_FILES), strict=True))


@pytest.mark.parametrize("cu", CU_FILES, ids=[f"{c.parents[1].name}/{c.name}" for c in CU_FILES])
def test_kernel_compiles_for_sm90(nvcc_results, cu):
    result = nvcc_results[cu]
    assert result.returncode == 0, result.stderr[-4000:]


def test_bindings_compile_against_torch_headers(tmp_path):
    """All bindings in one translation unit (each in its own namespace): one parse of torch's headers."""
    if GXX is None:
        pytest.skip("g++ not found")
    if not (CUDA_HOME / "include" / "cuda_runtime_api.h").exists():
        pytest.skip(f"no CUDA headers under {CUDA_HOME}/include")
    from torch.utils.cpp_extension import include_paths

    includes = [*include_paths(), sysconfig.get_paths()["include"], str(TEMPLATES), str(CUDA_HOME / "include")]
    stub = tmp_path / "stub"
    if not any((Path(p) / "c10/cuda/impl/cuda_cmake_macros.h").exists() for p in include_paths()):
        # CPU wheels ship c10/cuda headers without this generated one
        (stub / "c10/cuda/impl").mkdir(parents=True)
        (stub / "c10/cuda/impl/cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
        includes.append(str(stub))
    lines = ['#include "binding_registry.h"', "#include <c10/cuda/CUDAStream.h>", "#include <cstdint>",
             "#include <initializer_list>", "#include <string>", "#include <vector>"]
    for i, binding in enumerate(BINDINGS):
        lines += [f"namespace bundled_binding_{i} {{", f'#include "{binding}"', "}"]
    unit = tmp_path / "all_bindings.cpp"
    unit.write_text("\n".join(lines) + "\n")
    cmd = [GXX, "-fsyntax-only", "-std=c++17", "-w", "-DTORCH_EXTENSION_NAME=cuda_extension",
           "-DTORCH_API_INCLUDE_EXTENSION_H", *[f"-I{p}" for p in includes], str(unit)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-6000:]


# ---------------------------------------------------------------------------------------------------------
# on the GPU: the references themselves


def _eager_ms(fn, inputs, flush, warmup: int = 3, runs: int = 10) -> float:
    import statistics

    import torch

    with torch.no_grad():
        for _ in range(warmup):
            fn(*inputs)
        times = []
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(runs):
            flush.zero_()
            start.record()
            fn(*inputs)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU")
def test_references_depend_on_inputs_and_take_0p1_to_20_ms():
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    flush = torch.empty(2 * (torch.cuda.get_device_properties(0).L2_cache_size or 2**26), dtype=torch.uint8,
                        device="cuda")
    problems, rows = [], []
    for tid, path in zip(TASK_IDS, TASK_PATHS, strict=True):
        ns = {"__name__": "task"}
        exec(compile(path.read_text(), str(path), "exec"), ns)
        torch.manual_seed(0)
        model = ns["Model"](*ns["get_init_inputs"]()).cuda().eval()
        outs = []
        for seed in (1, 2):
            torch.manual_seed(seed)
            inputs = [t.cuda() for t in ns["get_inputs"]()]
            with torch.no_grad():
                outs.append(model(*inputs).float())
        a, b = outs
        differs = not torch.allclose(a, b, atol=1e-3, rtol=1e-3)
        spread = float(a.std()) if a.numel() > 1 else 0.0
        ms = _eager_ms(model, inputs, flush)
        rows.append(f"{tid:<34} {ms:9.3f} ms   out std {spread:.3e}   {'varies' if differs else 'CONSTANT'}")
        if not differs or spread == 0.0 or not bool(torch.isfinite(a).all()):
            problems.append(f"{tid}: output does not vary with the input (or is not finite)")
        if not 0.1 <= ms <= 20.0:
            problems.append(f"{tid}: eager {ms:.3f} ms is outside 0.1-20 ms")
        del model, inputs, outs, a, b
        torch.cuda.empty_cache()
    print("\n" + "\n".join(rows))
    assert not problems, "\n".join(problems)
