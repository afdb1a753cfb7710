"""Finding a host's GPUs without touching CUDA in the calling process.

The env process stays free of CUDA: the GPUs are found by a probe subprocess (run once per process and
device list, then cached), never by ``torch.cuda`` calls here, so the env can still be forked by vector envs
and starts in milliseconds.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from cudagym.errors import ConfigError
from cudagym.judge.records import Hardware, from_dict
from cudagym.judge.sandbox import child_pythonpath

Devices = str | Sequence[int | str]


@dataclass(frozen=True)
class GpuProbe:
    """The GPUs a judge will use, found by a subprocess.

    Attributes:
        device_ids: ``CUDA_VISIBLE_DEVICES`` names of the workers' GPUs (empty: no GPU).
        hardware: The first GPU (``gpu == "none"`` without one).
        message: Why there is no GPU, when there is none.
    """

    device_ids: tuple[str, ...]
    hardware: Hardware
    message: str = ""


_PROBE = """
import json
out = {"count": 0}
try:
    import torch
    if torch.cuda.is_available():
        from cudagym.judge.harness.hardware import describe
        from cudagym.judge.records import to_dict
        out = {"count": torch.cuda.device_count(), "hardware": to_dict(describe(torch.device("cuda", 0)))}
    else:
        out["error"] = "torch.cuda.is_available() is False (torch " + torch.__version__ + ")"
except Exception as exc:
    out["error"] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(out))
"""

_probes: dict[tuple[str, ...] | None, GpuProbe] = {}
_probes_lock = threading.Lock()


def probe_gpus(devices: Devices = "auto", *, timeout_s: float = 300.0) -> GpuProbe:
    """Find the GPUs (cached per process and device list).

    Args:
        devices: ``"auto"`` (every GPU torch sees), ``"none"`` or ``[]`` (no GPU), or a list of
            ``CUDA_VISIBLE_DEVICES`` names.
        timeout_s: Limit of the probe subprocess (it imports torch and creates a CUDA context).

    Raises:
        ConfigError: ``devices`` is none of those.
    """
    wanted = _normalize_devices(devices)
    with _probes_lock:
        if wanted not in _probes:
            _probes[wanted] = _run_probe(wanted, timeout_s)
        return _probes[wanted]


def _normalize_devices(devices: Devices) -> tuple[str, ...] | None:
    if isinstance(devices, str):
        if devices == "auto":
            return None
        if devices in ("none", ""):
            return ()
        return tuple(d.strip() for d in devices.split(",") if d.strip())
    if isinstance(devices, (list, tuple)) and all(
            (isinstance(d, int) and not isinstance(d, bool) and d >= 0) or (isinstance(d, str) and d.strip())
            for d in devices):
        return tuple(str(d).strip() for d in devices)
    raise ConfigError(f"expected devices to be 'auto', 'none', a comma-separated str or a list of CUDA device ids "
                      f"(ints >= 0) or UUIDs (str), got {type(devices).__name__} {devices!r}")


def _run_probe(wanted: tuple[str, ...] | None, timeout_s: float) -> GpuProbe:
    if wanted == ():
        return GpuProbe((), Hardware(), "no GPU was asked for (devices=[])")
    if not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/dxg"):
        return GpuProbe((), Hardware(), "no NVIDIA device nodes (/dev/nvidia*)")
    env = dict(os.environ)
    if wanted:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(wanted)
    env["PYTHONPATH"] = child_pythonpath()
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                              timeout=timeout_s, stdin=subprocess.DEVNULL)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError, OSError) as exc:
        return GpuProbe((), Hardware(), f"the GPU probe failed: {exc!r}")
    if not out.get("count"):
        return GpuProbe((), Hardware(), out.get("error", "no CUDA device"))
    visible = wanted or tuple(d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip())
    ids = visible[: out["count"]] if visible else tuple(str(i) for i in range(out["count"]))
    return GpuProbe(ids, from_dict(Hardware, out["hardware"]))
