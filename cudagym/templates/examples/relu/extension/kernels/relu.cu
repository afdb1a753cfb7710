// ReLU, y = max(x, 0): pure CUDA, no torch headers. The extern "C" launcher takes raw pointers and the
// stream; kernels/relu_binding.cpp does the tensor checks and registers the Python function.
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

// Returns the launch's cudaError_t (0 on success).
extern "C" int launch_relu(const float* x, float* y, long long n, cudaStream_t stream) {
  if (n <= 0) return 0;
  const int threads = 256;
  const long long blocks = (n + threads - 1) / threads;
  relu_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x, y, n);
  return (int)cudaGetLastError();
}
