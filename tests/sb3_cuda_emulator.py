"""Run a kernel family's rendered solution on the CPU: its ``.cu`` through ``sb3_cuda_emulator.h`` and g++.

:class:`EmulatedKernels` stands in for what ``cudagym.runtime.load`` returns: each ``extern "C"`` kernel of the
source becomes a function of a shared library (compiled once per source text), called with the launch's grid,
block and arguments marshalled by the kernel's C signature (the judge's own parser), CPU tensors as pointers.
:func:`run_solution` executes the solution's ``model_new.py`` with it, loads the reference ``Model``'s state
into ``ModelNew`` and compares both outputs on the given inputs.
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from cudagym.judge.build.kernel_signature import KernelSignature, parse_kernels

HEADER = Path(__file__).with_suffix(".h")
_SCALARS = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "u32": ctypes.c_uint32, "f32": ctypes.c_float}


def compiler() -> str | None:
    """The C++ compiler the emulation needs (g++ with C++20), or None."""
    return shutil.which("g++")


def _wrapper(k: KernelSignature) -> str:
    """A C entry point that runs kernel ``k`` over a grid, its arguments as an array of pointers to values."""
    args = ", ".join(f"({p.ctype})(*(void**)a[{i}])" if p.kind == "ptr" else f"*({p.ctype}*)a[{i}]"
                     for i, p in enumerate(k.params))
    return (f'extern "C" void emu_{k.name}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, void** a) '
            f"{{ emu_launch(gx, gy, gz, bx, [&]() {{ {k.name}({args}); }}); }}")


class EmulatedKernels:
    """The kernels of one ``.cu`` source, launchable like ``cudagym.runtime``'s (on CPU tensors)."""

    def __init__(self, source: str, build_dir: Path) -> None:
        self.signatures = {k.name: k for k in parse_kernels(source)}
        text = f'#include "{HEADER}"\n{source}\n' + "\n".join(map(_wrapper, self.signatures.values())) + "\n"
        library = build_dir / f"{hashlib.sha256(text.encode()).hexdigest()[:20]}.so"
        if not library.exists():
            cpp = library.with_suffix(".cpp")
            cpp.write_text(text)
            done = subprocess.run([compiler() or "g++", "-std=c++20", "-O1", "-w", "-shared", "-fPIC", "-pthread",
                                   "-o", str(library), str(cpp)], capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"the emulated kernels did not compile:\n{done.stderr[:4000]}")
        self.library = ctypes.CDLL(str(library))

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name not in self.__dict__.get("signatures", {}):
            raise AttributeError(name)
        signature, entry = self.signatures[name], getattr(self.library, f"emu_{name}")

        def launch(grid: Sequence[int], block: Sequence[int], args: Sequence[Any]) -> None:
            if len(args) != len(signature.params):
                raise TypeError(f"kernel {name} takes {len(signature.params)} arguments, got {len(args)}")
            values = [_marshal(name, p.kind, p.name, a) for p, a in zip(signature.params, args, strict=True)]
            pointers = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p)
                                                         for v in values])
            gx, gy, gz = (*grid, 1, 1)[:3]
            (bx,) = block
            entry(ctypes.c_uint(gx), ctypes.c_uint(gy), ctypes.c_uint(gz), ctypes.c_uint(bx), pointers)

        return launch


def _marshal(kernel: str, kind: str, param: str, arg: Any) -> Any:
    """One argument as the C value the kernel's parameter takes (as strict as ``cudagym.runtime``)."""
    where = f"kernel {kernel}: parameter {param}"
    if kind == "ptr":
        if not isinstance(arg, torch.Tensor) or not arg.is_contiguous() or arg.dtype != torch.float32:
            raise TypeError(f"{where}: expected a contiguous float32 tensor, got {arg!r:.80}")
        return ctypes.c_void_p(arg.data_ptr())
    if isinstance(arg, torch.Tensor) or (kind.startswith(("i", "u")) and not isinstance(arg, int)):
        raise TypeError(f"{where} ({kind}): got {type(arg).__name__}")
    return _SCALARS[kind](arg)


def run_solution(task_source: str, files: dict[str, str], init: Sequence[Any], inputs: Sequence[torch.Tensor],
                 build_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(reference output, ``ModelNew`` output) of the task's ``Model`` and the solution on ``inputs``."""
    reference: dict[str, Any] = {}
    exec(compile(task_source, "reference", "exec"), reference)
    torch.manual_seed(0)
    model = reference["Model"](*init).eval()
    (cu,) = (text for path, text in files.items() if path.endswith(".cu"))
    kernels = EmulatedKernels(cu, build_dir)
    candidate: dict[str, Any] = {"runtime": type("runtime", (), {"load": staticmethod(lambda path: kernels)})}
    code = files["model_new.py"].replace("from cudagym import runtime\n", "")
    exec(compile(code, "model_new.py", "exec"), candidate)
    new = candidate["ModelNew"](*init).eval()
    new.load_state_dict(model.state_dict())
    with torch.no_grad():
        return model(*inputs), new(*[t.clone() for t in inputs])
