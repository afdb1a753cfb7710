// RMS norm across channels of an NCHW tensor: y[n,c,p] = x[n,c,p] / sqrt(mean_c(x[n,c,p]^2) + eps).
//
// Why it beats eager: the reference runs pow, mean(dim=1), add, sqrt and div: the 256 MB tensor is read three
// times and written twice, plus the small statistics tensors. Here each thread owns one pixel (n, p), reads
// its C channel values once (a warp reads 32 consecutive pixels of one channel: 128-byte coalesced), keeps
// them in registers, and writes the result once: two passes instead of five (~2.5x).
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kMaxRegC = 64;  // channels kept in registers; more channels take the two-read path

// C <= kMaxRegC: one read, one write.
__global__ void __launch_bounds__(kThreads) rms_norm_regs_kernel(const float* __restrict__ x,
                                                                 float* __restrict__ y, int C, int HW,
                                                                 float eps) {
  const int p = blockIdx.x * kThreads + threadIdx.x;
  if (p >= HW) return;
  const long long base = (long long)blockIdx.y * C * HW + p;
  float v[kMaxRegC];
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < kMaxRegC; ++c) {
    if (c < C) {
      v[c] = x[base + (long long)c * HW];
      ss += v[c] * v[c];
    }
  }
  // mean then sqrt then divide, in the reference's order
  const float rms = sqrtf(ss / (float)C + eps);
#pragma unroll
  for (int c = 0; c < kMaxRegC; ++c) {
    if (c < C) y[base + (long long)c * HW] = v[c] / rms;
  }
}

// Any C: sum of squares in one read, the output in a second read.
__global__ void __launch_bounds__(kThreads) rms_norm_loop_kernel(const float* __restrict__ x,
                                                                 float* __restrict__ y, int C, int HW,
                                                                 float eps) {
  const int p = blockIdx.x * kThreads + threadIdx.x;
  if (p >= HW) return;
  const long long base = (long long)blockIdx.y * C * HW + p;
  float ss = 0.0f;
  for (int c = 0; c < C; ++c) {
    const float v = x[base + (long long)c * HW];
    ss += v * v;
  }
  const float rms = sqrtf(ss / (float)C + eps);
  for (int c = 0; c < C; ++c) y[base + (long long)c * HW] = x[base + (long long)c * HW] / rms;
}

}  // namespace

// x, y: (N, C, HW) contiguous. N <= 65535. Returns the launch's cudaError_t.
extern "C" int launch_rms_norm_channels(const float* x, float* y, int N, int C, int HW, float eps,
                                        cudaStream_t stream) {
  if (N <= 0 || C <= 0 || HW <= 0) return 0;
  dim3 grid((HW + kThreads - 1) / kThreads, N);
  if (C <= kMaxRegC) {
    rms_norm_regs_kernel<<<grid, kThreads, 0, stream>>>(x, y, C, HW, eps);
  } else {
    rms_norm_loop_kernel<<<grid, kThreads, 0, stream>>>(x, y, C, HW, eps);
  }
  return (int)cudaGetLastError();
}
