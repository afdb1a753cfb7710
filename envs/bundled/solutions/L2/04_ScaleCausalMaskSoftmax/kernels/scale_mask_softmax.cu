// y = softmax(where(mask[i, j] == 0, -inf, att[..., i, j] * scale), dim=-1) for att of shape (..., T, T).
//
// Why it beats eager: eager runs mul, the mask comparison, masked_fill and softmax, reading and writing the
// 256 MB score tensor three times. Here one warp owns a row: it reads the mask row (16 MB in all, it stays
// in L2), loads only the scores whose mask quad has a non-zero entry (for a causal mask, the lower half),
// computes max and sum with warp shuffles, and writes the row once (masked entries as exact zeros).
// Traffic: ~0.5 read + 1 write instead of 3 + 3. Any mask works; a causal one is just cheaper.
#include <cuda_runtime.h>

#include <math.h>

namespace {

constexpr int kThreads = 256;  // 8 rows per block

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// VPT float4 per lane; T % 4 == 0, T <= 128 * VPT. mask rows have mask_stride floats (mask_stride % 4 == 0).
template <int VPT>
__global__ void __launch_bounds__(kThreads) scale_mask_softmax_kernel(const float* __restrict__ att,
                                                                      const float* __restrict__ mask,
                                                                      float* __restrict__ y, long long rows, int T,
                                                                      int mask_stride, float scale) {
  const long long row = ((long long)blockIdx.x * kThreads + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // the whole warp leaves together
  const int T4 = T / 4;
  const int i = (int)(row % T);  // query position: selects the mask row
  const float4* ar = reinterpret_cast<const float4*>(att + row * T);
  const float4* mr = reinterpret_cast<const float4*>(mask + (long long)i * mask_stride);
  float4 v[VPT];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = lane + 32 * k;
    v[k] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    if (j < T4) {
      const float4 mk = mr[j];
      if (mk.x != 0.0f || mk.y != 0.0f || mk.z != 0.0f || mk.w != 0.0f) {  // skip fully masked quads
        const float4 a = ar[j];
        if (mk.x != 0.0f) v[k].x = a.x * scale;
        if (mk.y != 0.0f) v[k].y = a.y * scale;
        if (mk.z != 0.0f) v[k].z = a.z * scale;
        if (mk.w != 0.0f) v[k].w = a.w * scale;
      }
    }
    m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
  }
  m = warp_max(m);
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {  // masked entries: exp(-inf) == 0
    v[k].x = expf(v[k].x - m);
    v[k].y = expf(v[k].y - m);
    v[k].z = expf(v[k].z - m);
    v[k].w = expf(v[k].w - m);
    s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
  }
  s = warp_sum(s);
  float4* yr = reinterpret_cast<float4*>(y + row * T);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = lane + 32 * k;
    if (j < T4) yr[j] = make_float4(v[k].x / s, v[k].y / s, v[k].z / s, v[k].w / s);
  }
}

}  // namespace

// att, y: (rows, T) contiguous (rows = batch * heads * T), 16-byte aligned; mask: at least T rows of
// mask_stride floats. T % 4 == 0, T <= 2048. Returns the cudaError_t.
extern "C" int launch_scale_mask_softmax(const float* att, const float* mask, float* y, long long rows, int T,
                                         int mask_stride, float scale, cudaStream_t stream) {
  if (rows <= 0 || T <= 0) return 0;
  const long long blocks = (rows * 32 + kThreads - 1) / kThreads;
  if (blocks > 2147483647LL || T % 4 != 0 || mask_stride % 4 != 0) return (int)cudaErrorInvalidValue;
  const int per_lane = (T / 4 + 31) / 32;
  if (per_lane <= 1) {
    scale_mask_softmax_kernel<1><<<(unsigned)blocks, kThreads, 0, stream>>>(att, mask, y, rows, T, mask_stride, scale);
  } else if (per_lane <= 2) {
    scale_mask_softmax_kernel<2><<<(unsigned)blocks, kThreads, 0, stream>>>(att, mask, y, rows, T, mask_stride, scale);
  } else if (per_lane <= 4) {
    scale_mask_softmax_kernel<4><<<(unsigned)blocks, kThreads, 0, stream>>>(att, mask, y, rows, T, mask_stride, scale);
  } else if (per_lane <= 8) {
    scale_mask_softmax_kernel<8><<<(unsigned)blocks, kThreads, 0, stream>>>(att, mask, y, rows, T, mask_stride, scale);
  } else if (per_lane <= 16) {
    scale_mask_softmax_kernel<16><<<(unsigned)blocks, kThreads, 0, stream>>>(att, mask, y, rows, T, mask_stride,
                                                                             scale);
  } else {
    return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}
