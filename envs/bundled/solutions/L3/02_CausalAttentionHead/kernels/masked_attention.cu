// y = softmax(where(mask == 0, -inf, q k^T * scale)) v for q, k, v of shape (B, T, 64), fp32.
//
// Why it beats eager: eager writes the B x T x T score matrix (512 MB at B=32, T=2048), then scales,
// masks and softmaxes it (three more read+write passes) and reads it again in the second bmm, and it
// computes the masked upper half too. Here:
//   1. tile_classes: one pass over the T x T mask marks each 64x64 tile empty (all zero), full (no zero)
//      or mixed; any mask works, a causal one just has many empty tiles;
//   2. attention: one 256-thread block per (64 queries, sequence) keeps Q, a K tile (both transposed),
//      a V tile and the probability tile in shared memory; each thread owns a 4x4 block of scores and a
//      4x4 block of the output; the softmax is computed online (running max and sum per row, rescaling the
//      accumulator), so the score matrix never leaves the chip. Empty tiles are skipped (half the work for
//      a causal mask); only mixed tiles read mask values. Plain fp32 FMA throughout (no TF32).
#include <cuda_runtime.h>

#include <math.h>

namespace {

constexpr int kD = 64;        // head size
constexpr int kTile = 64;     // queries per block and keys per tile
constexpr int kThreads = 256; // 16 x 16: thread (tx, ty) owns rows 4ty..4ty+3, columns 4tx..4tx+3
constexpr int kPad = 68;      // shared row stride (floats), keeps float4 alignment
constexpr int kSmemFloats = 4 * kTile * kPad;  // QT, KT, V, PT

// grid (T/64, T/64): classes[qt * nt + kt] = 0 empty, 1 full, 2 mixed.
__global__ void __launch_bounds__(256) tile_classes_kernel(const float* __restrict__ mask, int mask_stride,
                                                           int* __restrict__ classes) {
  __shared__ int any_zero, any_nonzero;
  if (threadIdx.x == 0) {
    any_zero = 0;
    any_nonzero = 0;
  }
  __syncthreads();
  const int qt = blockIdx.y, kt = blockIdx.x;
  int zero = 0, nonzero = 0;
  for (int i = threadIdx.x; i < kTile * kTile; i += 256) {
    const int r = i / kTile, c = i % kTile;
    const float m = mask[(long long)(qt * kTile + r) * mask_stride + kt * kTile + c];
    if (m == 0.0f) zero = 1; else nonzero = 1;
  }
  if (zero) atomicMax(&any_zero, 1);
  if (nonzero) atomicMax(&any_nonzero, 1);
  __syncthreads();
  if (threadIdx.x == 0) classes[qt * gridDim.x + kt] = !any_nonzero ? 0 : (any_zero ? 2 : 1);
}

__device__ __forceinline__ float max16(float v) {  // over the 16 lanes of a half-warp (one score row)
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float sum16(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// grid (T/64, B); dynamic shared memory kSmemFloats floats.
__global__ void __launch_bounds__(kThreads) attention_kernel(const float* __restrict__ Q,
                                                             const float* __restrict__ K,
                                                             const float* __restrict__ V,
                                                             const float* __restrict__ mask, int mask_stride,
                                                             const int* __restrict__ classes,
                                                             float* __restrict__ Y, int T, float scale) {
  extern __shared__ __align__(16) float smem[];
  float(*QT)[kPad] = reinterpret_cast<float(*)[kPad]>(smem);                      // QT[d][i]
  float(*KT)[kPad] = reinterpret_cast<float(*)[kPad]>(smem + kTile * kPad);       // KT[d][j]
  float(*Vs)[kPad] = reinterpret_cast<float(*)[kPad]>(smem + 2 * kTile * kPad);   // Vs[j][d]
  float(*PT)[kPad] = reinterpret_cast<float(*)[kPad]>(smem + 3 * kTile * kPad);   // PT[j][i]

  const int nt = T / kTile;
  const int qt = nt - 1 - blockIdx.x;  // longest rows first (causal masks give later tiles more work)
  const int b = blockIdx.y;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const long long seq_off = (long long)b * T * kD;
  const int q0 = qt * kTile;

  // Q tile, transposed
#pragma unroll
  for (int it = 0; it < kTile * kD / 4 / kThreads; ++it) {
    const int idx = tid + it * kThreads;
    const int i = idx / (kD / 4), d4 = idx % (kD / 4);
    const float4 v = *reinterpret_cast<const float4*>(Q + seq_off + (long long)(q0 + i) * kD + 4 * d4);
    QT[4 * d4 + 0][i] = v.x;
    QT[4 * d4 + 1][i] = v.y;
    QT[4 * d4 + 2][i] = v.z;
    QT[4 * d4 + 3][i] = v.w;
  }

  float o[4][4], m[4], l[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; ++c) o[r][c] = 0.0f;
  }

  for (int kt = 0; kt < nt; ++kt) {
    const int cls = classes[qt * nt + kt];
    if (cls == 0) continue;  // every score in the tile is masked: contributes nothing
    const int k0 = kt * kTile;
    __syncthreads();  // the previous tile's KT, Vs and PT are no longer read (first pass: QT is written)
#pragma unroll
    for (int it = 0; it < kTile * kD / 4 / kThreads; ++it) {
      const int idx = tid + it * kThreads;
      const int j = idx / (kD / 4), d4 = idx % (kD / 4);
      const long long off = seq_off + (long long)(k0 + j) * kD + 4 * d4;
      const float4 kv = *reinterpret_cast<const float4*>(K + off);
      KT[4 * d4 + 0][j] = kv.x;
      KT[4 * d4 + 1][j] = kv.y;
      KT[4 * d4 + 2][j] = kv.z;
      KT[4 * d4 + 3][j] = kv.w;
      *reinterpret_cast<float4*>(&Vs[j][4 * d4]) = *reinterpret_cast<const float4*>(V + off);
    }
    __syncthreads();

    // scores for rows 4ty.., columns 4tx..
    float s[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[r][c] = 0.0f;
#pragma unroll 16
    for (int d = 0; d < kD; ++d) {
      const float4 a = *reinterpret_cast<const float4*>(&QT[d][4 * ty]);
      const float4 kk = *reinterpret_cast<const float4*>(&KT[d][4 * tx]);
      const float av[4] = {a.x, a.y, a.z, a.w}, kv[4] = {kk.x, kk.y, kk.z, kk.w};
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[r][c] = fmaf(av[r], kv[c], s[r][c]);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float v = s[r][c] * scale;  // (q . k) * scale, the reference's order
        if (cls == 2 && mask[(long long)(q0 + 4 * ty + r) * mask_stride + k0 + 4 * tx + c] == 0.0f) v = -INFINITY;
        s[r][c] = v;
      }
    }

    // online softmax: new running max, rescale the old sum and accumulator, exponentiate this tile
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float tile_max = max16(fmaxf(fmaxf(s[r][0], s[r][1]), fmaxf(s[r][2], s[r][3])));
      const float m_new = fmaxf(m[r], tile_max);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing kept yet stays at zero
      const float alpha = expf(m[r] - m_use);                  // exp(-inf) = 0 on the first kept tile
      float rs = 0.0f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        s[r][c] = expf(s[r][c] - m_use);
        rs += s[r][c];
      }
      l[r] = l[r] * alpha + sum16(rs);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < 4; ++c) o[r][c] *= alpha;
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      *reinterpret_cast<float4*>(&PT[4 * tx + c][4 * ty]) = make_float4(s[0][c], s[1][c], s[2][c], s[3][c]);
    }
    __syncthreads();

    // o += P V for rows 4ty.., head dims 4tx..
#pragma unroll 16
    for (int j = 0; j < kTile; ++j) {
      const float4 p = *reinterpret_cast<const float4*>(&PT[j][4 * ty]);
      const float4 vv = *reinterpret_cast<const float4*>(&Vs[j][4 * tx]);
      const float pv[4] = {p.x, p.y, p.z, p.w}, vd[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) o[r][c] = fmaf(pv[r], vd[c], o[r][c]);
    }
  }

#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float inv = 1.0f / l[r];  // a fully masked row gives 0 * inf = nan, as the reference does
    *reinterpret_cast<float4*>(Y + seq_off + (long long)(q0 + 4 * ty + r) * kD + 4 * tx) =
        make_float4(o[r][0] * inv, o[r][1] * inv, o[r][2] * inv, o[r][3] * inv);
  }
}

}  // namespace

// q, k, v, y: (B, T, 64) contiguous, 16-byte aligned; mask: at least T rows of mask_stride floats;
// classes: (T/64)^2 ints of workspace. T % 64 == 0, B <= 65535. Returns the cudaError_t.
extern "C" int launch_masked_attention(const float* q, const float* k, const float* v, const float* mask,
                                       int mask_stride, int* classes, float* y, int B, int T, float scale,
                                       cudaStream_t stream) {
  if (B <= 0 || T <= 0) return 0;
  if (T % kTile != 0 || B > 65535 || T / kTile > 65535) return (int)cudaErrorInvalidValue;
  const int nt = T / kTile;
  tile_classes_kernel<<<dim3(nt, nt), 256, 0, stream>>>(mask, mask_stride, classes);
  const size_t smem = kSmemFloats * sizeof(float);
  cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  attention_kernel<<<dim3(nt, B), kThreads, smem, stream>>>(q, k, v, mask, mask_stride, classes, y, T, scale);
  return (int)cudaGetLastError();
}
