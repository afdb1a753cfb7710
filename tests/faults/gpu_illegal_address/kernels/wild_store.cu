// Fault: illegal memory address on the GPU: every thread stores through a pointer that was never
// allocated. The launch succeeds; the error surfaces at the next synchronisation and stays sticky.
#include <cuda_runtime.h>

__global__ void wild_store_kernel(float* p, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i * 4099] = 1.0f;
}

extern "C" int launch_wild_store(long long n, cudaStream_t stream) {
  float* wild = reinterpret_cast<float*>(0x7f0000000000ULL);  // not a device allocation
  wild_store_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(wild, n);
  return (int)cudaGetLastError();
}
