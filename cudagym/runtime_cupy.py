"""The raw-format runtime on CuPy: the same cubins, API and checks as :mod:`cudagym.runtime`, launched by CuPy.

Selected with ``CUDAGYM_RAW_RUNTIME=cupy`` (the sandbox passes ``CUDAGYM_*`` variables to the GPU worker);
``model_new.py`` does not change: ``runtime.load("kernels/relu.cu")`` returns a :class:`CupyKernelModule`
and ``kernels.relu(grid=, block=, args=)`` launches through ``cupy.RawModule(path=<cubin>)`` and
``RawKernel.__call__`` on torch's current stream (wrapped as a ``cupy.cuda.ExternalStream``). What stays
in :mod:`cudagym.runtime` is shared: the source lookup through the build's manifest, the standalone
compile, and the argument checks (a ``TypeError`` naming the kernel and parameter for a wrong count,
type, device or width). Each checked value goes to CuPy as a NumPy scalar of the parameter's exact C type:
CuPy passes a Python ``int`` as 8 bytes, which an ``int`` parameter must not get.

CuPy shares torch's CUDA context: both use the runtime API's primary context of the current device.
The cubins come from the judge's build stage either way (NVRTC or nvcc, confined); this module loads
and launches, in the sandboxed GPU worker, like the default backend.

Needs ``cupy-cuda13x`` (``pip install 'cudagym[cupy]'``); it is imported when the first module loads, not
when this module is imported.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from cudagym import runtime
from cudagym.judge.build.kernel_signature import KernelSignature

_NUMPY_TYPES: dict[str, type[np.generic]] = {
    "ptr": np.uint64, "bool": np.bool_, "i8": np.int8, "u8": np.uint8, "i16": np.int16, "u16": np.uint16,
    "i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64, "f32": np.float32, "f64": np.float64,
}


def _import_cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise RuntimeError(f"{runtime.RUNTIME_ENV}=cupy needs CuPy for CUDA 13: pip install 'cudagym[cupy]' "
                           f"(cupy-cuda13x); or unset {runtime.RUNTIME_ENV} for the built-in driver backend "
                           f"({exc})") from None
    return cupy


class CupyKernelModule(runtime.KernelModule):
    """The kernels of one cubin, loaded by CuPy (one ``RawModule`` per device)."""

    def __init__(self, source: str, cubin: Any) -> None:
        self.cupy = _import_cupy()
        self._raw: dict[int, Any] = {}  # device index -> cupy.RawModule
        super().__init__(source, cubin)

    def __repr__(self) -> str:
        return f"<cudagym.runtime_cupy.CupyKernelModule {self.source}: {', '.join(self.names)}>"

    def _make_kernel(self, signature: KernelSignature) -> runtime.Kernel:
        return CupyKernel(signature, self)

    def raw_function(self, device: int, name: str) -> Any:
        """The ``cupy.RawKernel`` of ``name`` on ``device`` (the cubin loads there on first use)."""
        with self._lock:
            raw = self._raw.get(device)
            if raw is None:
                raw = self._raw[device] = self.cupy.RawModule(path=str(self._cubin.path))
        with self.cupy.cuda.Device(device):
            return raw.get_function(name)


class CupyKernel(runtime.Kernel):
    """One launchable kernel; the same call as :class:`cudagym.runtime.Kernel`, launched by CuPy."""

    def __init__(self, signature: KernelSignature, module: CupyKernelModule) -> None:
        super().__init__(signature, module)
        self._cupy_module = module
        self._raw: dict[int, Any] = {}  # device index -> cupy.RawKernel
        self._streams: dict[tuple[int, int], Any] = {}  # (handle, device) -> cupy.cuda.ExternalStream
        self._types = [_NUMPY_TYPES.get(p.kind) for p in signature.params]
        self._lock = threading.Lock()

    def __call__(self, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence[Any] = (),
                 shared_mem: int = 0, stream: Any = None) -> None:
        """Launch asynchronously on ``stream`` (default: torch's current stream)."""
        values, grid3, block3 = self._checked(grid, block, args, shared_mem)
        cupy = self._cupy_module.cupy
        device = cupy.cuda.runtime.getDevice()  # torch's current device: both set it through the runtime API
        fn = self._raw.get(device)
        if fn is None:
            fn = self._raw[device] = self._cupy_module.raw_function(device, self.name)
        if shared_mem > runtime._DEFAULT_SMEM_LIMIT and self._smem_opt_in.get(device, 0) < shared_mem:
            fn.max_dynamic_shared_size_bytes = shared_mem
            self._smem_opt_in[device] = shared_mem
        scalars = tuple(t(v.value) for t, v in zip(self._types, values, strict=True))  # type: ignore[misc]
        handle = runtime._stream_handle(stream)
        try:
            with self._external_stream(handle, device):
                fn(tuple(d.value for d in grid3), tuple(d.value for d in block3), scalars, shared_mem=shared_mem)
        except cupy.cuda.driver.CUDADriverError as exc:
            raise RuntimeError(f"kernel {self.name}: launch failed: {exc}") from None

    def _external_stream(self, handle: int, device: int) -> Any:
        key = (handle, device)
        found = self._streams.get(key)
        if found is None:
            with self._lock:
                found = self._streams[key] = self._cupy_module.cupy.cuda.ExternalStream(handle, device)
        return found
