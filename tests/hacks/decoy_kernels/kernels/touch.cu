// The decoy: one thread reads one element. It runs, so "did the custom kernel run?" says yes.
#include <cuda_runtime.h>

__global__ void touch_kernel(const float* __restrict__ x, float* __restrict__ sink) {
  if (threadIdx.x == 0) *sink = x[0];
}

extern "C" int launch_touch(const float* x, float* sink, cudaStream_t stream) {
  touch_kernel<<<1, 32, 0, stream>>>(x, sink);
  return (int)cudaGetLastError();
}
