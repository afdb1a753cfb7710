// "Softmax" that writes 0 everywhere.
#include <cuda_runtime.h>

__global__ void zeros_kernel(float* __restrict__ y, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = 0.0f;
}

extern "C" int launch_zeros(float* y, long long n, cudaStream_t stream) {
  zeros_kernel<<<1056, 256, 0, stream>>>(y, n);
  return (int)cudaGetLastError();
}
