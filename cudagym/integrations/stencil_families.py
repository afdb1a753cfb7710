"""Kernel families for the bundled depthwise 3x3 convolutions (stride 1, padding 1), plain or with BN + ReLU.

A :class:`DepthwiseFamily` gives each block one ``tile_h x tile_w`` output tile of one (image, channel)
plane: the block stages the tile and its one-pixel halo in shared memory (zero outside the image: the
padding), each thread keeps the channel's nine weights in registers and computes ``outputs_per_thread``
outputs of one column, ``tile_h / outputs_per_thread`` rows apart, so a warp reads and writes consecutive
pixels. Threads per block: ``tile_w * tile_h / outputs_per_thread`` (16..1024). The nine products are summed
in the kernel's row-major order with ``fmaf``; the fused epilogue is the bundled solution's inference batch
norm, ``(v - mean) * (1 / sqrtf(var + eps)) * weight + bias``, then ReLU.

Families: ``L1/13_DepthwiseConv2d`` and ``L2/02_DWConvBNReLU``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cudagym.integrations.launch_params import Knob, ParamSpace, check_knobs


@dataclass(frozen=True)
class StencilParams:
    """One depthwise-convolution configuration.

    Attributes:
        tile_w: Output columns per block.
        tile_h: Output rows per block.
        outputs_per_thread: Outputs each thread computes (down one column).
    """

    tile_w: int = 32
    tile_h: int = 8
    outputs_per_thread: int = 2

    def __post_init__(self) -> None:
        check_knobs(self, STENCIL_SPACE)

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.tile_w * self.tile_h // self.outputs_per_thread


STENCIL_SPACE: ParamSpace[StencilParams] = ParamSpace(StencilParams, (
    Knob("tile_w", (16, 32, 64)), Knob("tile_h", (4, 8, 16)), Knob("outputs_per_thread", (1, 2, 4)),
))

_BN_RELU = "fmaxf((v - mean[c]) * (1.0f / sqrtf(var[c] + eps)) * gamma[c] + beta[c], 0.0f)"


@dataclass(frozen=True)
class DepthwiseFamily:
    """A depthwise 3x3 task's solution as a function of the tile configuration.

    Attributes:
        task_id: The bundled task it solves.
        name: The kernel's (and the ``.cu`` file's) name.
        bn_relu: Batch norm (inference statistics) and ReLU in the epilogue.
    """

    task_id: str
    name: str
    bn_relu: bool = False

    @property
    def space(self) -> ParamSpace[StencilParams]:
        """Tile width (16, 32, 64), height (4, 8, 16), outputs per thread (1, 2, 4): 27 configurations."""
        return STENCIL_SPACE

    @property
    def default(self) -> StencilParams:
        """32 x 8 tiles, 2 outputs per thread (128 threads)."""
        return StencilParams()

    def files(self, params: StencilParams) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        return {"model_new.py": self._model(params), f"kernels/{self.name}.cu": self.kernel_source(params)}

    def kernel_source(self, p: StencilParams) -> str:
        """The ``.cu`` source for ``p``."""
        tw, th, per = p.tile_w, p.tile_h, p.outputs_per_thread
        extra = (", const float* __restrict__ mean, const float* __restrict__ var, const float* __restrict__ gamma, "
                 "const float* __restrict__ beta, float eps") if self.bn_relu else ""
        out = _BN_RELU if self.bn_relu else "v"
        return (
            f"// {self.task_id} in the raw format: {th}x{tw} output tile per block of {p.threads} threads, "
            f"{per} output(s) per thread.\n"
            "// Rendered by cudagym.integrations.stencil_families; every configuration computes the same values.\n"
            f'extern "C" __global__ void __launch_bounds__({p.threads}) {self.name}(const float* __restrict__ x, '
            "const float* __restrict__ w, float* __restrict__ y, long long channels, long long height, "
            f"long long width{extra}) {{\n"
            f"  __shared__ float tile[{th + 2}][{tw + 2}];  // the output tile and its one-pixel halo\n"
            "  const long long plane = blockIdx.z;  // image * channels + channel\n"
            "  const long long c = plane % channels;\n"
            "  const float* xp = x + plane * height * width;\n"
            "  float* yp = y + plane * height * width;\n"
            f"  const long long x0 = (long long)blockIdx.x * {tw}, y0 = (long long)blockIdx.y * {th};\n"
            f"  for (int idx = threadIdx.x; idx < {(th + 2) * (tw + 2)}; idx += {p.threads}) {{\n"
            f"    const int r = idx / {tw + 2}, q = idx % {tw + 2};\n"
            "    const long long gy = y0 + r - 1, gx = x0 + q - 1;  // zero outside the image: padding 1\n"
            "    tile[r][q] = (gy >= 0 && gy < height && gx >= 0 && gx < width) ? xp[gy * width + gx] : 0.0f;\n"
            "  }\n"
            "  float k[9];\n#pragma unroll\n  for (int i = 0; i < 9; ++i) k[i] = w[c * 9 + i];\n"
            "  __syncthreads();\n"
            f"  const int tx = threadIdx.x % {tw}, ty = threadIdx.x / {tw};\n"
            f"#pragma unroll\n  for (int o = 0; o < {per}; ++o) {{\n"
            f"    const int r = ty + o * {th // per};\n"
            "    const long long gy = y0 + r, gx = x0 + tx;\n"
            "    if (gy < height && gx < width) {\n"
            "      float v = 0.0f;\n"
            "#pragma unroll\n      for (int dy = 0; dy < 3; ++dy)\n#pragma unroll\n"
            "        for (int dx = 0; dx < 3; ++dx) v = fmaf(tile[r + dy][tx + dx], k[dy * 3 + dx], v);\n"
            f"      yp[gy * width + gx] = {out};\n    }}\n  }}\n}}\n"
        )

    def _model(self, p: StencilParams) -> str:
        bn = "\n        self.bn = nn.BatchNorm2d(channels)" if self.bn_relu else ""
        extra = (", self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias, float(self.bn.eps)"
                 if self.bn_relu else "")
        return (
            "import torch\nimport torch.nn as nn\n\nfrom cudagym import runtime\n\n"
            f'kernels = runtime.load("kernels/{self.name}.cu")\n'
            f"TILE_W, TILE_H, THREADS = {p.tile_w}, {p.tile_h}, {p.threads}  # output tile; threads per block\n\n\n"
            "class ModelNew(nn.Module):\n"
            f'    """{self.task_id}: {p.tile_h}x{p.tile_w} tiles, {p.outputs_per_thread} output(s) per thread."""\n\n'
            "    def __init__(self, channels: int):\n        super().__init__()\n"
            "        # parameter and buffer holders (the reference's names)\n"
            "        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels, bias=False)"
            f"{bn}\n\n"
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            "        x, w = x.contiguous(), self.conv.weight.contiguous()\n"
            "        images, channels, height, width = x.shape\n"
            "        y = torch.empty_like(x)\n"
            "        grid = ((width + TILE_W - 1) // TILE_W, (height + TILE_H - 1) // TILE_H, images * channels)\n"
            f"        kernels.{self.name}(grid=grid, block=(THREADS,), "
            f"args=(x, w, y, channels, height, width{extra}))\n"
            "        return y\n"
        )


STENCIL_FAMILIES: tuple[DepthwiseFamily, ...] = (
    DepthwiseFamily("bundled/L1/13_DepthwiseConv2d", "depthwise_conv3x3"),
    DepthwiseFamily("bundled/L2/02_DWConvBNReLU", "dwconv_bn_relu", bn_relu=True),
)
