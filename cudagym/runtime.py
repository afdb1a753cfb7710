"""Launch ``raw``-format CUDA kernels from model_new.py with torch tensors, on torch's current stream (CuPy).

Worked example (``cudagym/templates/examples/relu/raw/``)::

    # kernels/relu.cu
    extern "C" __global__ void relu(const float* x, float* y, long long n) { ... }

    # model_new.py
    from cudagym import runtime
    kernels = runtime.load("kernels/relu.cu")      # the judge-built cubin of this source
    ...
    y = torch.empty_like(x)
    kernels.relu(grid=((n + 255) // 256,), block=(256,), args=(x, y, n))

Arguments are marshalled by the kernel's C parameter types, read from its ``extern "C" __global__``
signature: a CUDA tensor becomes its ``data_ptr()`` (it must be on the current device and contiguous,
unless the parameter is marked ``/*strided*/``; ``None`` passes a null pointer); a Python ``int``
becomes exactly the parameter's width (an ``int`` parameter gets 4 bytes, range-checked, never 8);
``float``/``double`` take Python numbers; ``bool`` takes a bool. A wrong count or type raises
``TypeError`` naming the kernel and the parameter; a failed launch raises ``RuntimeError`` with the CUDA
error name. ``shared_mem`` above 48 KiB is opted into automatically; ``stream`` defaults to
``torch.cuda.current_stream()``.

Launches go through CuPy: each cubin is a ``cupy.RawModule(path=...)`` (one per device), each kernel its
``RawKernel``, called inside ``cupy.cuda.ExternalStream(<torch's stream handle>)`` with every checked
argument as a NumPy scalar of the parameter's exact C type (CuPy would pass a bare Python ``int`` as 8
bytes). CuPy and torch share the runtime API's primary context of the current device. CuPy
(``cupy-cuda13x``) is a core dependency; it is imported at the first load (or :func:`use_manifest`), never
at import, and importing this module imports neither CuPy nor torch.

Where cubins come from:

- In the judge, the build stage compiled every ``kernels/*.cu`` (NVRTC or nvcc) and the GPU worker
  sets ``CUDAGYM_RAW_MANIFEST`` to the build's ``manifest.json`` (or calls :func:`use_manifest`). The
  runtime looks the source up by its relative path and refuses a file that changed since the build.
- Standalone (no manifest), :func:`load` compiles the source itself (NVRTC if available, else nvcc)
  for the current GPU's arch, cached under the cudagym cache directory, and raises
  :class:`KernelCompileError` with the compiler's messages when it does not compile.
"""

from __future__ import annotations

import inspect
import json
import operator
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cudagym.judge.build.kernel_signature import KernelSignature, Param, parse_kernels

MANIFEST_ENV = "CUDAGYM_RAW_MANIFEST"
_DEFAULT_SMEM_LIMIT = 48 * 1024
_INT_RANGES = {
    "i8": (-(2**7), 2**7 - 1), "u8": (0, 2**8 - 1), "i16": (-(2**15), 2**15 - 1), "u16": (0, 2**16 - 1),
    "i32": (-(2**31), 2**31 - 1), "u32": (0, 2**32 - 1), "i64": (-(2**63), 2**63 - 1), "u64": (0, 2**64 - 1),
}
_SCALARS: dict[str, type[np.generic]] = {  # parameter kind -> the NumPy scalar CuPy passes at that width
    "ptr": np.uint64, "bool": np.bool_, "i8": np.int8, "u8": np.uint8, "i16": np.int16, "u16": np.uint16,
    "i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64, "f32": np.float32, "f64": np.float64,
}
_NULL = np.uint64(0)
_manifest_override: str | None = None


class KernelCompileError(RuntimeError):
    """A kernel source did not compile (standalone use); the message holds the compiler's output."""


def use_manifest(path: str | os.PathLike[str] | None) -> None:
    """Resolve sources through a raw build's ``manifest.json`` (``None``: back to ``CUDAGYM_RAW_MANIFEST``)."""
    global _manifest_override
    _manifest_override = os.fspath(path) if path is not None else None
    if path is not None:
        _cupy()  # CuPy loads now, before the candidate's code runs (and its import time is not the candidate's)


def _cupy() -> Any:
    """The ``cupy`` module, imported on first use.

    Raises:
        RuntimeError: CuPy is not installed (how to install it).
    """
    try:
        import cupy
    except ImportError as exc:
        raise RuntimeError("cudagym.runtime launches raw kernels through CuPy for CUDA 13, which is not "
                           f"installed: pip install cupy-cuda13x (a dependency of cudagym) ({exc})") from None
    return cupy


def load(source: str | os.PathLike[str]) -> KernelModule:
    """The kernels of one ``.cu`` file, ready to launch (see the module docstring).

    Args:
        source: The source's path as the build knows it (``kernels/relu.cu``); relative paths are looked
            up next to the calling file, then in the working directory.

    Raises:
        FileNotFoundError: No manifest entry and no such file.
        RuntimeError: The file changed since the judge built it, the manifest lacks it, or CuPy is missing.
        KernelCompileError: Standalone compile failed.
    """
    rel = Path(os.fspath(source)).as_posix().removeprefix("./")
    caller = inspect.currentframe()
    on_disk = _find_file(rel, caller.f_back.f_code.co_filename if caller and caller.f_back else "")
    manifest = _manifest_override or os.environ.get(MANIFEST_ENV, "")
    if manifest:
        return _from_manifest(Path(manifest), rel, on_disk)
    if on_disk is None:
        raise FileNotFoundError(f"expected the kernel source {rel} next to the caller or in {os.getcwd()}, "
                                "found none")
    return _compile_standalone(on_disk, rel)


def load_image(path: str | os.PathLike[str], declarations: str) -> KernelModule:
    """A module from a compiled image (a cubin, or PTX that the driver compiles on load); the judge's own kernels.

    ``declarations`` holds the kernels' ``extern "C" __global__`` C signatures (bodies may be empty).

    Raises:
        ValueError: ``declarations`` declares no kernel.
        RuntimeError: CuPy is missing.
    """
    path = Path(path)
    signatures = parse_kernels(declarations)
    if not signatures:
        raise ValueError(f"{path.name}: no extern \"C\" __global__ kernel declared in {declarations!r}")
    return KernelModule(path.name, _Cubin(path, signatures))


@dataclass(frozen=True)
class _Cubin:
    path: Path
    signatures: tuple[KernelSignature, ...]


class KernelModule:
    """The kernels of one cubin: ``module.relu(...)`` or ``module["relu"](...)`` (one ``cupy.RawModule`` per device)."""

    def __init__(self, source: str, cubin: _Cubin) -> None:
        self.source = source
        self.cupy = _cupy()
        self._cubin = cubin
        self._raw: dict[int, Any] = {}  # device index -> cupy.RawModule
        self._lock = threading.Lock()
        self._kernels = {sig.name: Kernel(sig, self) for sig in cubin.signatures}

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the extern "C" kernels."""
        return tuple(self._kernels)

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self._kernels[name]
        except KeyError:
            raise AttributeError(f"{self.source} has no extern \"C\" __global__ kernel {name!r}; "
                                 f"it has: {', '.join(self._kernels) or 'none'}") from None

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]

    def __repr__(self) -> str:
        return f"<cudagym.runtime.KernelModule {self.source}: {', '.join(self._kernels)}>"

    def raw_function(self, device: int, name: str) -> Any:
        """The ``cupy.RawKernel`` of ``name`` on ``device`` (the image loads into that device on first use).

        Raises:
            RuntimeError: The driver refused the image or has no such function (the CUDA error named).
        """
        cupy = self.cupy
        with self._lock:
            raw = self._raw.get(device)
            if raw is None:
                raw = self._raw[device] = cupy.RawModule(path=str(self._cubin.path))
        try:
            with cupy.cuda.Device(device):  # setDevice makes the primary context current on a fresh thread
                return raw.get_function(name)
        except cupy.cuda.driver.CUDADriverError as exc:
            raise RuntimeError(f"kernel {name}: loading {self._cubin.path.name} failed: {exc}") from None


class Kernel:
    """One launchable kernel; call it with ``grid``, ``block``, ``args`` (and ``shared_mem``, ``stream``)."""

    def __init__(self, signature: KernelSignature, module: KernelModule) -> None:
        self.signature = signature
        self.name = signature.name
        self._module = module
        self._raw: dict[int, Any] = {}  # device index -> cupy.RawKernel
        self._smem_opt_in: dict[int, int] = {}  # device index -> opted-in dynamic shared memory bytes
        self._streams: dict[tuple[int, int], Any] = {}  # (CUstream, device) -> cupy.cuda.ExternalStream

    def __repr__(self) -> str:
        params = ", ".join(f"{p.ctype} {p.name}" for p in self.signature.params)
        return f"<cudagym.runtime.Kernel {self.name}({params})>"

    def __call__(self, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence[Any] = (),
                 shared_mem: int = 0, stream: Any = None) -> None:
        """Launch asynchronously on ``stream`` (default: torch's current stream)."""
        values, grid3, block3 = self._checked(grid, block, args, shared_mem)
        cupy = self._module.cupy
        device = _current_device(cupy)  # torch's current device: both set it through the runtime API
        fn = self._raw.get(device)
        if fn is None:
            fn = self._raw[device] = self._module.raw_function(device, self.name)
        try:
            if shared_mem > _DEFAULT_SMEM_LIMIT and self._smem_opt_in.get(device, 0) < shared_mem:
                fn.max_dynamic_shared_size_bytes = shared_mem
                self._smem_opt_in[device] = shared_mem
            with self._external_stream(_stream_handle(stream), device):
                fn(grid3, block3, values, shared_mem=shared_mem)
        except cupy.cuda.driver.CUDADriverError as exc:
            raise RuntimeError(f"kernel {self.name}: launch failed: {exc}") from None

    def _checked(self, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence[Any],
                 shared_mem: int) -> tuple[tuple[np.generic, ...], tuple[int, ...], tuple[int, ...]]:
        """The arguments as NumPy scalars of the parameters' exact types, and the launch shape (checked)."""
        params = self.signature.params
        if len(args) != len(params):
            listing = ", ".join(f"{p.ctype} {p.name}" for p in params)
            raise TypeError(f"kernel {self.name}({listing}) takes {len(params)} argument(s), got {len(args)}")
        values = tuple(_marshal(self.name, p, a) for p, a in zip(params, args, strict=True))
        grid3, block3 = _dims(self.name, "grid", grid), _dims(self.name, "block", block)
        if shared_mem < 0:
            raise ValueError(f"kernel {self.name}: expected shared_mem >= 0 bytes, got {shared_mem}")
        return values, grid3, block3

    def _external_stream(self, handle: int, device: int) -> Any:
        found = self._streams.get((handle, device))
        if found is None:
            found = self._streams[(handle, device)] = self._module.cupy.cuda.ExternalStream(handle, device)
        return found


def _current_device(cupy: Any) -> int:
    """The current CUDA device, or a ``RuntimeError`` saying why there is none (no GPU or driver here)."""
    try:
        return int(cupy.cuda.runtime.getDevice())
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise RuntimeError(f"cudagym.runtime needs an NVIDIA GPU and its driver (libcuda.so.1) to launch "
                           f"kernels; CUDA says: {exc}") from None


def _marshal(kernel: str, p: Param, arg: Any) -> np.generic:
    where = f"kernel {kernel}: parameter {p.name} ({p.ctype})"
    if p.kind == "unsupported":
        raise TypeError(f"{where}: this type cannot be passed by cudagym.runtime; use pointers, integers, "
                        "float, double or bool")
    is_tensor = hasattr(arg, "data_ptr") and hasattr(arg, "is_cuda")
    if p.kind == "ptr":
        if arg is None:
            return _NULL
        if not is_tensor:
            raise TypeError(f"{where}: expected a CUDA torch.Tensor (or None), got {type(arg).__name__}")
        return np.uint64(_tensor_pointer(where, p, arg))
    if is_tensor:
        raise TypeError(f"{where}: expected a Python scalar, got a tensor; pass .item() or a pointer parameter")
    if p.kind in ("f32", "f64"):
        if isinstance(arg, (str, bytes)) or not hasattr(arg, "__float__"):
            raise TypeError(f"{where}: expected a float, got {type(arg).__name__}")
        with np.errstate(over="ignore"):  # a double beyond float's range becomes inf, as a C cast makes it
            return _SCALARS[p.kind](float(arg))
    if p.kind == "bool":
        if not isinstance(arg, (bool, int)):
            raise TypeError(f"{where}: expected a bool, got {type(arg).__name__}")
        return np.bool_(bool(arg))
    try:
        value = operator.index(arg)
    except TypeError:
        raise TypeError(f"{where}: expected an int, got {type(arg).__name__}") from None
    low, high = _INT_RANGES[p.kind]
    if not low <= value <= high:
        raise TypeError(f"{where}: {value} does not fit ({low}..{high}); use a wider parameter type")
    return _SCALARS[p.kind](value)


def _tensor_pointer(where: str, p: Param, t: Any) -> int:
    if not t.is_cuda:
        raise TypeError(f"{where}: expected a CUDA tensor, got one on {t.device}")
    import torch  # already imported: the argument is a torch tensor

    current = torch.cuda.current_device()
    if t.device.index != current:
        raise TypeError(f"{where}: tensor is on {t.device} but the current device is cuda:{current}; "
                        "launch under torch.cuda.device(...)")
    if not p.strided and not t.is_contiguous():
        raise TypeError(f"{where}: expected a contiguous tensor (call .contiguous(), or mark the parameter "
                        "/*strided*/ in the kernel signature)")
    return int(t.data_ptr())


def _dims(kernel: str, what: str, value: int | Sequence[int]) -> tuple[int, ...]:
    dims = [value] if isinstance(value, int) else list(value)
    if not 1 <= len(dims) <= 3:
        raise TypeError(f"kernel {kernel}: expected {what} as an int or 1-3 ints, got {value!r}")
    try:
        ints = [operator.index(d) for d in dims]
    except TypeError:
        raise TypeError(f"kernel {kernel}: expected {what} of ints, got {value!r}") from None
    if any(d < 1 for d in ints):
        raise ValueError(f"kernel {kernel}: expected every {what} dimension >= 1, got {value!r}")
    return tuple(ints + [1] * (3 - len(ints)))


def _stream_handle(stream: Any) -> int:
    if stream is None:
        import torch

        return int(torch.cuda.current_stream().cuda_stream)
    if isinstance(stream, int):
        return stream
    return int(stream.cuda_stream)


def _find_file(rel: str, caller: str) -> Path | None:
    path = Path(rel)
    if path.is_absolute():
        return path if path.is_file() else None
    bases = ([Path(caller).resolve().parent] if caller and not caller.startswith("<") else []) + [Path.cwd()]
    for base in bases:
        if (base / path).is_file():
            return base / path
    return None


def _from_manifest(manifest: Path, rel: str, on_disk: Path | None) -> KernelModule:
    from cudagym.judge.build.raw import source_sha256

    data = json.loads(manifest.read_text())
    unit = data["units"].get(rel)
    if unit is None:
        raise RuntimeError(f"{rel} was not built by the judge (it built: {', '.join(sorted(data['units']))}); "
                           "runtime.load takes a kernels/*.cu path")
    if on_disk is not None and source_sha256(on_disk.read_text(encoding="utf-8")) != unit["source_sha256"]:
        raise RuntimeError(f"{rel} changed since the judge built it; rebuild before running")
    sigs = tuple(KernelSignature.from_dict(k) for k in unit["kernels"])
    return KernelModule(rel, _Cubin(manifest.parent / unit["cubin"], sigs))


def _compile_standalone(path: Path, rel: str) -> KernelModule:
    from cudagym.judge.build.cache import BuildCache
    from cudagym.judge.build.diagnostics import PathMap
    from cudagym.judge.build.process import BuildLimits, Deadline
    from cudagym.judge.build.raw import cubin_unit, pick_backend
    from cudagym.judge.build.staging import write_files
    from cudagym.judge.build.toolchain import target_arch
    from cudagym.judge.build.units import compile_unit

    text = path.read_text(encoding="utf-8")
    name = path.name if Path(rel).is_absolute() else rel
    headers = {(Path(name).parent / h.name).as_posix(): h.read_text(encoding="utf-8")
               for h in sorted(path.parent.glob("*.cuh"))}
    cache = BuildCache()
    unit = cubin_unit(name, text, headers, pick_backend(), target_arch())
    with cache.staging() as stage:
        write_files(stage, {name: text, **headers})
        result = compile_unit(unit, cache=cache, cwd=stage, deadline=Deadline(300.0), limits=BuildLimits())
        output = PathMap(prefixes=(str(stage),)).scrub(result.output)
    if result.path is None:
        raise KernelCompileError(f"{rel} did not compile ({unit.tool}):\n{output}")
    return KernelModule(rel, _Cubin(result.path, parse_kernels(text)))
