"""Parametrised raw-format kernel families for bundled tasks: one solution per launch configuration.

A :class:`KernelFamily` renders a complete ``raw``-format solution (``model_new.py`` and one
``kernels/<name>.cu``) of one bundled task for a :class:`LaunchParams`: threads per block, items per
thread (vectors each thread handles, ``#pragma unroll``-ed), and vector width (1, 2 or 4 floats per load:
``float``, ``float2``, ``float4``). Every configuration computes the same result; only speed differs,
which is what the Stable-Baselines3 wrapper (:mod:`cudagym.integrations.sb3`) tunes.

Families (:data:`FAMILIES`, all 26 bundled tasks), each module with its own kernel template and
launch-parameter space (:mod:`cudagym.integrations.launch_params`):

- Elementwise (:class:`KernelFamily`, here; the 60-point launch grid): ``L1/01_Swish``, ``L1/02_NewGELU``,
  ``L1/03_Mish``, ``L1/09_DiagMatmul`` (a row scaling), ``L2/05_BiasGeluResidual``, ``L2/08_BNReLUResidual``.
- Row and channel reductions (:mod:`cudagym.integrations.reduction_families`; the launch grid):
  ``L1/04_RMSNormChannels``, ``L1/05_Softmax``, ``L1/06_LogSoftmax``, ``L1/07_LayerNormLarge``,
  ``L2/03_ResidualAddLayerNorm``, ``L2/04_ScaleCausalMaskSoftmax``, ``L2/07_GroupNormSiLU``.
- A row scan and a middle-axis reduction (:mod:`cudagym.integrations.scan_families`): ``L1/08_CumSum``
  (the launch grid), ``L1/14_SumSquaresDim1`` (block size, vector width, row splits).
- Tiled GEMMs with fused epilogues (:mod:`cudagym.integrations.matmul_families`; tile M, N, K and outputs per
  thread): ``L1/10_TrilMatmul``, ``L1/12_MatmulSmallKScale``, ``L2/01_GemmGeluScaleShift``,
  ``L2/06_Conv1x1BNReLU``; and ``L1/11_BatchedTinyMatmul`` (pairs per block, threads per pair, vector width).
- Depthwise 3x3 stencils (:mod:`cudagym.integrations.stencil_families`; tile width, height, outputs per
  thread): ``L1/13_DepthwiseConv2d``, ``L2/02_DWConvBNReLU``.
- L3 blocks (:mod:`cudagym.integrations.block_families`): ``L3/01_TinyMLP`` as one fused kernel (rows per
  block, threads, vector width), ``L3/03_DWSeparableResidualBlock`` as the stencil and a GEMM with a BN +
  residual epilogue (both kernels' tiles), ``L3/04_SEResidualBlock`` as mean, squeeze and excite kernels (the
  launch grid).
- Flash-style causal attention (:mod:`cudagym.integrations.attention_families`; queries per block, key tile,
  vector width): ``L3/02_CausalAttentionHead``.

The device functions follow the bundled extension solutions' numerics (``expf``, ``tanhf``, ``erff``; the
reference's operation order) to pass the default protocol's 1e-4 check; ``tests/test_sb3_gpu.py`` judges
each family's default and two random configurations on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from cudagym.errors import ConfigError
from cudagym.integrations.launch_params import (
    LANES,
    VECTOR_TYPES,
    Family,
    LaunchParams,
    OnLaunchGrid,
)


def _values(layout: Layout, lane: str) -> dict[str, str]:
    """Each stream's value in one lane of the loaded vectors (``x_s.y``)."""
    return {s: f"{s}_s{lane}" for s in layout.streams}


@dataclass(frozen=True)
class Layout:
    """How a family's kernel reads its inputs and what ``ModelNew`` passes it.

    Attributes:
        streams: Inputs read elementwise as vectors (``forward``'s tensor arguments, in order).
        extra_params: Kernel parameters after ``y, n`` (C, with a leading comma).
        op_args: The device function's arguments; ``{<stream>}`` is that input's value, ``{j}`` the
            element's index.
        init_args: ``__init__`` parameters after ``self`` (with a leading comma).
        init_body: ``__init__``'s body after ``super().__init__()`` (the reference's parameter names).
        launch_extra: Launch arguments after ``y, n`` (Python, with a leading comma).
        forward_params: ``forward``'s parameters when they are not just ``streams`` (inputs that are not read
            elementwise, such as a row scale, come in through ``launch_extra``).
    """

    streams: tuple[str, ...] = ("x",)
    extra_params: str = ""
    op_args: str = "{x}"
    init_args: str = ""
    init_body: str = ""
    launch_extra: str = ""
    forward_params: tuple[str, ...] = ()


UNARY = Layout()
ROW_BIAS = Layout(
    streams=("x", "h"), extra_params=", const float* __restrict__ b, long long hidden",
    op_args="{h}, b[{j} % hidden], {x}", init_args=", hidden: int",
    init_body="self.bias = nn.Parameter(torch.empty(hidden))", launch_extra=", self.bias, self.bias.numel()",
)
BN_RESIDUAL = Layout(
    streams=("x", "identity"),
    extra_params=", const float* __restrict__ mean, const float* __restrict__ var, const float* __restrict__ w, "
                 "const float* __restrict__ b, long long hw, long long channels, float eps",
    op_args="{x}, {identity}, ({j} / hw) % channels, mean, var, w, b, eps", init_args=", channels: int",
    init_body="self.bn = nn.BatchNorm2d(channels)  # parameter and buffer holder (the reference's names)",
    launch_extra=", self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias, "
                 "x.shape[2] * x.shape[3], x.shape[1], float(self.bn.eps)",
)

ROW_SCALE = Layout(  # diag(A) @ B is B with row i scaled by A[i]
    streams=("B",), extra_params=", const float* __restrict__ a, long long cols", op_args="{B}, a[{j} / cols]",
    launch_extra=", A.contiguous(), B.shape[1]", forward_params=("A", "B"),
)


@dataclass(frozen=True)
class KernelFamily(OnLaunchGrid):
    """A task's solution as a function of the launch configuration.

    Attributes:
        task_id: The bundled task it solves.
        name: The kernel's (and the ``.cu`` file's) name.
        device_fn: CUDA source of ``__device__ float op(...)``, called with ``layout.op_args``.
        layout: How inputs are read and passed.
    """

    task_id: str
    name: str
    device_fn: str
    layout: Layout = UNARY

    def files(self, params: LaunchParams) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        return {"model_new.py": self._model(params), f"kernels/{self.name}.cu": self.kernel_source(params)}

    def kernel_source(self, p: LaunchParams) -> str:
        """The ``.cu`` source for ``p``."""
        vt, lanes, lay = VECTOR_TYPES[p.vector_width], LANES[p.vector_width], self.layout
        inputs = ", ".join(f"const float* __restrict__ {s}" for s in lay.streams)
        views = "".join(f"  const {vt}* {s}_v = reinterpret_cast<const {vt}*>({s});\n" for s in lay.streams)
        loads = "".join(f"    const {vt} {s}_s = {s}_v[i];\n" for s in lay.streams) + f"    {vt} out;\n"
        body = "".join(
            f"    out{lane} = op({lay.op_args.format(j=f'(i * {p.vector_width} + {k})', **_values(lay, lane))});\n"
            for k, lane in enumerate(lanes)
        )
        tail = f"y[j] = op({lay.op_args.format(j='j', **{s: f'{s}[j]' for s in lay.streams})});"
        return (
            f"// {self.task_id} in the raw format: {p.block_size} threads per block, {p.items_per_thread} "
            f"vector(s) of {p.vector_width} float(s) per thread.\n"
            f"// Rendered by cudagym.integrations.kernel_families; every configuration computes the same values.\n"
            f"{self.device_fn.strip()}\n\n"
            f'extern "C" __global__ void __launch_bounds__({p.block_size}) '
            f"{self.name}({inputs}, float* __restrict__ y, long long n{lay.extra_params}) {{\n"
            f"  const long long nv = n / {p.vector_width};\n{views}"
            f"  {vt}* yv = reinterpret_cast<{vt}*>(y);\n"
            f"  const long long first = (long long)blockIdx.x * {p.block_size * p.items_per_thread} + threadIdx.x;\n"
            f"#pragma unroll\n"
            f"  for (int k = 0; k < {p.items_per_thread}; ++k) {{\n"
            f"    const long long i = first + (long long)k * {p.block_size};\n"
            f"    if (i >= nv) break;\n{loads}{body}    yv[i] = out;\n  }}\n"
            f"  if (blockIdx.x == 0) {{  // the last n % {p.vector_width} elements, one per thread\n"
            f"    for (long long j = nv * {p.vector_width} + threadIdx.x; j < n; j += {p.block_size}) {tail}\n"
            f"  }}\n}}\n"
        )

    def _model(self, p: LaunchParams) -> str:
        lay = self.layout
        first = lay.streams[0]  # the output has the first input's shape
        signature = ", ".join(f"{s}: torch.Tensor" for s in lay.forward_params or lay.streams)
        inputs = "".join(f"        {s} = {s}.contiguous()\n" for s in lay.streams)
        body = f"\n        {lay.init_body}" if lay.init_body else ""
        args = ", ".join(lay.streams) + f", y, n{lay.launch_extra}"
        return (
            "import torch\nimport torch.nn as nn\n\nfrom cudagym import runtime\n\n"
            f'kernels = runtime.load("kernels/{self.name}.cu")\n'
            f"BLOCK, PER_BLOCK = {p.block_size}, {p.per_block}  # threads; floats per block\n\n\n"
            "class ModelNew(nn.Module):\n"
            f'    """{self.task_id}: one raw kernel, {p.block_size} threads x {p.items_per_thread} x '
            f'{p.vector_width} floats."""\n\n'
            f"    def __init__(self{lay.init_args}):\n        super().__init__(){body}\n\n"
            f"    def forward(self, {signature}) -> torch.Tensor:\n{inputs}"
            f"        y = torch.empty_like({first})\n        n = {first}.numel()\n"
            "        grid = max((n + PER_BLOCK - 1) // PER_BLOCK, 1)\n"
            f"        kernels.{self.name}(grid=(grid,), block=(BLOCK,), args=({args}))\n"
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

_BN_ADD_RELU = """
__device__ __forceinline__ float op(float x, float r, long long c, const float* mean, const float* var,
                                    const float* w, const float* b, float eps) {
  // inference batch norm as torch computes it, (x - mean) / sqrt(var + eps) * w + b, then + identity, ReLU
  const float y = (x - mean[c]) / sqrtf(var[c] + eps) * w[c] + b[c];
  return fmaxf(y + r, 0.0f);
}"""
_ROW_SCALE = """
__device__ __forceinline__ float op(float b, float a) {
  return a * b;  // the GEMM's one non-zero product per output, rounded once: exact against the reference
}"""

def _families() -> dict[str, Family]:
    # the other family modules import this module's launch grid module, not this module: no cycle
    from cudagym.integrations.attention_families import ATTENTION_FAMILIES
    from cudagym.integrations.block_families import BLOCK_FAMILIES
    from cudagym.integrations.matmul_families import MATMUL_FAMILIES
    from cudagym.integrations.reduction_families import ROW_FAMILIES
    from cudagym.integrations.scan_families import SCAN_FAMILIES
    from cudagym.integrations.stencil_families import STENCIL_FAMILIES

    elementwise: tuple[Family, ...] = (
        KernelFamily("bundled/L1/01_Swish", "swish", _SWISH),
        KernelFamily("bundled/L1/02_NewGELU", "new_gelu", _NEW_GELU),
        KernelFamily("bundled/L1/03_Mish", "mish", _MISH),
        KernelFamily("bundled/L1/09_DiagMatmul", "diag_matmul", _ROW_SCALE, ROW_SCALE),
        KernelFamily("bundled/L2/05_BiasGeluResidual", "bias_gelu_residual", _BIAS_GELU_RESIDUAL, ROW_BIAS),
        KernelFamily("bundled/L2/08_BNReLUResidual", "bn_add_relu", _BN_ADD_RELU, BN_RESIDUAL),
    )
    every: tuple[Family, ...] = (*elementwise, *ROW_FAMILIES, *SCAN_FAMILIES, *MATMUL_FAMILIES, *STENCIL_FAMILIES,
                                 *BLOCK_FAMILIES, *ATTENTION_FAMILIES)
    return {f.task_id: f for f in sorted(every, key=lambda f: f.task_id)}


FAMILIES: dict[str, Family] = _families()


def get_family(task_id: str) -> Family:
    """The kernel family of a bundled task.

    Raises:
        ConfigError: No family is defined for ``task_id`` (every bundled task has one).
    """
    if task_id not in FAMILIES:
        raise ConfigError(f"expected a task with a kernel family, one of {sorted(FAMILIES)}; got {task_id!r}")
    return FAMILIES[task_id]
