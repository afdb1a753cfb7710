// Inclusive scan along the last dimension: one block of 256 threads per row.
//
// Why it beats eager: PyTorch's innermost-dim scan walks each row in 32-element chunks with two barriers
// per chunk, far from bandwidth-bound. Here a block loads its whole row (8192 floats) into registers
// with coalesced 16-byte loads, then for each 1024-element chunk: a 4-element scan in the thread, a warp
// scan with shuffles, a scan of the 8 warp totals, and a running carry. One read, one write.
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// VPT float4 per thread; D % 4 == 0, D <= 4 * kThreads * VPT.
template <int VPT>
__global__ void __launch_bounds__(kThreads) cumsum_rows_kernel(const float* __restrict__ x,
                                                               float* __restrict__ y, int D) {
  __shared__ float warp_total[kWarps];
  const int D4 = D / 4;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float4* xr = reinterpret_cast<const float4*>(x + (long long)blockIdx.x * D);
  float4* yr = reinterpret_cast<float4*>(y + (long long)blockIdx.x * D);
  float4 v[VPT];
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int j = threadIdx.x + i * kThreads;
    v[i] = j < D4 ? xr[j] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float carry = 0.0f;  // sum of all previous chunks
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    // inclusive scan of this thread's 4 elements
    v[i].y += v[i].x;
    v[i].z += v[i].y;
    v[i].w += v[i].z;
    const float t = v[i].w;
    // inclusive scan of the thread totals within the warp
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
    // every warp scans the warp totals itself
    float wt = lane < kWarps ? warp_total[lane] : 0.0f;
#pragma unroll
    for (int o = 1; o < kWarps; o <<= 1) {
      const float n = __shfl_up_sync(0xffffffffu, wt, o);
      if (lane >= o) wt += n;
    }
    const float before = __shfl_sync(0xffffffffu, wt, warp == 0 ? 0 : warp - 1);
    const float chunk_total = __shfl_sync(0xffffffffu, wt, kWarps - 1);
    __syncthreads();  // warp_total is rewritten in the next chunk
    const float excl = carry + (warp == 0 ? 0.0f : before) + lane_excl;
    const int j = threadIdx.x + i * kThreads;
    if (j < D4) yr[j] = make_float4(excl + v[i].x, excl + v[i].y, excl + v[i].z, excl + v[i].w);
    carry += chunk_total;
  }
}

}  // namespace

// x, y: (rows, D) contiguous, D % 4 == 0, D <= 32768, 16-byte aligned. Returns the cudaError_t.
extern "C" int launch_cumsum_rows(const float* x, float* y, int rows, int D, cudaStream_t stream) {
  if (rows <= 0 || D <= 0) return 0;
  const int per_thread = (D / 4 + kThreads - 1) / kThreads;
  if (per_thread <= 1) {
    cumsum_rows_kernel<1><<<rows, kThreads, 0, stream>>>(x, y, D);
  } else if (per_thread <= 2) {
    cumsum_rows_kernel<2><<<rows, kThreads, 0, stream>>>(x, y, D);
  } else if (per_thread <= 4) {
    cumsum_rows_kernel<4><<<rows, kThreads, 0, stream>>>(x, y, D);
  } else if (per_thread <= 8) {
    cumsum_rows_kernel<8><<<rows, kThreads, 0, stream>>>(x, y, D);
  } else if (per_thread <= 16) {
    cumsum_rows_kernel<16><<<rows, kThreads, 0, stream>>>(x, y, D);
  } else if (per_thread <= 32) {
    cumsum_rows_kernel<32><<<rows, kThreads, 0, stream>>>(x, y, D);
  } else {
    return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}
