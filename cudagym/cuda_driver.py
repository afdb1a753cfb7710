"""The CUDA driver calls CuPy does not offer, bound by hand through ctypes (``libcuda.so.1``).

Everything else goes through CuPy: the raw-format runtime (:mod:`cudagym.runtime`) loads and launches with
``cupy.RawModule``/``RawKernel`` and the build stage compiles with CuPy's NVRTC binding. CuPy 14's driver
binding (``cupy_backends.cuda.api.driver``) covers contexts, modules, functions, launches, linking and
occupancy, and nothing more, so three groups of calls stay here:

- **Virtual memory management**, for the arenas the trusted judge shares with an untrusted runner
  (:mod:`cudagym.judge.split.arena`): ``cuMemCreate`` with a POSIX file descriptor as shareable handle,
  ``cuMemExportToShareableHandle`` / ``cuMemImportFromShareableHandle``, ``cuMemAddressReserve``, ``cuMemMap``,
  ``cuMemSetAccess`` and their releases. CuPy has only the legacy ``cudaIpc*`` handles, which cannot cross the
  sandboxes' PID namespaces.
- **The persisting-L2 reset** before each timed call (``reset_persisting_l2`` in
  :mod:`cudagym.judge.split.runner`): ``cuCtxResetPersistingL2Cache`` has no CuPy binding. CuPy's runtime has
  ``deviceSetLimit``, but its companion limit call (``cuCtxSetLimit``) stays on this same handle: one API for
  the pair, and a runner of a non-raw format does not import CuPy (about 0.2 s) for it.
- **Stream memory operations**: :func:`stream_write_value32` and :func:`stream_wait_value32`
  (``cuStreamWriteValue32_v2`` / ``cuStreamWaitValue32_v2``), which CuPy does not bind at all.

Importing this module loads nothing; :func:`driver` loads ``libcuda.so.1`` and calls ``cuInit`` once.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

CU_STREAM_WRITE_VALUE_DEFAULT = 0x0
CU_STREAM_WAIT_VALUE_GEQ = 0x0
_UINT32_MAX = 2**32 - 1


class Driver:
    """The CUDA driver API, loaded once per process (:func:`driver`).

    Attributes:
        lib: ``libcuda.so.1`` as a :class:`ctypes.CDLL` (for the VMM calls of the arenas).
    """

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            raise RuntimeError("this needs the CUDA driver (libcuda.so.1), which this machine lacks; run it on a "
                               "host with an NVIDIA GPU") from None
        self.check(self.lib.cuInit(0), "cuInit")
        self._symbols: dict[str, Any] = {}
        self._lock = threading.Lock()

    def check(self, status: int, what: str) -> None:
        """Raise ``RuntimeError`` with the CUDA error name when ``status`` is not CUDA_SUCCESS."""
        if status == 0:
            return
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.lib.cuGetErrorName(status, ctypes.byref(name))
        self.lib.cuGetErrorString(status, ctypes.byref(text))
        label = (name.value or b"CUDA_ERROR_%d" % status).decode()
        raise RuntimeError(f"{what} failed: {label} ({(text.value or b'').decode()})")

    def current_context(self) -> int:
        """The calling thread's CUDA context: torch's primary context of its current device."""
        import torch

        torch.cuda.init()
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:  # a thread torch has not used yet: make the primary context current
            device = torch.cuda.current_device()
            self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
            self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        return int(ctx.value or 0)

    def symbol(self, name: str, argtypes: tuple[Any, ...]) -> Any:
        """The driver entry point ``name`` with its argument types set.

        Raises:
            RuntimeError: This driver does not export ``name`` (it is older than the call).
        """
        with self._lock:
            fn = self._symbols.get(name)
            if fn is None:
                try:
                    fn = getattr(self.lib, name)
                except AttributeError:
                    raise RuntimeError(f"this CUDA driver lacks {name}; it needs a newer NVIDIA driver "
                                       "(CUDA 11.7 or later)") from None
                fn.argtypes, fn.restype = argtypes, ctypes.c_int
                self._symbols[name] = fn
            return fn

    def with_stream_context(self, stream: int) -> None:
        """Make ``stream``'s context current on this thread when the thread has none (a fresh thread)."""
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if ctx.value:
            return
        if not stream:  # the legacy default stream belongs to whatever context is current: torch's
            self.current_context()
            return
        self.check(self.lib.cuStreamGetCtx(ctypes.c_void_p(stream), ctypes.byref(ctx)), "cuStreamGetCtx")
        self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


_instance: Driver | None = None
_instance_lock = threading.Lock()


def driver() -> Driver:
    """The process's :class:`Driver` (``libcuda.so.1`` loaded and initialised on first use).

    Raises:
        RuntimeError: No CUDA driver on this machine, or ``cuInit`` failed (named).
    """
    global _instance
    with _instance_lock:
        if _instance is None:
            _instance = Driver()
        return _instance


_STREAM_VALUE_ARGS = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint)


def stream_write_value32(stream: int, address: int, value: int) -> None:
    """Queue on ``stream`` a write of the 32-bit ``value`` to device ``address`` (``cuStreamWriteValue32_v2``).

    Args:
        stream: A ``CUstream`` handle as an int (torch's ``stream.cuda_stream``; 0 is the legacy default stream).
        address: A device address of a 4-byte-aligned 32-bit word (``tensor.data_ptr()``).
        value: The unsigned 32-bit value to write.

    Raises:
        ValueError: ``value`` does not fit 32 bits unsigned, or ``address`` is null.
        RuntimeError: The driver lacks the call, or it failed (the CUDA error named).
    """
    _stream_value_op("cuStreamWriteValue32_v2", stream, address, value, CU_STREAM_WRITE_VALUE_DEFAULT)


def stream_wait_value32(stream: int, address: int, value: int) -> None:
    """Make ``stream`` wait until the 32-bit word at ``address`` is >= ``value`` (``cuStreamWaitValue32_v2``).

    The comparison is ``CU_STREAM_WAIT_VALUE_GEQ``: unsigned, ``(int32_t)(*address - value) >= 0``.

    Args:
        stream: A ``CUstream`` handle as an int (torch's ``stream.cuda_stream``; 0 is the legacy default stream).
        address: A device address of a 4-byte-aligned 32-bit word (``tensor.data_ptr()``).
        value: The unsigned 32-bit value to wait for.

    Raises:
        ValueError: ``value`` does not fit 32 bits unsigned, or ``address`` is null.
        RuntimeError: The driver lacks the call, or it failed (the CUDA error named).
    """
    _stream_value_op("cuStreamWaitValue32_v2", stream, address, value, CU_STREAM_WAIT_VALUE_GEQ)


def _stream_value_op(name: str, stream: int, address: int, value: int, flags: int) -> None:
    if not 0 <= value <= _UINT32_MAX:
        raise ValueError(f"{name}: expected a 32-bit unsigned value (0..{_UINT32_MAX}), got {value}")
    if not address:
        raise ValueError(f"{name}: expected a device address, got {address!r}")
    drv = driver()
    fn = drv.symbol(name, _STREAM_VALUE_ARGS)
    drv.with_stream_context(stream)
    drv.check(fn(ctypes.c_void_p(stream or None), ctypes.c_uint64(address), ctypes.c_uint32(value),
                 ctypes.c_uint(flags)), name)
