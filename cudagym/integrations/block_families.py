"""Kernel families for three bundled L3 blocks: a fused tiny MLP and two multi-kernel residual blocks.

- :class:`TinyMLPFamily` (``L3/01_TinyMLP``): one kernel keeps a tile of ``rows_per_block`` rows in shared
  memory through all four layers, with every weight (stored transposed) and bias resident in shared memory;
  ``threads`` threads compute each layer's outputs of the tile, and the input tile is read with
  ``vector_width``-float loads. Each output starts from its bias and adds the 32 products in order.
- :class:`SeparableBlockFamily` (``L3/03_DWSeparableResidualBlock``): the depthwise 3x3 + BN + ReLU stencil of
  :mod:`cudagym.integrations.stencil_families`, then the 1x1 convolution as the tiled GEMM of
  :mod:`cudagym.integrations.matmul_families` with BN and the residual add in its epilogue. Its four knobs are
  the stencil's tile height and outputs per thread and the GEMM's tile width and outputs per thread (the
  stencil's tile width is 32, the GEMM's tile 64 rows by a K slice of 16).
- :class:`SqueezeExciteFamily` (``L3/04_SEResidualBlock``): a channel-mean kernel (one block per (image,
  channel) row, the launch grid's threads, items and vectors), one block per image for the squeeze MLP
  (fc1, ReLU, fc2, sigmoid), and the excite pass ``relu(x * gate + identity)`` as an elementwise kernel on the
  same launch grid (:data:`~cudagym.integrations.launch_params.LAUNCH_GRID`).

``L3/02_CausalAttentionHead`` is a single flash-style kernel: :mod:`cudagym.integrations.attention_families`.
"""

from __future__ import annotations

from dataclasses import dataclass

from cudagym.integrations.launch_params import (
    LANES,
    VECTOR_TYPES,
    VECTOR_WIDTHS,
    Knob,
    LaunchParams,
    OnLaunchGrid,
    ParamSpace,
    check_knobs,
)
from cudagym.integrations.matmul_families import GemmFamily, GemmOp, TileParams
from cudagym.integrations.reduction_families import BLOCK_REDUCE, row_pass
from cudagym.integrations.stencil_families import DepthwiseFamily, StencilParams

_HEADER = "import torch\nimport torch.nn as nn\n\nfrom cudagym import runtime\n\n"


@dataclass(frozen=True)
class MLPParams:
    """One configuration of the fused tiny MLP.

    Attributes:
        rows_per_block: Rows of the batch one block carries through the four layers.
        threads: Threads per block.
        vector_width: Floats per load of the input tile.
    """

    rows_per_block: int = 64
    threads: int = 256
    vector_width: int = 4

    def __post_init__(self) -> None:
        check_knobs(self, MLP_SPACE)


MLP_SPACE: ParamSpace[MLPParams] = ParamSpace(MLPParams, (
    Knob("rows_per_block", (32, 64, 128)), Knob("threads", (64, 128, 256, 512)), Knob("vector_width", VECTOR_WIDTHS),
))


def _mlp_layer(p: MLPParams, w: str, b: str, src: str, dst: str, outs: int, relu: bool) -> str:
    """One layer over the tile: ``dst[r][o] = b[o] + sum_k src[r][k] * w[k][o]`` (then ReLU)."""
    value = "fmaxf(acc, 0.0f)" if relu else "acc"
    store = f"{dst}[r][o] = {value};" if dst != "y" else f"if (row0 + r < rows) y[(row0 + r) * {outs} + o] = acc;"
    return (
        f"  for (int idx = threadIdx.x; idx < {p.rows_per_block * outs}; idx += {p.threads}) {{\n"
        f"    const int r = idx / {outs}, o = idx % {outs};  // a warp: consecutive outputs of one row\n"
        f"    float acc = {b}[o];\n"
        f"#pragma unroll\n    for (int k = 0; k < 32; ++k) acc = fmaf({src}[r][k], {w}[k][o], acc);\n"
        f"    {store}\n  }}\n  __syncthreads();\n"
    )


@dataclass(frozen=True)
class TinyMLPFamily:
    """``L3/01_TinyMLP`` (32-32-32-32-16 with ReLU) as one fused kernel.

    Attributes:
        task_id: The bundled task it solves.
        name: The kernel's (and the ``.cu`` file's) name.
    """

    task_id: str = "bundled/L3/01_TinyMLP"
    name: str = "tiny_mlp"

    @property
    def space(self) -> ParamSpace[MLPParams]:
        """Rows per block (32, 64, 128), threads (64..512), vector width (1, 2, 4): 36 configurations."""
        return MLP_SPACE

    @property
    def default(self) -> MLPParams:
        """64 rows per block, 256 threads, float4 loads."""
        return MLPParams()

    def files(self, params: MLPParams) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        return {"model_new.py": self._model(params), f"kernels/{self.name}.cu": self.kernel_source(params)}

    def kernel_source(self, p: MLPParams) -> str:
        """The ``.cu`` source for ``p``."""
        rows, vt, width = p.rows_per_block, VECTOR_TYPES[p.vector_width], p.vector_width
        unpack = "".join(f"      h0[r][c + {k}] = s{lane};\n" for k, lane in enumerate(LANES[width]))
        weights = "".join(
            f"  for (int idx = threadIdx.x; idx < {32 * outs}; idx += {p.threads}) "
            f"{{ const int o = idx / 32, k = idx % 32; wt{n}[k][o] = w{n}[idx]; }}\n"
            f"  for (int o = threadIdx.x; o < {outs}; o += {p.threads}) bs{n}[o] = b{n}[o];\n"
            for n, outs in ((1, 32), (2, 32), (3, 32), (4, 16))
        )
        params = ", ".join(f"const float* __restrict__ w{n}, const float* __restrict__ b{n}" for n in range(1, 5))
        return (
            f"// {self.task_id} in the raw format: {rows} rows per block of {p.threads} threads through all four "
            f"layers in shared memory, {vt} loads of the input.\n"
            "// Rendered by cudagym.integrations.block_families; every configuration computes the same values.\n"
            f'extern "C" __global__ void __launch_bounds__({p.threads}) {self.name}(const float* __restrict__ x, '
            f"float* __restrict__ y, long long rows, {params}) {{\n"
            "  __shared__ float wt1[32][32], wt2[32][32], wt3[32][32], wt4[32][16];  // transposed: wt[k][o]\n"
            "  __shared__ float bs1[32], bs2[32], bs3[32], bs4[16];\n"
            f"  __shared__ float h0[{rows}][32], h1[{rows}][32];\n"
            f"  const long long row0 = (long long)blockIdx.x * {rows};\n{weights}"
            f"  const {vt}* xv = reinterpret_cast<const {vt}*>(x + row0 * 32);\n"
            f"  for (int idx = threadIdx.x; idx < {rows * 32 // width}; idx += {p.threads}) {{\n"
            f"    const int r = idx / {32 // width}, c = (idx % {32 // width}) * {width};\n"
            f"    if (row0 + r < rows) {{\n      const {vt} s = xv[idx];\n{unpack}    }}\n  }}\n"
            "  __syncthreads();\n"
            + _mlp_layer(p, "wt1", "bs1", "h0", "h1", 32, True)
            + _mlp_layer(p, "wt2", "bs2", "h1", "h0", 32, True)
            + _mlp_layer(p, "wt3", "bs3", "h0", "h1", 32, True)
            + _mlp_layer(p, "wt4", "bs4", "h1", "y", 16, False).removesuffix("  __syncthreads();\n")
            + "}\n"
        )

    def _model(self, p: MLPParams) -> str:
        weights = ", ".join(f"self.net[{i}].weight, self.net[{i}].bias" for i in (0, 2, 4, 6))
        return (
            f'{_HEADER}kernels = runtime.load("kernels/{self.name}.cu")\n'
            f"ROWS, THREADS = {p.rows_per_block}, {p.threads}  # rows per block; threads per block\n\n\n"
            "class ModelNew(nn.Module):\n"
            f'    """{self.task_id}: {p.rows_per_block} rows per block, {p.threads} threads, '
            f'{p.vector_width}-float loads."""\n\n'
            "    def __init__(self, in_features: int, hidden: int, out_features: int):\n        super().__init__()\n"
            "        if (in_features, hidden, out_features) != (32, 32, 16):\n"
            '            raise ValueError("this kernel is written for a 32-32-32-32-16 MLP")\n'
            "        self.net = nn.Sequential(  # parameter holders (the reference's names)\n"
            "            nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),\n"
            "            nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out_features),\n        )\n\n"
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            "        x = x.contiguous()\n        rows = x.shape[0]\n"
            "        y = torch.empty(rows, 16, device=x.device, dtype=x.dtype)\n"
            f"        kernels.{self.name}(grid=(max((rows + ROWS - 1) // ROWS, 1),), block=(THREADS,), "
            f"args=(x, y, rows, {weights}))\n"
            "        return y\n"
        )


@dataclass(frozen=True)
class SeparableParams:
    """One configuration of the depthwise-separable block's two kernels.

    Attributes:
        dw_tile_h: The stencil's output rows per block (its tile is 32 columns wide).
        dw_outputs_per_thread: The stencil's outputs per thread.
        pw_tile_n: The 1x1 GEMM's output pixels per block (its tile is 64 channels, K slices of 16).
        pw_outputs_per_thread: The GEMM's accumulators per thread.
    """

    dw_tile_h: int = 8
    dw_outputs_per_thread: int = 2
    pw_tile_n: int = 64
    pw_outputs_per_thread: int = 16

    def __post_init__(self) -> None:
        check_knobs(self, SEPARABLE_SPACE)

    @property
    def stencil(self) -> StencilParams:
        """The depthwise kernel's configuration."""
        return StencilParams(32, self.dw_tile_h, self.dw_outputs_per_thread)

    @property
    def tile(self) -> TileParams:
        """The 1x1 GEMM's configuration."""
        return TileParams(64, self.pw_tile_n, 16, self.pw_outputs_per_thread)


SEPARABLE_SPACE: ParamSpace[SeparableParams] = ParamSpace(SeparableParams, (
    Knob("dw_tile_h", (4, 8, 16)), Knob("dw_outputs_per_thread", (1, 2, 4)), Knob("pw_tile_n", (32, 64, 128)),
    Knob("pw_outputs_per_thread", (16, 32, 64)),
))

_BN_RESIDUAL = ("residual[(long long)blockIdx.z * scb + row * N + col] + "
                "((v - mean[row]) * (1.0f / sqrtf(var[row] + eps)) * gamma[row] + beta[row])")
_BN_ARGS = ("const float* __restrict__ mean, const float* __restrict__ var, const float* __restrict__ gamma, "
            "const float* __restrict__ beta, float eps")


@dataclass(frozen=True)
class SeparableBlockFamily:
    """``x + BN2(pw(ReLU(BN1(dw(x)))))`` as a stencil kernel and a GEMM kernel with a BN + residual epilogue.

    Attributes:
        task_id: The bundled task it solves.
        name: The ``.cu`` file's name (its kernels are ``dw_bn_relu`` and ``pw_bn_residual``).
    """

    task_id: str = "bundled/L3/03_DWSeparableResidualBlock"
    name: str = "dw_separable_block"

    @property
    def space(self) -> ParamSpace[SeparableParams]:
        """Stencil tile height and outputs per thread, GEMM tile width and outputs per thread: 81 configurations."""
        return SEPARABLE_SPACE

    @property
    def default(self) -> SeparableParams:
        """8 x 32 stencil tiles with 2 outputs per thread; 64 x 64 GEMM tiles with 16 per thread."""
        return SeparableParams()

    def files(self, params: SeparableParams) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        return {"model_new.py": self._model(params), f"kernels/{self.name}.cu": self.kernel_source(params)}

    def kernel_source(self, p: SeparableParams) -> str:
        """Both kernels' source for ``p``."""
        dw = DepthwiseFamily(self.task_id, "dw_bn_relu", bn_relu=True)
        pw = GemmFamily(self.task_id, "pw_bn_residual", GemmOp(
            _BN_RESIDUAL, "", f", {_BN_ARGS}, const float* __restrict__ residual"))
        return dw.kernel_source(p.stencil) + "\n" + pw.kernel_source(p.tile)

    def _model(self, p: SeparableParams) -> str:
        s, t = p.stencil, p.tile
        bn = ("self.bn{n}.running_mean, self.bn{n}.running_var, self.bn{n}.weight, self.bn{n}.bias, "
              "float(self.bn{n}.eps)")
        return (
            f'{_HEADER}kernels = runtime.load("kernels/{self.name}.cu")\n'
            f"DW_TILE_W, DW_TILE_H, DW_THREADS = {s.tile_w}, {s.tile_h}, {s.threads}\n"
            f"PW_TILE_M, PW_TILE_N, PW_THREADS = {t.tile_m}, {t.tile_n}, {t.threads}\n\n\n"
            "class ModelNew(nn.Module):\n"
            f'    """{self.task_id}: stencil {s.tile_h}x{s.tile_w} x {s.outputs_per_thread}, 1x1 GEMM '
            f'{t.tile_m}x{t.tile_n} x {t.outputs_per_thread}."""\n\n'
            "    def __init__(self, channels: int):\n        super().__init__()\n"
            "        # parameter and buffer holders (the reference's names)\n"
            "        self.dw = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels, bias=False)\n"
            "        self.bn1 = nn.BatchNorm2d(channels)\n"
            "        self.pw = nn.Conv2d(channels, channels, kernel_size=1, bias=False)\n"
            "        self.bn2 = nn.BatchNorm2d(channels)\n\n"
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            "        x = x.contiguous()\n        images, channels, height, width = x.shape\n"
            "        mid = torch.empty_like(x)\n"
            "        grid = ((width + DW_TILE_W - 1) // DW_TILE_W, (height + DW_TILE_H - 1) // DW_TILE_H, "
            "images * channels)\n"
            "        kernels.dw_bn_relu(grid=grid, block=(DW_THREADS,), args=(x, self.dw.weight.contiguous(), mid, "
            f"channels, height, width, {bn.format(n=1)}))\n"
            "        w = self.pw.weight.contiguous()  # per image: W (Cout x Cin) @ mid[n] (Cin x HW)\n"
            "        M, K, N = w.shape[0], channels, height * width\n"
            "        out = torch.empty(images, M, height, width, device=x.device, dtype=x.dtype)\n"
            "        grid = ((N + PW_TILE_N - 1) // PW_TILE_N, (M + PW_TILE_M - 1) // PW_TILE_M, images)\n"
            "        kernels.pw_bn_residual(grid=grid, block=(PW_THREADS,), args=(w, mid, out, M, N, K, 0, K, 1, "
            f"K * N, N, 1, M * N, {bn.format(n=2)}, x))\n"
            "        return out\n"
        )


_EXCITE = """
__device__ __forceinline__ float op(float x, float g, float r) { return fmaxf(x * g + r, 0.0f); }"""
_SQUEEZE = """
// One block per image: hidden = relu(fc1(mean)), gate = sigmoid(fc2(hidden)); each sum starts at the bias.
extern "C" __global__ void __launch_bounds__(256) se_squeeze(const float* __restrict__ means,
    const float* __restrict__ w1, const float* __restrict__ b1, const float* __restrict__ w2,
    const float* __restrict__ b2, float* __restrict__ gates, long long channels, long long hidden) {
  __shared__ float h[256];  // hidden <= 256: ModelNew checks
  const float* m = means + (long long)blockIdx.x * channels;
  for (long long j = threadIdx.x; j < hidden; j += 256) {
    float acc = b1[j];
    for (long long c = 0; c < channels; ++c) acc = fmaf(w1[j * channels + c], m[c], acc);
    h[j] = fmaxf(acc, 0.0f);
  }
  __syncthreads();
  for (long long c = threadIdx.x; c < channels; c += 256) {
    float acc = b2[c];
    for (long long j = 0; j < hidden; ++j) acc = fmaf(w2[c * hidden + j], h[j], acc);
    gates[(long long)blockIdx.x * channels + c] = 1.0f / (1.0f + expf(-acc));
  }
}"""


@dataclass(frozen=True)
class SqueezeExciteFamily(OnLaunchGrid):
    """``relu(x * SE(x) + identity)``: channel means, the squeeze MLP, the excite pass (three kernels).

    Attributes:
        task_id: The bundled task it solves.
        name: The ``.cu`` file's name (its kernels are ``channel_mean``, ``se_squeeze`` and ``se_excite``).
    """

    task_id: str = "bundled/L3/04_SEResidualBlock"
    name: str = "se_block"

    def files(self, params: LaunchParams) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        return {"model_new.py": self._model(params), f"kernels/{self.name}.cu": self.kernel_source(params)}

    def kernel_source(self, p: LaunchParams) -> str:
        """The three kernels' source for ``p`` (the mean and excite kernels on the launch grid)."""
        from cudagym.integrations.kernel_families import KernelFamily, Layout  # it lists this module's families

        vt = VECTOR_TYPES[p.vector_width]
        mean = (
            f'extern "C" __global__ void __launch_bounds__({p.block_size}) channel_mean(const float* __restrict__ x, '
            "float* __restrict__ means, long long cols) {\n"
            "  __shared__ float scratch[32];\n  const long long row = blockIdx.x;  // image * channels + channel\n"
            f"  const long long nv = cols / {p.vector_width};  // whole vectors: ModelNew checks\n"
            f"  const {vt}* x_v = reinterpret_cast<const {vt}*>(x + row * cols);\n"
            "  float s = 0.0f;\n"
            + row_pass(p, ("x",), "          s += {x};\n")
            + "  s = block_reduce<Sum>(s, 0.0f, scratch);\n"
            "  if (threadIdx.x == 0) means[row] = s / (float)cols;\n}\n"
        )
        excite = KernelFamily(self.task_id, "se_excite", _EXCITE, Layout(
            streams=("x", "identity"), extra_params=", const float* __restrict__ g, long long hw",
            op_args="{x}, g[{j} / hw], {identity}"))
        return (f"// {self.task_id} in the raw format: mean and excite kernels with {p.block_size} threads, "
                f"{p.items_per_thread} x {vt} per thread.\n{BLOCK_REDUCE.strip()}\n\n{mean}{_SQUEEZE}\n\n"
                + excite.kernel_source(p))

    def _model(self, p: LaunchParams) -> str:
        return (
            f'{_HEADER}kernels = runtime.load("kernels/{self.name}.cu")\n'
            f"BLOCK, VECTOR, PER_BLOCK = {p.block_size}, {p.vector_width}, {p.per_block}  "
            "# threads; floats per load; floats per excite block\n\n\n"
            "class ModelNew(nn.Module):\n"
            f'    """{self.task_id}: {p.block_size} threads x {p.items_per_thread} x {p.vector_width} floats."""\n\n'
            "    def __init__(self, channels: int, reduction: int):\n        super().__init__()\n"
            "        # parameter holders (the reference's names)\n"
            "        self.fc1 = nn.Linear(channels, channels // reduction)\n"
            "        self.fc2 = nn.Linear(channels // reduction, channels)\n\n"
            "    def forward(self, x: torch.Tensor, identity: torch.Tensor) -> torch.Tensor:\n"
            "        x, identity = x.contiguous(), identity.contiguous()\n"
            "        images, channels, hw, hidden = x.shape[0], x.shape[1], x[0, 0].numel(), self.fc1.out_features\n"
            "        if hw % VECTOR or hidden > 256:\n"
            '            raise ValueError(f"expected {hw} pixels in whole vectors of {VECTOR}, at most 256 hidden")\n'
            "        means = torch.empty(images, channels, device=x.device, dtype=x.dtype)\n"
            "        gates = torch.empty_like(means)\n"
            "        kernels.channel_mean(grid=(max(images * channels, 1),), block=(BLOCK,), args=(x, means, hw))\n"
            "        kernels.se_squeeze(grid=(max(images, 1),), block=(256,), args=(means, self.fc1.weight, "
            "self.fc1.bias, self.fc2.weight, self.fc2.bias, gates, channels, hidden))\n"
            "        y = torch.empty_like(x)\n        n = x.numel()\n"
            "        kernels.se_excite(grid=(max((n + PER_BLOCK - 1) // PER_BLOCK, 1),), block=(BLOCK,), "
            "args=(x, identity, y, n, gates, hw))\n"
            "        return y\n"
        )


BLOCK_FAMILIES: tuple[TinyMLPFamily | SeparableBlockFamily | SqueezeExciteFamily, ...] = (
    TinyMLPFamily(), SeparableBlockFamily(), SqueezeExciteFamily(),
)
