// Mish y = x * tanh(softplus(x)), fused.
//
// Why it beats eager: the reference is three elementwise kernels (softplus, tanh, mul): seven passes over a
// 256 MB tensor. This kernel makes two (read x, write y) with 16-byte accesses. Expected ~3x.
//
// Byte floor (task shape 4096 x 16384 fp32): 268,435,456 B read + 268,435,456 B written = 536,870,912 B,
// 0.125 ms at 4.3 TB/s (0.134 ms at the ~4.0 TB/s the bundled streaming kernels reach on the H200).
// Why it beats torch.compile: written as expf, log1pf and tanhf the activation costs four to five
// special-function (SFU) ops and ~40 other instructions per element; an H200 SM retires 16 SFU results and
// 128 other instructions per clock while the memory stream wants ~7.5 elements per SM per clock, so that
// form is compute-bound (0.162 ms measured, torch.compile 0.159 ms). With e = exp(x),
// tanh(log1p(e)) = ((1+e)^2 - 1) / ((1+e)^2 + 1) = n / (n + 2), n = e (e + 2): one exp and one reciprocal
// (two SFU ops, ~17 instructions per element in the SASS), lighter than Swish (two SFU ops, ~20
// instructions), which runs at 0.138 ms, within 3% of the byte floor.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

// Above torch's softplus threshold (beta = 1, threshold = 20) softplus(x) = x and tanh(x) rounds to 1 in
// fp32, so y = x exactly, as in the reference. Below it, y = x * n / (n + 2) with n = e (e + 2), e = exp(x).
// exp's argument is clamped to 20 so that e <= 4.9e8 and n + 2 <= 2.4e17 stays inside __fdividef's exact
// range (divisor < 2^126); a select, not a branch, picks the result. __expf's error, at most
// 2 + 1.173 |x| ulp (< 3e-6 relative for |x| <= 20), reaches y damped by 2 / (n + 2) <= 1. NaN and -inf give
// NaN, as in the reference (fminf(NaN, 20) = 20, then NaN * 1).
__device__ __forceinline__ float mish(float v) {
  const float e = __expf(fminf(v, 20.0f));
  const float n = e * (e + 2.0f);
  const float t = __fdividef(n, n + 2.0f);
  return v > 20.0f ? v : v * t;
}

__global__ void __launch_bounds__(256) mish_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                    long long n) {
  const long long n4 = n / 4;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* y4 = reinterpret_cast<float4*>(y);
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
    float4 v = x4[i];
    v.x = mish(v.x);
    v.y = mish(v.y);
    v.z = mish(v.z);
    v.w = mish(v.w);
    y4[i] = v;
  }
  // the last n % 4 elements, if any
  for (long long i = n4 * 4 + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    y[i] = mish(x[i]);
  }
}

int sm_count() {
  static int count = 0;
  if (count == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    if (count <= 0) count = 132;
  }
  return count;
}

}  // namespace

// x, y: n contiguous floats, 16-byte aligned. Returns the launch's cudaError_t.
extern "C" int launch_mish(const float* x, float* y, long long n, cudaStream_t stream) {
  if (n <= 0) return 0;
  const int threads = 256;
  long long blocks = (n / 4 + threads - 1) / threads;
  const long long cap = 8LL * sm_count();  // 8 blocks x 256 threads = a full SM
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  mish_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x, y, n);
  return (int)cudaGetLastError();
}
