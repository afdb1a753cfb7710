// Fault: an endless loop in a GPU kernel: it waits for a flag nobody ever sets. The volatile read keeps the
// compiler from reasoning the loop away.
#include <cuda_runtime.h>

__global__ void spin_kernel(volatile const int* flag) {
  while (*flag == 0) {
  }
}

extern "C" int launch_spin(const int* flag, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(flag);
  return (int)cudaGetLastError();
}
