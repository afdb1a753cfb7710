// out = x + gelu(h + bias[col]) for (rows, D) fp32 tensors (exact erf GELU).
//
// Why it beats eager: eager runs add (read h, write t), gelu (read t, write g) and add (read x, read g,
// write out): seven passes over 256 MB. Here one kernel reads x and h once and writes out once: three
// passes (~2.3x less traffic), 16-byte accesses, a 2-D grid so the bias column needs no division.
#include <cuda_runtime.h>

#include <math.h>

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float gelu_erf(float v) {
  return v * 0.5f * (1.0f + erff(v * 0.70710678118654752f));  // torch's exact GELU: x * 0.5 * (1 + erf(x/sqrt2))
}

// grid (ceil(D/4 / kThreads), rows); D % 4 == 0.
__global__ void __launch_bounds__(kThreads) bias_gelu_residual_kernel(const float* __restrict__ x,
                                                                      const float* __restrict__ h,
                                                                      const float* __restrict__ bias,
                                                                      float* __restrict__ out, int D) {
  const int j = blockIdx.x * kThreads + threadIdx.x;
  if (j >= D / 4) return;
  const long long i = (long long)blockIdx.y * (D / 4) + j;
  const float4 a = reinterpret_cast<const float4*>(x)[i];
  const float4 t = reinterpret_cast<const float4*>(h)[i];
  const float4 b = reinterpret_cast<const float4*>(bias)[j];
  reinterpret_cast<float4*>(out)[i] = make_float4(a.x + gelu_erf(t.x + b.x), a.y + gelu_erf(t.y + b.y),
                                                  a.z + gelu_erf(t.z + b.z), a.w + gelu_erf(t.w + b.w));
}

}  // namespace

// x, h, out: (rows, D); bias: (D); contiguous, 16-byte aligned; D % 4 == 0; rows <= 65535.
// Returns the cudaError_t.
extern "C" int launch_bias_gelu_residual(const float* x, const float* h, const float* bias, float* out, int rows,
                                         int D, cudaStream_t stream) {
  if (rows <= 0 || D <= 0) return 0;
  if (D % 4 != 0 || rows > 65535) return (int)cudaErrorInvalidValue;
  dim3 grid((D / 4 + kThreads - 1) / kThreads, rows);
  bias_gelu_residual_kernel<<<grid, kThreads, 0, stream>>>(x, h, bias, out, D);
  return (int)cudaGetLastError();
}
