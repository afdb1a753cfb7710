"""Memory the trusted judge process shares with one untrusted runner: a file descriptor both map.

The trusted side allocates an arena, writes a job's inputs into it, passes its descriptor to the runner
(``SCM_RIGHTS`` over their socket), and reads the candidate's outputs back from a second arena. Nothing
else of the trusted process's memory is reachable from the runner: an arena is its own allocation, never a
block of an allocator that other tensors share.

Two kinds, one interface:

- :class:`DeviceArena` (the GPU): CUDA virtual memory management through the driver API (``cuMemCreate``
  with a POSIX file descriptor as its shareable handle, exported with ``cuMemExportToShareableHandle``,
  imported with ``cuMemImportFromShareableHandle``, then reserved, mapped and made accessible). A legacy
  ``cudaIpcGetMemHandle`` handle would not do: it cannot cross PID namespaces, and the two processes live in
  different sandboxes; it would also share the whole caching-allocator segment around a tensor.
- :class:`HostArena` (the CPU test path): a ``memfd_create`` file mapped by both.

Either is seen from torch as one flat ``uint8`` tensor (:attr:`Arena.tensor`); :func:`place` lays a tree of
tensors out in it and :func:`views` rebuilds the tensors from the layout on the other side.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from dataclasses import dataclass
from typing import Any

import torch

ALIGN = 256  # bytes: every tensor in an arena starts at a multiple of this

_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3


class ArenaError(RuntimeError):
    """An arena could not be created, exported or mapped."""


@dataclass(frozen=True)
class Slot:
    """Where one tensor lies in an arena (plain data: it travels as JSON)."""

    offset: int
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without the ``torch.`` prefix

    def to_json(self) -> dict[str, Any]:
        """This slot as JSON data."""
        return {"offset": self.offset, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: Any) -> Slot:
        """A slot from :meth:`to_json` data; ``ValueError`` on anything malformed."""
        try:
            shape = tuple(int(d) for d in data["shape"])
            offset, dtype = int(data["offset"]), str(data["dtype"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed slot {str(data)[:200]}") from exc
        if offset < 0 or any(d < 0 for d in shape) or not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(f"malformed slot {str(data)[:200]}")
        return cls(offset, shape, dtype)

    @property
    def nbytes(self) -> int:
        """Bytes the tensor takes."""
        n = 1
        for d in self.shape:
            n *= d
        return n * _dtype(self.dtype).itemsize


def _dtype(name: str) -> torch.dtype:
    found = getattr(torch, name, None)
    if not isinstance(found, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return found


def layout(tensors: list[torch.Tensor]) -> tuple[list[Slot], int]:
    """Slots for ``tensors`` packed one after another, and the bytes they need in all."""
    slots, offset = [], 0
    for t in tensors:
        slot = Slot(offset, tuple(t.shape), str(t.dtype).removeprefix("torch."))
        slots.append(slot)
        offset += -(-slot.nbytes // ALIGN) * ALIGN
    return slots, offset


def views(arena: torch.Tensor, slots: list[Slot]) -> list[torch.Tensor]:
    """The tensors ``slots`` describe, as views of ``arena`` (a flat ``uint8`` tensor).

    Raises:
        ValueError: A slot lies outside the arena or is misaligned for its dtype.
    """
    found = []
    for slot in slots:
        dtype = _dtype(slot.dtype)
        end = slot.offset + slot.nbytes
        if end > arena.numel() or slot.offset % max(1, dtype.itemsize):
            raise ValueError(f"slot at {slot.offset} of {slot.nbytes} bytes does not fit an arena of "
                             f"{arena.numel()} bytes")
        found.append(arena[slot.offset:end].view(dtype).view(slot.shape))
    return found


def place(arena: torch.Tensor, slots: list[Slot], tensors: list[torch.Tensor]) -> None:
    """Copy ``tensors`` into their ``slots`` of ``arena`` (asynchronously on the GPU)."""
    for view, tensor in zip(views(arena, slots), tensors, strict=True):
        view.copy_(tensor)


class Arena:
    """A shared allocation seen as a flat ``uint8`` tensor; close it to unmap."""

    size: int
    tensor: torch.Tensor

    def descriptor(self) -> int:
        """A file descriptor the other process can map (owned by the caller of this method: close it)."""
        raise NotImplementedError

    def close(self) -> None:
        """Unmap and free (the other process's mapping stays valid until it unmaps too)."""
        raise NotImplementedError

    def __enter__(self) -> Arena:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HostArena(Arena):
    """An arena in host memory: a ``memfd`` both processes map."""

    def __init__(self, size: int, fd: int | None = None) -> None:
        self.size = max(1, size)
        self._fd = fd if fd is not None else os.memfd_create("cudagym-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        if fd is None:
            os.ftruncate(self._fd, self.size)
            # its size is fixed for good: a runner that shrank it would make this process's next read a SIGBUS
            fcntl.fcntl(self._fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        elif os.fstat(fd).st_size < self.size:
            os.close(fd)
            raise ArenaError(f"the shared file holds fewer than the {self.size} bytes announced")
        self._map = mmap.mmap(self._fd, self.size)
        self.tensor = torch.frombuffer(self._map, dtype=torch.uint8, count=self.size)

    def descriptor(self) -> int:
        """A duplicate of the memfd."""
        return os.dup(self._fd)

    def close(self) -> None:
        """Drop the tensor, unmap, close the file."""
        self.tensor = torch.empty(0, dtype=torch.uint8)
        try:
            self._map.close()
        except BufferError:  # a view is still alive somewhere: the mapping goes with the last one
            pass
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class _CudaArrayView:
    """Just enough of ``__cuda_array_interface__`` for ``torch.as_tensor`` to wrap a mapped range."""

    def __init__(self, ptr: int, size: int) -> None:
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None}


class DeviceArena(Arena):
    """An arena in GPU memory of ``device`` (CUDA VMM, shareable as a POSIX file descriptor).

    Args:
        size: Bytes wanted (rounded up to the allocation granularity).
        device: The CUDA device (its index as this process numbers it).
        fd: Import this exported allocation instead of creating one (the runner's side); the arena takes
            ownership of the descriptor.
    """

    def __init__(self, size: int, device: torch.device, fd: int | None = None) -> None:
        from cudagym.cuda_driver import driver as _driver

        torch.cuda.init()
        index = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.synchronize(index)  # makes torch's primary context current on this thread
        self._drv = _driver()
        self._drv.current_context()
        lib = self._drv.lib
        prop = _AllocProp(type=_CU_MEM_ALLOCATION_TYPE_PINNED,
                          requestedHandleTypes=_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                          location=_Location(_CU_MEM_LOCATION_TYPE_DEVICE, index))
        granularity = ctypes.c_size_t()
        self._check(lib.cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop), 0),
                    "cuMemGetAllocationGranularity")
        step = max(1, granularity.value)
        self.size = -(-max(1, size) // step) * step
        self._handle = ctypes.c_ulonglong()
        self._ptr = ctypes.c_ulonglong()
        self._mapped = False
        if fd is None:
            self._check(lib.cuMemCreate(ctypes.byref(self._handle), ctypes.c_size_t(self.size), ctypes.byref(prop),
                                        ctypes.c_ulonglong(0)), "cuMemCreate")
        else:
            try:
                self._check(lib.cuMemImportFromShareableHandle(
                    ctypes.byref(self._handle), ctypes.c_void_p(fd), _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                    "cuMemImportFromShareableHandle")
            finally:
                os.close(fd)
        try:
            self._check(lib.cuMemAddressReserve(ctypes.byref(self._ptr), ctypes.c_size_t(self.size),
                                                ctypes.c_size_t(0), ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)),
                        "cuMemAddressReserve")
            self._check(lib.cuMemMap(self._ptr, ctypes.c_size_t(self.size), ctypes.c_size_t(0), self._handle,
                                     ctypes.c_ulonglong(0)), "cuMemMap")
            self._mapped = True
            access = _AccessDesc(_Location(_CU_MEM_LOCATION_TYPE_DEVICE, index), _CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            self._check(lib.cuMemSetAccess(self._ptr, ctypes.c_size_t(self.size), ctypes.byref(access),
                                           ctypes.c_size_t(1)), "cuMemSetAccess")
        except BaseException:
            self.close()
            raise
        self.tensor = torch.as_tensor(_CudaArrayView(self._ptr.value, self.size), device=torch.device("cuda", index))

    def _check(self, status: int, what: str) -> None:
        try:
            self._drv.check(status, what)
        except RuntimeError as exc:
            raise ArenaError(str(exc)) from None

    def descriptor(self) -> int:
        """Export the allocation as a new POSIX file descriptor."""
        fd = ctypes.c_int(-1)
        self._check(self._drv.lib.cuMemExportToShareableHandle(ctypes.byref(fd), self._handle,
                                                               _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                               ctypes.c_ulonglong(0)),
                    "cuMemExportToShareableHandle")
        return fd.value

    def close(self) -> None:
        """Unmap, free the address range and release the allocation (after the device is idle)."""
        lib = self._drv.lib
        self.tensor = torch.empty(0, dtype=torch.uint8)
        if self._ptr.value:
            torch.cuda.synchronize()
            if self._mapped:
                lib.cuMemUnmap(self._ptr, ctypes.c_size_t(self.size))
                self._mapped = False
            lib.cuMemAddressFree(self._ptr, ctypes.c_size_t(self.size))
            self._ptr = ctypes.c_ulonglong()
        if self._handle.value:
            lib.cuMemRelease(self._handle)
            self._handle = ctypes.c_ulonglong()


class ArenaView(Arena):
    """The first ``size`` bytes of another arena, used as an arena of its own (its parent owns the memory).

    The shared heap's reserve serves as the output arena this way (:mod:`cudagym.judge.split.heap`).
    """

    def __init__(self, parent: Arena, size: int) -> None:
        if not 0 < size <= parent.size:
            raise ArenaError(f"a view of {size} bytes does not fit an arena of {parent.size}")
        self.parent = parent
        self.size = size
        self.tensor = parent.tensor[:size]

    def descriptor(self) -> int:
        """None: the other process maps the parent and takes the same view of it."""
        raise ArenaError("a view of an arena is shared through its parent")

    def close(self) -> None:
        """Drop the view (the parent stays mapped)."""
        self.tensor = torch.empty(0, dtype=torch.uint8)


def new_arena(size: int, device: torch.device) -> Arena:
    """A fresh arena of at least ``size`` bytes on ``device`` (host memory for the CPU)."""
    return DeviceArena(size, device) if device.type == "cuda" else HostArena(size)


def attach_arena(fd: int, size: int, device: torch.device) -> Arena:
    """Map the arena another process exported as ``fd`` (ownership of ``fd`` passes to the arena)."""
    return DeviceArena(size, device, fd=fd) if device.type == "cuda" else HostArena(size, fd=fd)
