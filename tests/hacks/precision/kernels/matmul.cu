// C = A @ B with A and B rounded to fp16 on load (fp32 accumulate): 32x32 shared-memory tiles.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

constexpr int TILE = 32;

__device__ __forceinline__ float round_half(float v) { return __half2float(__float2half_rn(v)); }

__global__ void matmul_half_inputs_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                          float* __restrict__ c, int n) {
  __shared__ float as[TILE][TILE];
  __shared__ float bs[TILE][TILE + 1];
  const int row = blockIdx.y * TILE + threadIdx.y;
  const int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < n; k0 += TILE) {
    as[threadIdx.y][threadIdx.x] = (row < n && k0 + threadIdx.x < n) ? round_half(a[row * n + k0 + threadIdx.x]) : 0.f;
    bs[threadIdx.y][threadIdx.x] = (col < n && k0 + threadIdx.y < n) ? round_half(b[(k0 + threadIdx.y) * n + col]) : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < n && col < n) c[row * n + col] = acc;
}

extern "C" int launch_matmul_half_inputs(const float* a, const float* b, float* c, int n, cudaStream_t stream) {
  const dim3 block(TILE, TILE);
  const dim3 grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
  matmul_half_inputs_kernel<<<grid, block, 0, stream>>>(a, b, c, n);
  return (int)cudaGetLastError();
}
