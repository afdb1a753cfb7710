"""The harness's own references to the functions it relies on, and checks that candidate code left them alone.

Timing hacks replace ``torch.cuda.synchronize``, ``torch.cuda.Event.elapsed_time`` or ``time.perf_counter``;
verdict hacks replace ``torch.allclose``, ``builtins.isinstance`` or a harness function. Two defences:

1. The harness calls its timing functions through references captured when this module is imported, which
   happens in the worker before any candidate code runs (see :data:`PRISTINE`).
2. :class:`AttributeSnapshot` records the callables of the modules and classes the harness depends on; after
   each stage that ran candidate code, :meth:`AttributeSnapshot.changes` lists what was replaced or deleted,
   and :meth:`AttributeSnapshot.restore` puts the originals back so the rest of the job (and the next job in
   this worker) runs on them. The ``timer_patch`` guard turns changes into a violation.

:class:`TorchFlags` does the same for torch's global switches (TF32, cuDNN, grad mode, default dtype).
"""

from __future__ import annotations

import builtins
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

# torch._dynamo wraps these once, the first time torch.compile runs in a process (mutation_guard.py:
# install_generation_tagging_init); that is torch's doing, not the candidate's.
_TORCH_OWN_PATCHES = frozenset({("torch.nn.Module", "__init__"), ("torch.nn.Module", "__setstate__")})


@dataclass(frozen=True)
class _Pristine:
    """References taken at import, before any candidate code can run in this process.

    The timer calls these function objects directly, so replacing ``torch.cuda.Event.elapsed_time`` or
    ``torch._C._cuda_synchronize`` later changes nothing for the harness (and is flagged by the guard).
    """

    perf_counter: Any
    synchronize: Any
    raw_synchronize: Any  # torch._C._cuda_synchronize (absent in CPU-only builds)
    event: Any
    event_record: Any
    event_elapsed_time: Any
    event_synchronize: Any
    current_stream: Any

    def sync(self, device: torch.device) -> None:
        """Wait until every stream of ``device`` is idle (no-op on the CPU)."""
        if device.type != "cuda":
            return
        if self.raw_synchronize is not None:  # the current device: the harness made it the job's
            self.raw_synchronize()
        else:  # pragma: no cover - CUDA builds always have the raw binding
            self.synchronize(device)


PRISTINE = _Pristine(
    perf_counter=time.perf_counter,
    synchronize=torch.cuda.synchronize,
    raw_synchronize=getattr(torch._C, "_cuda_synchronize", None),
    event=torch.cuda.Event,
    event_record=torch.cuda.Event.record,
    event_elapsed_time=torch.cuda.Event.elapsed_time,
    event_synchronize=torch.cuda.Event.synchronize,
    current_stream=torch.cuda.current_stream,
)


def watched_owners() -> dict[str, Any]:
    """Modules and classes whose callables the harness depends on, by dotted name."""
    import torch.autograd.profiler
    import torch.nn.functional
    import torch.profiler
    import torch.testing
    import torch.utils._python_dispatch

    owners: dict[str, Any] = {
        "builtins": builtins,
        "time": time,
        "threading": threading,
        "torch": torch,
        "torch._C": torch._C,
        "torch.cuda": torch.cuda,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Stream": torch.cuda.Stream,
        "torch.Tensor": torch.Tensor,
        "torch.nn.Module": torch.nn.Module,
        "torch.nn.functional": torch.nn.functional,
        "torch.testing": torch.testing,
        "torch.profiler": torch.profiler,
        "torch.autograd.profiler": torch.autograd.profiler,
        "torch.utils._python_dispatch": torch.utils._python_dispatch,
        "torch.backends.cudnn": torch.backends.cudnn,
        "torch.backends.cuda": torch.backends.cuda,
    }
    from cudagym import runtime  # the launch cover and raw kernels launch through it (imports no torch)

    owners["cudagym.runtime.Kernel"] = runtime.Kernel
    owners["cudagym.runtime.KernelModule"] = runtime.KernelModule
    for name, module in list(sys.modules.items()):
        if module is not None and (name == "cudagym" or name.startswith("cudagym.")):
            owners[name] = module
    return owners


class AttributeSnapshot:
    """The callables of :func:`watched_owners` at one moment, to detect and undo monkey-patching."""

    def __init__(self) -> None:
        self._owners = watched_owners()
        self._saved: dict[str, dict[str, Any]] = {
            label: {name: value for name, value in _attributes(owner) if callable(value)}
            for label, owner in self._owners.items()
        }

    def changes(self) -> list[str]:
        """Dotted names of watched callables that were replaced or deleted since the snapshot."""
        changed = []
        for label, owner, name, original in self._entries():
            if (label, name) in _TORCH_OWN_PATCHES:
                continue
            if getattr_static(owner, name) is not original:
                changed.append(f"{label}.{name}")
        return changed

    def restore(self) -> list[str]:
        """Put every replaced or deleted callable back; returns what was restored."""
        restored = []
        for label, owner, name, original in self._entries():
            if (label, name) in _TORCH_OWN_PATCHES or getattr_static(owner, name) is original:
                continue
            try:
                setattr(owner, name, original)
                restored.append(f"{label}.{name}")
            except (AttributeError, TypeError):  # a read-only attribute could not have been patched either
                continue
        return restored

    def _entries(self) -> Iterator[tuple[str, Any, str, Any]]:
        for label, saved in self._saved.items():
            owner = self._owners[label]
            for name, original in saved.items():
                yield label, owner, name, original


def getattr_static(owner: Any, name: str) -> Any:
    """``owner.__dict__[name]`` without descriptors or ``__getattr__`` (a sentinel when absent)."""
    try:
        return vars(owner).get(name, _MISSING)
    except TypeError:
        return _MISSING


def _attributes(owner: Any) -> list[tuple[str, Any]]:
    try:
        return list(vars(owner).items())
    except TypeError:
        return []


_MISSING = object()


@dataclass(frozen=True)
class TorchFlags:
    """Torch's global switches that change numerics or speed, captured at one moment."""

    matmul_allow_tf32: bool
    cudnn_allow_tf32: bool
    matmul_fp16_reduced: bool
    matmul_bf16_reduced: bool
    cudnn_enabled: bool
    cudnn_benchmark: bool
    cudnn_deterministic: bool
    float32_matmul_precision: str
    default_dtype: str
    grad_enabled: bool

    @classmethod
    def capture(cls) -> TorchFlags:
        """The current switches."""
        matmul = torch.backends.cuda.matmul
        return cls(
            matmul_allow_tf32=bool(matmul.allow_tf32),
            cudnn_allow_tf32=bool(torch.backends.cudnn.allow_tf32),
            matmul_fp16_reduced=bool(matmul.allow_fp16_reduced_precision_reduction),
            matmul_bf16_reduced=bool(matmul.allow_bf16_reduced_precision_reduction),
            cudnn_enabled=bool(torch.backends.cudnn.enabled),
            cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
            cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
            float32_matmul_precision=torch.get_float32_matmul_precision(),
            default_dtype=str(torch.get_default_dtype()),
            grad_enabled=torch.is_grad_enabled(),
        )

    def differences(self, other: TorchFlags) -> list[str]:
        """``name: before -> after`` for each switch that differs in ``other``."""
        return [
            f"{name}: {getattr(self, name)} -> {getattr(other, name)}"
            for name in self.__dataclass_fields__
            if getattr(self, name) != getattr(other, name)
        ]

    def apply(self) -> None:
        """Set torch's switches to these values."""
        matmul = torch.backends.cuda.matmul
        # float32_matmul_precision first: it also sets matmul.allow_tf32, which we then set explicitly.
        torch.set_float32_matmul_precision(self.float32_matmul_precision)
        matmul.allow_tf32 = self.matmul_allow_tf32
        matmul.allow_fp16_reduced_precision_reduction = self.matmul_fp16_reduced
        matmul.allow_bf16_reduced_precision_reduction = self.matmul_bf16_reduced
        torch.backends.cudnn.allow_tf32 = self.cudnn_allow_tf32
        torch.backends.cudnn.enabled = self.cudnn_enabled
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        torch.backends.cudnn.deterministic = self.cudnn_deterministic
        torch.set_default_dtype(getattr(torch, self.default_dtype.replace("torch.", "")))
        torch.set_grad_enabled(self.grad_enabled)


def protocol_flags(allow_tf32: bool, cudnn_tf32: bool | None = None) -> TorchFlags:
    """The switches every evaluation runs under: TF32 for matmul and cuDNN exactly as the protocol says.

    Args:
        allow_tf32: TF32 for matmuls (cuBLAS), and for cuDNN unless ``cudnn_tf32`` says otherwise.
        cudnn_tf32: TF32 for cuDNN convolutions (``None``: as ``allow_tf32``).

    Reduced-precision reductions in fp16/bf16 GEMMs and cuDNN's benchmark/deterministic modes stay at
    torch's defaults; grad mode is off (inference); the default dtype is float32.
    """
    return TorchFlags(
        matmul_allow_tf32=allow_tf32,
        cudnn_allow_tf32=allow_tf32 if cudnn_tf32 is None else cudnn_tf32,
        matmul_fp16_reduced=True,
        matmul_bf16_reduced=True,
        cudnn_enabled=True,
        cudnn_benchmark=False,
        cudnn_deterministic=False,
        float32_matmul_precision="high" if allow_tf32 else "highest",
        default_dtype="torch.float32",
        grad_enabled=False,
    )
