// A kernel that writes only the first 1024 elements; the rest of the output is whatever the memory held.
#include <cuda_runtime.h>

__global__ void swish_head_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && i < 1024) y[i] = x[i] / (1.0f + expf(-x[i]));
}

extern "C" int launch_swish(const float* x, float* y, long long n, cudaStream_t stream) {
  swish_head_kernel<<<4, 256, 0, stream>>>(x, y, n);
  return (int)cudaGetLastError();
}
