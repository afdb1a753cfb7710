// Fault: device out of memory: the binding allocates a 4 TiB scratch buffer before this kernel would run.
#include <cuda_runtime.h>

__global__ void fill_kernel(unsigned char* p, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = 0;
}

extern "C" int launch_fill(unsigned char* p, long long n, cudaStream_t stream) {
  fill_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(p, n);
  return (int)cudaGetLastError();
}
