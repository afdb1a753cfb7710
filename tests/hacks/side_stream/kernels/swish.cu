// Swish on a private stream that nobody waits for. The kernel also idles ~2 ms first (what a slow real
// kernel would look like), so the work is certainly still running when the forward returns.
#include <cuda_runtime.h>

__global__ void slow_swish_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  for (int i = 0; i < 2000; ++i) __nanosleep(1000);
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    y[i] = v / (1.0f + expf(-v));
  }
}

extern "C" int launch_swish_side_stream(const float* x, float* y, long long n) {
  static cudaStream_t side = nullptr;
  if (side == nullptr) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  slow_swish_kernel<<<1056, 256, 0, side>>>(x, y, n);  // no event, no wait: the caller's stream moves on
  return (int)cudaGetLastError();
}
