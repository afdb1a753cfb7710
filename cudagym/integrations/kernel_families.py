"""Parametrised raw-format kernel families for bundled tasks: one solution per launch configuration.

A :class:`KernelFamily` renders a complete ``raw``-format solution (``model_new.py`` and one
``kernels/<name>.cu``) of one bundled task for a :class:`LaunchParams`: threads per block, items per
thread (vectors each thread handles, ``#pragma unroll``-ed), and vector width (1, 2 or 4 floats per load:
``float``, ``float2``, ``float4``). Every configuration computes the same result; only speed differs,
which is what the Stable-Baselines3 wrapper (:mod:`cudagym.integrations.sb3`) tunes.

Families exist for the bundled elementwise tasks, whose speed depends on exactly these three knobs:
``bundled/L1/01_Swish``, ``bundled/L1/02_NewGELU``, ``bundled/L1/03_Mish`` and
``bundled/L2/05_BiasGeluResidual`` (:data:`FAMILIES`). The device functions follow the bundled extension
solutions' numerics (``expf``, ``tanhf``, ``erff``; the reference's operation order), so every
configuration passes the default protocol's 1e-4 check.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from cudagym.errors import ConfigError

BLOCK_SIZES: tuple[int, ...] = (64, 128, 256, 512, 1024)
ITEMS_PER_THREAD: tuple[int, ...] = (1, 2, 4, 8)
VECTOR_WIDTHS: tuple[int, ...] = (1, 2, 4)
_VECTOR_TYPES = {1: "float", 2: "float2", 4: "float4"}
_LANES = {1: ("",), 2: (".x", ".y"), 4: (".x", ".y", ".z", ".w")}


@dataclass(frozen=True)
class LaunchParams:
    """One launch configuration.

    Attributes:
        block_size: Threads per block.
        items_per_thread: Vectors each thread handles.
        vector_width: Floats per load and store (1, 2 or 4).
    """

    block_size: int = 256
    items_per_thread: int = 1
    vector_width: int = 4

    def __post_init__(self) -> None:
        if self.block_size not in BLOCK_SIZES or self.items_per_thread not in ITEMS_PER_THREAD \
                or self.vector_width not in VECTOR_WIDTHS:
            raise ConfigError(
                f"expected block_size in {BLOCK_SIZES}, items_per_thread in {ITEMS_PER_THREAD}, vector_width in "
                f"{VECTOR_WIDTHS}; got {self.block_size}, {self.items_per_thread}, {self.vector_width}"
            )

    @property
    def per_block(self) -> int:
        """Floats one block covers."""
        return self.block_size * self.items_per_thread * self.vector_width


def all_params() -> Iterator[LaunchParams]:
    """Every configuration of the grid (block size x items per thread x vector width), in a fixed order."""
    for b, i, v in itertools.product(BLOCK_SIZES, ITEMS_PER_THREAD, VECTOR_WIDTHS):
        yield LaunchParams(b, i, v)


@dataclass(frozen=True)
class KernelFamily:
    """A task's solution as a function of the launch configuration.

    Attributes:
        task_id: The bundled task it solves.
        name: The kernel's (and the ``.cu`` file's) name.
        device_fn: CUDA source of ``__device__ float op(float v)`` (unary) or ``op(float h, float b, float x)``.
        bias: True for ``out = op(h, bias[col], x)`` over (rows, hidden) with a ``bias`` parameter; False
            for ``y = op(x)``.
    """

    task_id: str
    name: str
    device_fn: str
    bias: bool = False

    def files(self, params: LaunchParams) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        return {"model_new.py": self._model(params), f"kernels/{self.name}.cu": self._kernel(params)}

    def _kernel(self, p: LaunchParams) -> str:
        vt, lanes = _VECTOR_TYPES[p.vector_width], _LANES[p.vector_width]
        if self.bias:
            params = "const float* __restrict__ x, const float* __restrict__ h, const float* __restrict__ b, " \
                     "float* __restrict__ y, long long n, long long hidden"
            load = f"    const {vt} xs = xv[i];\n    const {vt} hs = hv[i];\n    {vt} out;\n"
            body = "".join(f"    out{lane} = op(hs{lane}, b[(i * {p.vector_width} + {k}) % hidden], xs{lane});\n"
                           for k, lane in enumerate(lanes))
            views = f"  const {vt}* xv = reinterpret_cast<const {vt}*>(x);\n" \
                    f"  const {vt}* hv = reinterpret_cast<const {vt}*>(h);\n"
            tail = "y[j] = op(h[j], b[j % hidden], x[j]);"
        else:
            params = "const float* __restrict__ x, float* __restrict__ y, long long n"
            load = f"    const {vt} xs = xv[i];\n    {vt} out;\n"
            body = "".join(f"    out{lane} = op(xs{lane});\n" for lane in lanes)
            views = f"  const {vt}* xv = reinterpret_cast<const {vt}*>(x);\n"
            tail = "y[j] = op(x[j]);"
        return (
            f"// {self.task_id} in the raw format: {p.block_size} threads per block, {p.items_per_thread} "
            f"vector(s) of {p.vector_width} float(s) per thread.\n"
            f"// Rendered by cudagym.integrations.kernel_families; every configuration computes the same values.\n"
            f"{self.device_fn.strip()}\n\n"
            f'extern "C" __global__ void __launch_bounds__({p.block_size}) {self.name}({params}) {{\n'
            f"  const long long nv = n / {p.vector_width};\n{views}"
            f"  {vt}* yv = reinterpret_cast<{vt}*>(y);\n"
            f"  const long long first = (long long)blockIdx.x * {p.block_size * p.items_per_thread} + threadIdx.x;\n"
            f"#pragma unroll\n"
            f"  for (int k = 0; k < {p.items_per_thread}; ++k) {{\n"
            f"    const long long i = first + (long long)k * {p.block_size};\n"
            f"    if (i >= nv) break;\n{load}{body}    yv[i] = out;\n  }}\n"
            f"  if (blockIdx.x == 0) {{  // the last n % {p.vector_width} elements, one per thread\n"
            f"    for (long long j = nv * {p.vector_width} + threadIdx.x; j < n; j += {p.block_size}) {tail}\n"
            f"  }}\n}}\n"
        )

    def _model(self, p: LaunchParams) -> str:
        if self.bias:
            init = "def __init__(self, hidden: int):\n        super().__init__()\n" \
                   "        self.bias = nn.Parameter(torch.empty(hidden))"
            signature, inputs = "x: torch.Tensor, h: torch.Tensor", "x = x.contiguous()\n        h = h.contiguous()\n"
            args = "(x, h, self.bias, y, n, self.bias.numel())"
        else:
            init = "def __init__(self):\n        super().__init__()"
            signature, inputs, args = "x: torch.Tensor", "x = x.contiguous()\n", "(x, y, n)"
        return (
            "import torch\nimport torch.nn as nn\n\nfrom cudagym import runtime\n\n"
            f'kernels = runtime.load("kernels/{self.name}.cu")\n'
            f"BLOCK, PER_BLOCK = {p.block_size}, {p.per_block}  # threads; floats per block\n\n\n"
            "class ModelNew(nn.Module):\n"
            f'    """{self.task_id}: one raw kernel, {p.block_size} threads x {p.items_per_thread} x '
            f'{p.vector_width} floats."""\n\n'
            f"    {init}\n\n"
            f"    def forward(self, {signature}) -> torch.Tensor:\n"
            f"        {inputs}"
            "        y = torch.empty_like(x)\n        n = x.numel()\n"
            "        grid = max((n + PER_BLOCK - 1) // PER_BLOCK, 1)\n"
            f"        kernels.{self.name}(grid=(grid,), block=(BLOCK,), args={args})\n"
            "        return y\n"
        )


_SWISH = "__device__ __forceinline__ float op(float v) { return v / (1.0f + expf(-v)); }"
_NEW_GELU = """
__device__ __forceinline__ float op(float v) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi); pow(x, 3) as x*x*x, the reference's order
  const float inner = k * (v + 0.044715f * (v * v * v));
  return 0.5f * v * (1.0f + tanhf(inner));
}"""
_MISH = """
__device__ __forceinline__ float op(float v) {
  // softplus with torch's threshold 20 (above it softplus(x) = x), then x * tanh(softplus(x))
  const float sp = v > 20.0f ? v : log1pf(expf(v));
  return v * tanhf(sp);
}"""
_BIAS_GELU_RESIDUAL = """
__device__ __forceinline__ float op(float h, float b, float x) {
  const float v = h + b;
  return x + v * 0.5f * (1.0f + erff(v * 0.70710678118654752f));  // torch's exact (erf) GELU
}"""

FAMILIES: dict[str, KernelFamily] = {
    f.task_id: f for f in (
        KernelFamily("bundled/L1/01_Swish", "swish", _SWISH),
        KernelFamily("bundled/L1/02_NewGELU", "new_gelu", _NEW_GELU),
        KernelFamily("bundled/L1/03_Mish", "mish", _MISH),
        KernelFamily("bundled/L2/05_BiasGeluResidual", "bias_gelu_residual", _BIAS_GELU_RESIDUAL, bias=True),
    )
}


def get_family(task_id: str) -> KernelFamily:
    """The kernel family of a bundled task.

    Raises:
        ConfigError: No family is defined for ``task_id``.
    """
    if task_id not in FAMILIES:
        raise ConfigError(f"expected a task with a kernel family, one of {sorted(FAMILIES)}; got {task_id!r}")
    return FAMILIES[task_id]
