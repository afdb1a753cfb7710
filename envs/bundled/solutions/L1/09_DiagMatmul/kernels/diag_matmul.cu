// diag(A) @ B computed as a row scaling: C[i, j] = A[i] * B[i, j].
//
// Why it beats eager: eager builds the N x N diagonal matrix (64 MB written) and runs an N^3 GEMM
// (2 * 4096^3 = 137 GFLOP, ~2.5 ms on an H200 in fp32). The product only needs one multiply per output:
// read B once, write C once (128 MB, ~0.04 ms). The result is exact: the GEMM adds only zero products.
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

// grid (ceil(M/4 / kThreads), N); M % 4 == 0.
__global__ void __launch_bounds__(kThreads) diag_matmul_kernel(const float* __restrict__ a,
                                                               const float* __restrict__ b,
                                                               float* __restrict__ c, int M) {
  const int row = blockIdx.y;
  const int j = blockIdx.x * kThreads + threadIdx.x;
  if (j >= M / 4) return;
  const float s = a[row];
  const float4 v = reinterpret_cast<const float4*>(b + (long long)row * M)[j];
  reinterpret_cast<float4*>(c + (long long)row * M)[j] = make_float4(s * v.x, s * v.y, s * v.z, s * v.w);
}

}  // namespace

// a: (N), b, c: (N, M) contiguous; M % 4 == 0; N <= 65535. Returns the cudaError_t.
extern "C" int launch_diag_matmul(const float* a, const float* b, float* c, int N, int M, cudaStream_t stream) {
  if (N <= 0 || M <= 0) return 0;
  dim3 grid((M / 4 + kThreads - 1) / kThreads, N);
  diag_matmul_kernel<<<grid, kThreads, 0, stream>>>(a, b, c, M);
  return (int)cudaGetLastError();
}
