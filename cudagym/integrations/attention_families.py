"""A kernel family for ``L3/02_CausalAttentionHead``: flash-style causal attention with an online softmax.

An :class:`AttentionFamily` gives each block ``queries_per_block`` query rows of one (batch x head) sequence,
one thread per row: the thread keeps its query and its output accumulator (head size 64 each) in registers,
and the block walks the key positions in tiles of ``key_tile`` staged in shared memory (keys and values,
copied with ``vector_width``-float loads), stopping at the block's last query row: the tiles the causal mask
removes are never read, and the score matrix is never written. Per key, a thread's score is ``(q . k) *
scale``; the running maximum, the running sum of ``exp(score - max)`` and the accumulator are rescaled by
``expf(old_max - new_max)`` whenever the maximum grows, and the output is the accumulator over the sum.

The mask is the reference's lower triangle (the ``mask`` buffer is kept for its state-dict name; the kernel
applies ``key <= query`` itself) and the head size is 64 (``ModelNew`` raises otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

from cudagym.integrations.launch_params import VECTOR_TYPES, VECTOR_WIDTHS, Knob, ParamSpace, check_knobs

HEAD = 64  # the head size the kernel is written for (the bundled task's)
NEG_INF = "__int_as_float(0xff800000)"  # -infinity without math headers (NVRTC has none)


@dataclass(frozen=True)
class AttentionParams:
    """One configuration of the flash-style kernel.

    Attributes:
        queries_per_block: Query rows per block (one thread each).
        key_tile: Key positions staged in shared memory per step.
        vector_width: Floats per load when the key and value tiles are copied.
    """

    queries_per_block: int = 64
    key_tile: int = 32
    vector_width: int = 4

    def __post_init__(self) -> None:
        check_knobs(self, ATTENTION_SPACE)


ATTENTION_SPACE: ParamSpace[AttentionParams] = ParamSpace(AttentionParams, (
    Knob("queries_per_block", (32, 64, 128)), Knob("key_tile", (16, 32, 64)), Knob("vector_width", VECTOR_WIDTHS),
))


@dataclass(frozen=True)
class AttentionFamily:
    """Causal single-head attention, ``softmax(mask(q k^T * scale)) v``, as one flash-style kernel.

    Attributes:
        task_id: The bundled task it solves.
        name: The kernel's (and the ``.cu`` file's) name.
    """

    task_id: str = "bundled/L3/02_CausalAttentionHead"
    name: str = "causal_attention"

    @property
    def space(self) -> ParamSpace[AttentionParams]:
        """Queries per block (32, 64, 128), key tile (16, 32, 64), vector width (1, 2, 4): 27 configurations."""
        return ATTENTION_SPACE

    @property
    def default(self) -> AttentionParams:
        """64 queries per block, 32-key tiles, float4 copies."""
        return AttentionParams()

    def files(self, params: AttentionParams) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        return {"model_new.py": self._model(params), f"kernels/{self.name}.cu": self.kernel_source(params)}

    def kernel_source(self, p: AttentionParams) -> str:
        """The ``.cu`` source for ``p``."""
        bq, bk, vt, width = p.queries_per_block, p.key_tile, VECTOR_TYPES[p.vector_width], p.vector_width
        return (
            f"// {self.task_id} in the raw format: {bq} query rows per block (a thread each), keys and values in "
            f"tiles of {bk} through shared memory ({vt} copies), online softmax.\n"
            "// Rendered by cudagym.integrations.attention_families; every configuration computes the same values.\n"
            f'extern "C" __global__ void __launch_bounds__({bq}) {self.name}(const float* __restrict__ q, '
            "const float* __restrict__ k, const float* __restrict__ v, float* __restrict__ y, long long seq, "
            "float scale) {\n"
            f"  __shared__ __align__(16) float ks[{bk}][{HEAD}];  // 16-byte aligned rows: vector stores\n"
            f"  __shared__ __align__(16) float vs[{bk}][{HEAD}];\n"
            f"  const long long head = blockIdx.y, q0 = (long long)blockIdx.x * {bq}, i = q0 + threadIdx.x;\n"
            f"  const long long base = head * seq * {HEAD};\n"
            "  const bool active = i < seq;  // the last block's extra threads still copy tiles and meet barriers\n"
            f"  float qr[{HEAD}], acc[{HEAD}];\n"
            f"#pragma unroll\n  for (int d = 0; d < {HEAD}; ++d) {{\n"
            f"    qr[d] = active ? q[base + i * {HEAD} + d] : 0.0f;\n    acc[d] = 0.0f;\n  }}\n"
            f"  float m = {NEG_INF}, l = 0.0f;  // running max and running sum of exp(score - m)\n"
            f"  const long long last = (q0 + {bq} < seq ? q0 + {bq} : seq) - 1;  // the block's last query row\n"
            f"  for (long long k0 = 0; k0 <= last; k0 += {bk}) {{  // causal: no tile past the last row is read\n"
            f"    for (int idx = threadIdx.x; idx < {bk * HEAD // width}; idx += {bq}) {{\n"
            f"      const int r = idx / {HEAD // width}, c = (idx % {HEAD // width}) * {width};\n"
            f"      const bool in = k0 + r < seq;\n"
            f"      const {vt} kz = in ? *reinterpret_cast<const {vt}*>(k + base + (k0 + r) * {HEAD} + c) : "
            f"{_zero(width)};\n"
            f"      const {vt} vz = in ? *reinterpret_cast<const {vt}*>(v + base + (k0 + r) * {HEAD} + c) : "
            f"{_zero(width)};\n"
            f"      *reinterpret_cast<{vt}*>(&ks[r][c]) = kz;\n      *reinterpret_cast<{vt}*>(&vs[r][c]) = vz;\n"
            "    }\n    __syncthreads();\n"
            f"    for (int j = 0; active && j < {bk} && k0 + j <= i; ++j) {{  // keys at or before this row\n"
            "      float s = 0.0f;\n"
            f"#pragma unroll\n      for (int d = 0; d < {HEAD}; ++d) s = fmaf(qr[d], ks[j][d], s);\n"
            "      s *= scale;  // (q . k) * scale, the reference's order\n"
            "      if (s > m) {  // a new maximum: rescale what was summed so far\n"
            "        const float corr = expf(m - s);\n        l *= corr;\n"
            f"#pragma unroll\n        for (int d = 0; d < {HEAD}; ++d) acc[d] *= corr;\n        m = s;\n      }}\n"
            "      const float e = expf(s - m);\n      l += e;\n"
            f"#pragma unroll\n      for (int d = 0; d < {HEAD}; ++d) acc[d] = fmaf(e, vs[j][d], acc[d]);\n"
            "    }\n    __syncthreads();  // the next tile overwrites ks and vs\n  }\n"
            f"  if (active) {{\n#pragma unroll\n    for (int d = 0; d < {HEAD}; ++d) "
            f"y[base + i * {HEAD} + d] = acc[d] / l;\n  }}\n}}\n"
        )

    def _model(self, p: AttentionParams) -> str:
        return (
            "import math\n\nimport torch\nimport torch.nn as nn\n\nfrom cudagym import runtime\n\n"
            f'kernels = runtime.load("kernels/{self.name}.cu")\n'
            f"QUERIES = {p.queries_per_block}  # query rows (threads) per block\n\n\n"
            "class ModelNew(nn.Module):\n"
            f'    """{self.task_id}: {p.queries_per_block} queries per block, {p.key_tile}-key tiles, '
            f'{p.vector_width}-float copies."""\n\n'
            "    def __init__(self, head_dim: int, max_seq_len: int):\n        super().__init__()\n"
            f"        if head_dim != {HEAD}:\n"
            f'            raise ValueError(f"this kernel is written for a head size of {HEAD}, got {{head_dim}}")\n'
            "        self.scale = 1.0 / math.sqrt(head_dim)\n"
            "        # the reference's causal mask, kept for its state-dict name; the kernel applies key <= query\n"
            "        causal = torch.tril(torch.ones(max_seq_len, max_seq_len))\n"
            '        self.register_buffer("mask", causal.view(1, max_seq_len, max_seq_len))\n\n'
            "    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:\n"
            "        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()\n"
            "        heads, seq = q.shape[0], q.shape[1]\n"
            "        y = torch.empty_like(q)\n"
            "        grid = (max((seq + QUERIES - 1) // QUERIES, 1), max(heads, 1))\n"
            f"        kernels.{self.name}(grid=grid, block=(QUERIES,), args=(q, k, v, y, seq, float(self.scale)))\n"
            "        return y\n"
        )


def _zero(width: int) -> str:
    """A zero of ``width`` floats (C)."""
    return "0.0f" if width == 1 else f"make_{VECTOR_TYPES[width]}(" + ", ".join(["0.0f"] * width) + ")"


ATTENTION_FAMILIES: tuple[AttentionFamily, ...] = (AttentionFamily(),)
