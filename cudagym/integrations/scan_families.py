"""Kernel families for a row scan (``L1/08_CumSum``) and a middle-axis reduction (``L1/14_SumSquaresDim1``).

A :class:`ScanFamily` gives each row one block and walks it in chunks of ``block_size * items_per_thread *
vector_width`` floats (:data:`~cudagym.integrations.launch_params.LAUNCH_GRID`): each thread loads
``items_per_thread`` consecutive vectors, scans its ``items_per_thread * vector_width`` floats in registers,
the block scans the thread totals (a shuffle scan per warp, then a scan of the warp totals), and a running
carry joins the chunks. One read and one write of the row.

A :class:`ColumnFamily` reduces ``x[b, :, d]`` for every ``(b, d)``: a block is one warp wide across
``32 * vector_width`` columns (coalesced vector loads along the row) and ``block_size / 32`` row groups deep;
``row_splits`` blocks share one column strip's rows. Row groups are combined in shared memory in a fixed
order; with more than one split, the splits' partial sums go to a scratch buffer and a second kernel adds
them in split order, so every configuration is deterministic (no atomics).
"""

from __future__ import annotations

from dataclasses import dataclass

from cudagym.integrations.launch_params import (
    BLOCK_SIZES,
    LANES,
    VECTOR_TYPES,
    VECTOR_WIDTHS,
    Knob,
    LaunchParams,
    OnLaunchGrid,
    ParamSpace,
    check_knobs,
)

_WARP_SCAN = """
// Exclusive scan of one value per thread over the block (blockDim.x a multiple of 32, 64..1024): every
// thread gets the sum of the earlier threads' values and the block's total. `warp_total` has one slot per warp.
__device__ __forceinline__ float block_scan(float t, float* warp_total, float* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  float incl = t;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  float lane_excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) lane_excl = 0.0f;
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  float wt = lane < warps ? warp_total[lane] : 0.0f;  // every warp scans the warp totals itself
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float n = __shfl_up_sync(0xffffffffu, wt, o);
    if (lane >= o) wt += n;
  }
  const float before = __shfl_sync(0xffffffffu, wt, warp == 0 ? 0 : warp - 1);
  *total = __shfl_sync(0xffffffffu, wt, warps - 1);
  __syncthreads();  // warp_total is written again by the next chunk
  return (warp == 0 ? 0.0f : before) + lane_excl;
}"""


@dataclass(frozen=True)
class ScanFamily(OnLaunchGrid):
    """Inclusive prefix sum along rows, one block per row.

    Attributes:
        task_id: The bundled task it solves.
        name: The kernel's (and the ``.cu`` file's) name.
    """

    task_id: str = "bundled/L1/08_CumSum"
    name: str = "cumsum_rows"

    def files(self, params: LaunchParams) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        return {"model_new.py": self._model(params), f"kernels/{self.name}.cu": self.kernel_source(params)}

    def kernel_source(self, p: LaunchParams) -> str:
        """The ``.cu`` source for ``p``."""
        width, items = p.vector_width, p.items_per_thread
        vt, lanes = VECTOR_TYPES[width], LANES[width]
        per = items * width
        zero = "0.0f" if width == 1 else f"make_{vt}(" + ", ".join(["0.0f"] * width) + ")"
        unpack = "".join(f"      v[j * {width} + {k}] = s{lane};\n" for k, lane in enumerate(lanes))
        pack = "".join(f"        o{lane} = excl + v[j * {width} + {k}];\n" for k, lane in enumerate(lanes))
        return (
            f"// {self.task_id} in the raw format: one block of {p.block_size} threads per row, chunks of "
            f"{p.per_block} floats, {items} consecutive {vt}(s) per thread.\n"
            "// Rendered by cudagym.integrations.scan_families; every configuration computes the same values."
            f"\n{_WARP_SCAN.strip()}\n\n"
            f'extern "C" __global__ void __launch_bounds__({p.block_size}) {self.name}(const float* __restrict__ x, '
            "float* __restrict__ y, long long cols) {\n"
            f"  __shared__ float warp_total[{p.block_size // 32}];\n"
            f"  const long long nv = cols / {width};  // whole vectors: ModelNew checks\n"
            f"  const {vt}* xv = reinterpret_cast<const {vt}*>(x + (long long)blockIdx.x * cols);\n"
            f"  {vt}* yv = reinterpret_cast<{vt}*>(y + (long long)blockIdx.x * cols);\n"
            "  float carry = 0.0f;  // the sum of the row's earlier chunks\n"
            f"  for (long long chunk = 0; chunk < nv; chunk += {p.block_size * items}) {{  // block-uniform\n"
            f"    const long long base = chunk + (long long)threadIdx.x * {items};\n"
            f"    float v[{per}];\n"
            f"#pragma unroll\n    for (int j = 0; j < {items}; ++j) {{\n"
            f"      const {vt} s = base + j < nv ? xv[base + j] : {zero};\n{unpack}    }}\n"
            f"#pragma unroll\n    for (int e = 1; e < {per}; ++e) v[e] += v[e - 1];  // the thread's own floats\n"
            "    float total;\n"
            f"    const float excl = carry + block_scan(v[{per - 1}], warp_total, &total);\n"
            f"#pragma unroll\n    for (int j = 0; j < {items}; ++j) {{\n"
            f"      if (base + j < nv) {{\n        {vt} o;\n{pack}        yv[base + j] = o;\n      }}\n    }}\n"
            "    carry += total;\n  }\n}\n"
        )

    def _model(self, p: LaunchParams) -> str:
        return (
            "import torch\nimport torch.nn as nn\n\nfrom cudagym import runtime\n\n"
            f'kernels = runtime.load("kernels/{self.name}.cu")\n'
            f"BLOCK, VECTOR = {p.block_size}, {p.vector_width}  # threads per row; floats per load\n\n\n"
            "class ModelNew(nn.Module):\n"
            f'    """{self.task_id}: one block per row, {p.block_size} threads x {p.items_per_thread} x '
            f'{p.vector_width} floats per chunk."""\n\n'
            "    def __init__(self, dim: int):\n        super().__init__()\n        self.dim = dim\n\n"
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            "        if self.dim not in (-1, x.dim() - 1):\n"
            '            raise ValueError(f"this kernel scans the last dimension, not dim {self.dim}")\n'
            "        x = x.contiguous()\n        y = torch.empty_like(x)\n        cols = x.shape[-1]\n"
            "        if cols % VECTOR:\n"
            '            raise ValueError(f"rows of {cols} floats are not whole vectors of {VECTOR}")\n'
            f"        kernels.{self.name}(grid=(max(x.numel() // max(cols, 1), 1),), block=(BLOCK,), "
            "args=(x, y, cols))\n"
            "        return y\n"
        )


@dataclass(frozen=True)
class ColumnParams:
    """One configuration of the middle-axis reduction.

    Attributes:
        block_size: Threads per block: one warp across the columns, ``block_size / 32`` row groups.
        vector_width: Adjacent columns per thread (floats per load).
        row_splits: Blocks sharing one column strip's rows (partials added by a second kernel when above 1).
    """

    block_size: int = 256
    vector_width: int = 4
    row_splits: int = 2

    def __post_init__(self) -> None:
        check_knobs(self, COLUMN_SPACE)


COLUMN_SPACE: ParamSpace[ColumnParams] = ParamSpace(ColumnParams, (
    Knob("block_size", BLOCK_SIZES), Knob("vector_width", VECTOR_WIDTHS), Knob("row_splits", (1, 2, 4, 8)),
))

_SUM_SPLITS = """
extern "C" __global__ void __launch_bounds__(256) sum_splits(const float* __restrict__ partial,
                                                             float* __restrict__ y, long long n, long long splits) {
  const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i >= n) return;
  float s = partial[i];
  for (long long k = 1; k < splits; ++k) s += partial[k * n + i];  // in split order: deterministic
  y[i] = s;
}"""


@dataclass(frozen=True)
class ColumnFamily:
    """``y[b, d] = sum_r x[b, r, d]^2``: warp-wide column strips, row groups, optional row splits.

    Attributes:
        task_id: The bundled task it solves.
        name: The kernel's (and the ``.cu`` file's) name.
    """

    task_id: str = "bundled/L1/14_SumSquaresDim1"
    name: str = "sum_squares_dim1"

    @property
    def space(self) -> ParamSpace[ColumnParams]:
        """Block size (64..1024), vector width (1, 2, 4), row splits (1, 2, 4, 8): 60 configurations."""
        return COLUMN_SPACE

    @property
    def default(self) -> ColumnParams:
        """256 threads (8 row groups), float4, 2 row splits."""
        return ColumnParams()

    def files(self, params: ColumnParams) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        return {"model_new.py": self._model(params), f"kernels/{self.name}.cu": self.kernel_source(params)}

    def kernel_source(self, p: ColumnParams) -> str:
        """The ``.cu`` source for ``p``."""
        vt, lanes, groups = VECTOR_TYPES[p.vector_width], LANES[p.vector_width], p.block_size // 32
        zero = "0.0f" if p.vector_width == 1 else f"make_{vt}(" + ", ".join(["0.0f"] * p.vector_width) + ")"
        square = "".join(f"      acc{ln} = fmaf(a{ln}, a{ln}, acc{ln});\n" for ln in lanes)
        add = "".join(f"      s{ln} += q{ln};\n" for ln in lanes)
        return (
            f"// {self.task_id} in the raw format: {p.block_size} threads per block (32 x {p.vector_width} columns, "
            f"{groups} row groups), {p.row_splits} block(s) per column strip.\n"
            "// Rendered by cudagym.integrations.scan_families; every configuration computes the same values.\n"
            f'extern "C" __global__ void __launch_bounds__({p.block_size}) {self.name}(const float* __restrict__ x, '
            "float* __restrict__ out, long long rows, long long cols, long long rows_per_split) {\n"
            f"  __shared__ __align__(16) {vt} part[{groups}][32];\n"
            f"  const long long nv = cols / {p.vector_width};  // whole vectors: ModelNew checks\n"
            "  const int lane = threadIdx.x & 31, group = threadIdx.x >> 5;\n"
            "  const long long col = (long long)blockIdx.x * 32 + lane, b = blockIdx.y, split = blockIdx.z;\n"
            "  const long long r0 = split * rows_per_split;\n"
            "  const long long r1 = r0 + rows_per_split < rows ? r0 + rows_per_split : rows;\n"
            f"  const {vt}* xb = reinterpret_cast<const {vt}*>(x + b * rows * cols);\n"
            f"  {vt} acc = {zero};\n"
            "  if (col < nv) {\n"
            f"    for (long long r = r0 + group; r < r1; r += {groups}) {{\n"
            f"      const {vt} a = xb[r * nv + col];\n{square}    }}\n  }}\n"
            "  part[group][lane] = acc;\n  __syncthreads();\n"
            "  if (group == 0 && col < nv) {  // the row groups' partials, in group order\n"
            f"    {vt} s = part[0][lane];\n"
            f"    for (int g = 1; g < {groups}; ++g) {{\n      const {vt} q = part[g][lane];\n{add}    }}\n"
            f"    reinterpret_cast<{vt}*>(out + (split * gridDim.y + b) * cols)[col] = s;\n  }}\n}}\n"
            f"{_SUM_SPLITS}\n"
        )

    def _model(self, p: ColumnParams) -> str:
        return (
            "import torch\nimport torch.nn as nn\n\nfrom cudagym import runtime\n\n"
            f'kernels = runtime.load("kernels/{self.name}.cu")\n'
            f"BLOCK, VECTOR, SPLITS = {p.block_size}, {p.vector_width}, {p.row_splits}  "
            "# threads; columns per thread; blocks per column strip\n\n\n"
            "class ModelNew(nn.Module):\n"
            f'    """{self.task_id}: {p.block_size} threads x {p.vector_width} columns, {p.row_splits} row '
            'split(s)."""\n\n'
            "    def __init__(self):\n        super().__init__()\n\n"
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            "        x = x.contiguous()\n        batch, rows, cols = x.shape\n"
            "        if cols % VECTOR:\n"
            '            raise ValueError(f"rows of {cols} floats are not whole vectors of {VECTOR}")\n'
            "        y = torch.empty(batch, cols, device=x.device, dtype=x.dtype)\n"
            "        out = y if SPLITS == 1 else torch.empty(SPLITS, batch, cols, device=x.device, dtype=x.dtype)\n"
            "        strips = max((cols // VECTOR + 31) // 32, 1)\n"
            f"        kernels.{self.name}(grid=(strips, batch, SPLITS), block=(BLOCK,), "
            "args=(x, out, rows, cols, (rows + SPLITS - 1) // SPLITS))\n"
            "        if SPLITS > 1:\n"
            "            kernels.sum_splits(grid=(max((batch * cols + 255) // 256, 1),), block=(256,), "
            "args=(out, y, batch * cols, SPLITS))\n"
            "        return y\n"
        )


SCAN_FAMILIES: tuple[ScanFamily | ColumnFamily, ...] = (ScanFamily(), ColumnFamily())
