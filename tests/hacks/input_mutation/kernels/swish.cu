// Swish in place: y and x are the same buffer.
#include <cuda_runtime.h>

__global__ void swish_inplace_kernel(float* __restrict__ x, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    x[i] = v / (1.0f + expf(-v));
  }
}

extern "C" int launch_swish_inplace(float* x, long long n, cudaStream_t stream) {
  swish_inplace_kernel<<<1056, 256, 0, stream>>>(x, n);
  return (int)cudaGetLastError();
}
