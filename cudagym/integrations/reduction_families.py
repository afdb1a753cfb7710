"""Kernel families for the bundled row and channel reductions: softmaxes, layer and group norms, RMS norm.

A :class:`RowFamily` gives each row its own block: ``block_size`` threads stride over the row in vectors of
``vector_width`` floats, ``items_per_thread`` vectors per pass (``#pragma unroll``-ed), for each of the
op's reduction passes (max, sum, mean, variance: each a block-wide shuffle reduction) and then one write
pass. The row is re-read from global memory (mostly L2) in every pass; which configuration hides that best
is what the tuner finds. A :class:`ChannelFamily` gives each thread ``items_per_thread`` vectors of pixels
of one image and loops over the channels (NCHW's strided middle axis) twice: reduce, then write.

Rows and pixel runs must be whole vectors (the bundled shapes are); ``ModelNew`` raises ``ValueError``
naming the configuration otherwise. Numerics follow the references (``expf``, ``logf``; biased variance;
``x / sqrt(mean + eps)`` for RMS norm) to pass the default protocol's 1e-4 check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cudagym.integrations.launch_params import LANES, VECTOR_TYPES, LaunchParams, OnLaunchGrid

BLOCK_REDUCE = """
#define NEG_INF __int_as_float(0xff800000)  // -infinity without math headers (NVRTC has none)
struct Sum { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };
struct Max { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };

// Reduce one value per thread over the block; every thread gets the result. blockDim.x is a multiple of 32
// (64..1024), so every warp is full; `scratch` holds one partial per warp and is free again on return.
template <class Combine>
__device__ __forceinline__ float block_reduce(float v, float identity, float* scratch) {
  const Combine combine;
  for (int o = 16; o > 0; o >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? scratch[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // the next reduction writes scratch again
  return v;
}"""


@dataclass(frozen=True)
class Reduction:
    """One pass over the row that folds every element's value ``v`` into one float.

    Attributes:
        var: The accumulator's name, visible to later passes.
        identity: Its start value (C).
        combine: ``sum`` or ``max``.
        update: The fold of one element (C, in terms of ``var`` and ``v``).
        finish: A statement after the block reduction (C; may define names for later passes).
    """

    var: str
    identity: str
    combine: str
    update: str
    finish: str = ""


@dataclass(frozen=True)
class RowOp:
    """What a row family computes: per-element value, reduction passes, output.

    Attributes:
        streams: Inputs read along the row (``forward``'s tensor arguments, in order).
        value: Each element's value (C, with ``{<stream>}`` for an input's element, ``c`` its column and
            ``row`` its row).
        reductions: The passes before the write.
        output: The output element (C, in terms of ``v``, ``c``, ``row`` and the passes' names).
        extra_params: Kernel parameters after ``y, cols`` (C, with a leading comma).
        cols: The row length (Python, in terms of ``forward``'s arguments).
        init_args: ``__init__`` parameters after ``self`` (with a leading comma).
        init_body: ``__init__``'s body after ``super().__init__()`` (the reference's names).
        launch_extra: Launch arguments after ``y, cols`` (Python, with a leading comma).
        helpers: Device functions ``output`` uses (C).
    """

    streams: tuple[str, ...]
    value: str
    reductions: tuple[Reduction, ...]
    output: str
    extra_params: str = ""
    cols: str = "x.shape[-1]"
    init_args: str = ""
    init_body: str = ""
    launch_extra: str = ""
    helpers: str = ""


def row_pass(p: LaunchParams, streams: tuple[str, ...], per_lane: str, after_vector: str = "") -> str:
    """A strided loop over the row's vectors; ``per_lane`` runs once per lane, with its column ``c``."""
    vt = VECTOR_TYPES[p.vector_width]
    loads = "".join(f"        const {vt} {s}_s = {s}_v[i];\n" for s in streams)
    column = re.search(r"\bc\b", per_lane) is not None  # declared only where used: no unused-variable warnings
    lanes = "".join(
        "        {" + (f" const long long c = i * {p.vector_width} + {k};" if column else "") + "\n"
        + per_lane.format(lane=lane, **{s: f"{s}_s{lane}" for s in streams}) + "        }\n"
        for k, lane in enumerate(LANES[p.vector_width])
    )
    return (
        f"  for (long long base = threadIdx.x; base < nv; base += {p.block_size * p.items_per_thread}) {{\n"
        f"#pragma unroll\n"
        f"    for (int k = 0; k < {p.items_per_thread}; ++k) {{\n"
        f"      const long long i = base + (long long)k * {p.block_size};\n"
        f"      if (i < nv) {{\n{loads}{lanes}{after_vector}      }}\n    }}\n  }}\n"
    )


@dataclass(frozen=True)
class RowFamily(OnLaunchGrid):
    """A row-wise task's solution as a function of the launch configuration (one block per row).

    Attributes:
        task_id: The bundled task it solves.
        name: The kernel's (and the ``.cu`` file's) name.
        op: What it computes.
    """

    task_id: str
    name: str
    op: RowOp

    def files(self, params: LaunchParams) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        return {"model_new.py": self._model(params), f"kernels/{self.name}.cu": self.kernel_source(params)}

    def kernel_source(self, p: LaunchParams) -> str:
        """The ``.cu`` source for ``p``."""
        op, vt = self.op, VECTOR_TYPES[p.vector_width]
        inputs = ", ".join(f"const float* __restrict__ {s}" for s in op.streams)
        views = "".join(f"  const {vt}* {s}_v = reinterpret_cast<const {vt}*>({s} + row * cols);\n"
                        for s in op.streams)
        value = "          const float v = " + op.value + ";\n"
        passes = ""
        for r in op.reductions:
            passes += f"  float {r.var} = {r.identity};\n"
            passes += row_pass(p, op.streams, value + f"          {r.update}\n")
            passes += (f"  {r.var} = block_reduce<{r.combine.capitalize()}>({r.var}, {r.identity}, scratch);\n"
                       + (f"  {r.finish}\n" if r.finish else ""))
        write = row_pass(p, op.streams, value + f"          out{{lane}} = {op.output};\n",
                           after_vector="        yv[i] = out;\n")
        write = write.replace("      if (i < nv) {\n", f"      if (i < nv) {{\n        {vt} out;\n", 1)
        return (
            f"// {self.task_id} in the raw format: one block of {p.block_size} threads per row, "
            f"{p.items_per_thread} vector(s) of {p.vector_width} float(s) per thread per pass.\n"
            f"// Rendered by cudagym.integrations.reduction_families; every configuration computes the same "
            f"values.\n{BLOCK_REDUCE.strip()}\n{op.helpers.strip()}\n\n"
            f'extern "C" __global__ void __launch_bounds__({p.block_size}) '
            f"{self.name}({inputs}, float* __restrict__ y, long long cols{op.extra_params}) {{\n"
            f"  __shared__ float scratch[32];\n  const long long row = blockIdx.x;\n"
            f"  const long long nv = cols / {p.vector_width};  // whole vectors: ModelNew checks\n{views}"
            f"  {vt}* yv = reinterpret_cast<{vt}*>(y + row * cols);\n{passes}{write}}}\n"
        )

    def _model(self, p: LaunchParams) -> str:
        op = self.op
        first = op.streams[0]
        signature = ", ".join(f"{s}: torch.Tensor" for s in op.streams)
        inputs = "".join(f"        {s} = {s}.contiguous()\n" for s in op.streams)
        body = f"\n        {op.init_body}" if op.init_body else ""
        args = ", ".join(op.streams) + f", y, cols{op.launch_extra}"
        return (
            "import torch\nimport torch.nn as nn\n\nfrom cudagym import runtime\n\n"
            f'kernels = runtime.load("kernels/{self.name}.cu")\n'
            f"BLOCK, VECTOR = {p.block_size}, {p.vector_width}  # threads per row; floats per load\n\n\n"
            "class ModelNew(nn.Module):\n"
            f'    """{self.task_id}: one block per row, {p.block_size} threads x {p.items_per_thread} x '
            f'{p.vector_width} floats per pass."""\n\n'
            f"    def __init__(self{op.init_args}):\n        super().__init__(){body}\n\n"
            f"    def forward(self, {signature}) -> torch.Tensor:\n{inputs}"
            f"        y = torch.empty_like({first})\n        cols = {op.cols}\n"
            "        if cols % VECTOR:\n"
            '            raise ValueError(f"rows of {cols} floats are not whole vectors of {VECTOR}")\n'
            f"        kernels.{self.name}(grid=(max({first}.numel() // cols, 1),), block=(BLOCK,), args=({args}))\n"
            "        return y\n"
        )


@dataclass(frozen=True)
class ChannelFamily(OnLaunchGrid):
    """Channel RMS norm over NCHW: each thread takes vectors of pixels and loops over the channels.

    Attributes:
        task_id: The bundled task it solves.
        name: The kernel's (and the ``.cu`` file's) name.
    """

    task_id: str = "bundled/L1/04_RMSNormChannels"
    name: str = "rms_norm_channels"

    def files(self, params: LaunchParams) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        return {"model_new.py": self._model(params), f"kernels/{self.name}.cu": self.kernel_source(params)}

    def kernel_source(self, p: LaunchParams) -> str:
        """The ``.cu`` source for ``p``."""
        vt, lanes = VECTOR_TYPES[p.vector_width], LANES[p.vector_width]
        zero = "0.0f" if p.vector_width == 1 else f"make_{vt}(" + ", ".join(["0.0f"] * p.vector_width) + ")"
        square = "".join(f"      s{ln} += a{ln} * a{ln};\n" for ln in lanes)
        scale = "".join(f"      o{ln} = a{ln} / sqrtf(s{ln} / (float)channels + eps);\n" for ln in lanes)
        return (
            f"// {self.task_id} in the raw format: {p.block_size} threads per block, {p.items_per_thread} "
            f"vector(s) of {p.vector_width} pixel(s) per thread, channels looped twice.\n"
            "// Rendered by cudagym.integrations.reduction_families; every configuration computes the same values.\n"
            f'extern "C" __global__ void __launch_bounds__({p.block_size}) {self.name}('
            "const float* __restrict__ x, float* __restrict__ y, long long images, long long channels, "
            "long long pixels, float eps) {\n"
            f"  const long long per_image = pixels / {p.vector_width};  // whole vectors: ModelNew checks\n"
            "  const long long nv = images * per_image;\n"
            f"  const {vt}* xv = reinterpret_cast<const {vt}*>(x);\n  {vt}* yv = reinterpret_cast<{vt}*>(y);\n"
            f"  const long long first = (long long)blockIdx.x * {p.block_size * p.items_per_thread} + threadIdx.x;\n"
            "#pragma unroll\n"
            f"  for (int k = 0; k < {p.items_per_thread}; ++k) {{\n"
            f"    const long long i = first + (long long)k * {p.block_size};\n"
            "    if (i >= nv) break;\n"
            "    const long long start = (i / per_image) * channels * per_image + i % per_image;\n"
            f"    {vt} s = {zero};\n"
            "    for (long long c = 0; c < channels; ++c) {  // sum of squares down the channels, in order\n"
            f"      const {vt} a = xv[start + c * per_image];\n{square}    }}\n"
            "    for (long long c = 0; c < channels; ++c) {\n"
            f"      const {vt} a = xv[start + c * per_image];\n      {vt} o;\n{scale}"
            "      yv[start + c * per_image] = o;\n    }\n  }\n}\n"
        )

    def _model(self, p: LaunchParams) -> str:
        return (
            "import torch\nimport torch.nn as nn\n\nfrom cudagym import runtime\n\n"
            f'kernels = runtime.load("kernels/{self.name}.cu")\n'
            f"BLOCK, VECTOR, PER_BLOCK = {p.block_size}, {p.vector_width}, {p.per_block}  "
            "# threads; pixels per load; pixels per block\n\n\n"
            "class ModelNew(nn.Module):\n"
            f'    """{self.task_id}: {p.block_size} threads x {p.items_per_thread} x {p.vector_width} pixels."""\n\n'
            "    def __init__(self, num_features: int, eps: float = 1e-5):\n        super().__init__()\n"
            "        self.num_features = num_features\n        self.eps = eps\n\n"
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        x = x.contiguous()\n"
            "        y = torch.empty_like(x)\n"
            "        images, channels, pixels = x.shape[0], x.shape[1], x[0, 0].numel()\n"
            "        if pixels % VECTOR:\n"
            '            raise ValueError(f"{pixels} pixels per channel are not whole vectors of {VECTOR}")\n'
            "        grid = max((images * pixels + PER_BLOCK - 1) // PER_BLOCK, 1)\n"
            f"        kernels.{self.name}(grid=(grid,), block=(BLOCK,), "
            "args=(x, y, images, channels, pixels, float(self.eps)))\n"
            "        return y\n"
        )


_MAX = Reduction("m", "NEG_INF", "max", "m = fmaxf(m, v);")
_SUM_EXP = Reduction("s", "0.0f", "sum", "s += expf(v - m);")
_MEAN = Reduction("s", "0.0f", "sum", "s += v;", "const float mean = s / (float)cols;")
_VARIANCE = Reduction("q", "0.0f", "sum", "q += (v - mean) * (v - mean);",  # biased, as torch's norms
                      "const float rstd = rsqrtf(q / (float)cols + eps);")
_AFFINE = ", const float* __restrict__ w, const float* __restrict__ b, float eps"
_LN_LAUNCH = ", self.ln.weight, self.ln.bias, float(self.ln.eps)"
_LN_INIT = "self.ln = nn.LayerNorm(normalized_shape=normalized_shape)  # parameter holder (the reference's names)"

ROW_FAMILIES: tuple[RowFamily | ChannelFamily, ...] = (
    ChannelFamily(),
    RowFamily("bundled/L1/05_Softmax", "softmax", RowOp(("x",), "{x}", (_MAX, _SUM_EXP), "expf(v - m) / s")),
    RowFamily("bundled/L1/06_LogSoftmax", "log_softmax", RowOp(
        ("x",), "{x}", (_MAX, Reduction("s", "0.0f", "sum", "s += expf(v - m);", "const float log_s = logf(s);")),
        "v - m - log_s")),
    RowFamily("bundled/L1/07_LayerNormLarge", "layer_norm_large", RowOp(
        ("x",), "{x}", (_MEAN, _VARIANCE), "(v - mean) * rstd * w[c] + b[c]", _AFFINE, "x[0].numel()",
        ", normalized_shape: tuple", _LN_INIT, _LN_LAUNCH)),
    RowFamily("bundled/L2/03_ResidualAddLayerNorm", "add_layer_norm", RowOp(
        ("x", "residual"), "{x} + {residual}", (_MEAN, _VARIANCE), "(v - mean) * rstd * w[c] + b[c]", _AFFINE,
        "x.shape[-1]", ", hidden: int", "self.ln = nn.LayerNorm(hidden)  # parameter holder (the reference's names)",
        _LN_LAUNCH)),
    RowFamily("bundled/L2/04_ScaleCausalMaskSoftmax", "scale_mask_softmax", RowOp(
        ("att",), "(mask[(row % cols) * max_len + c] != 0.0f ? {att} * scale : NEG_INF)", (_MAX, _SUM_EXP),
        "expf(v - m) / s", ", const float* __restrict__ mask, long long max_len, float scale", "att.shape[-1]",
        ", scale: float, max_seq_len: int",
        'self.scale = scale\n        self.register_buffer("mask", torch.tril(torch.ones(max_seq_len, max_seq_len))'
        ".view(1, 1, max_seq_len, max_seq_len))",
        ", self.mask, self.mask.shape[-1], float(self.scale)")),
    RowFamily("bundled/L2/07_GroupNormSiLU", "group_norm_silu", RowOp(  # a group's channels are one contiguous row
        ("x",), "{x}", (_MEAN, _VARIANCE), "silu((v - mean) * rstd * w[channel(row, c, groups, cpg, hw)] "
        "+ b[channel(row, c, groups, cpg, hw)])",
        ", const float* __restrict__ w, const float* __restrict__ b, long long groups, long long cpg, "
        "long long hw, float eps", "x[0].numel() // self.gn.num_groups", ", groups: int, channels: int",
        "self.gn = nn.GroupNorm(groups, channels)  # parameter holder (the reference's names)",
        ", self.gn.weight, self.gn.bias, self.gn.num_groups, x.shape[1] // self.gn.num_groups, x[0, 0].numel(), "
        "float(self.gn.eps)",
        """
__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }
__device__ __forceinline__ long long channel(long long row, long long c, long long groups, long long cpg,
                                             long long hw) {
  return (row % groups) * cpg + c / hw;  // row = image * groups + group; c runs over the group's channels
}""")),
)
