// C = tril(A @ B) for N x N row-major fp32 matrices, N % 128 == 0.
//
// Why it beats eager: eager runs a full cuBLAS SGEMM (2 N^3 = 137 GFLOP at N = 4096) and then a tril
// kernel. Of the (N/128)^2 output tiles only those on or below the diagonal are non-zero: 528 of 1024 at
// N = 4096, so this kernel does 52% of the flops; tiles above the diagonal are just zero-filled. The GEMM is
// a classic SIMT one: 128x128x8 block tile, 256 threads with an 8x8 register tile each (64 FMAs per 4
// shared-memory float4 loads), A stored transposed in shared memory, double-buffered shared memory with
// the next tile prefetched into registers. It needs about 55% of cuBLAS's SGEMM throughput to tie;
// a kernel of this shape typically reaches 70-90%. Accumulation is plain fp32 FMA (no TF32).
#include <cuda_runtime.h>

namespace {

constexpr int BM = 128, BN = 128, BK = 8;
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads, 2) tril_matmul_kernel(const float* __restrict__ A,
                                                                  const float* __restrict__ B,
                                                                  float* __restrict__ C, int N) {
  const int tiles = N / BM;
  const int bi = blockIdx.x / tiles, bj = blockIdx.x % tiles;  // output tile row, column
  const int tid = threadIdx.x;
  float* Cblk = C + (long long)bi * BM * N + (long long)bj * BN;
  if (bj > bi) {  // strictly above the diagonal: all zeros (the whole block returns, no barrier skipped)
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int idx = tid; idx < BM * BN / 4; idx += kThreads) {
      const int r = idx / (BN / 4), c4 = idx % (BN / 4);
      *reinterpret_cast<float4*>(Cblk + (long long)r * N + c4 * 4) = zero;
    }
    return;
  }

  __shared__ __align__(16) float As[2][BK][BM];  // A tile, transposed: As[k][m]
  __shared__ __align__(16) float Bs[2][BK][BN];  // B tile: Bs[k][n]
  const float* Ablk = A + (long long)bi * BM * N;
  const float* Bblk = B + (long long)bj * BN;
  // global -> shared mapping: one float4 of A and one of B per thread per k-tile
  const int a_row = tid / 2, a_col = (tid % 2) * 4;    // A: 128 rows x 8 k
  const int b_row = tid / 32, b_col = (tid % 32) * 4;  // B: 8 k x 128 cols
  // compute mapping: rows ty*4+{0..3} and 64+ty*4+{0..3}; columns likewise with tx
  const int tx = tid % 16, ty = tid / 16;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  float4 a_reg = *reinterpret_cast<const float4*>(Ablk + (long long)a_row * N + a_col);
  float4 b_reg = *reinterpret_cast<const float4*>(Bblk + (long long)b_row * N + b_col);
  As[0][a_col + 0][a_row] = a_reg.x;
  As[0][a_col + 1][a_row] = a_reg.y;
  As[0][a_col + 2][a_row] = a_reg.z;
  As[0][a_col + 3][a_row] = a_reg.w;
  *reinterpret_cast<float4*>(&Bs[0][b_row][b_col]) = b_reg;
  __syncthreads();

  const int KT = N / BK;
  for (int kt = 0; kt < KT; ++kt) {
    const int cur = kt & 1;
    if (kt + 1 < KT) {  // prefetch the next k-tile into registers while computing this one
      const int k0 = (kt + 1) * BK;
      a_reg = *reinterpret_cast<const float4*>(Ablk + (long long)a_row * N + k0 + a_col);
      b_reg = *reinterpret_cast<const float4*>(Bblk + (long long)(k0 + b_row) * N + b_col);
    }
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][k][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][k][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[cur][k][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[cur][k][64 + tx * 4]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (kt + 1 < KT) {  // the other buffer was last read before the previous barrier
      const int nxt = cur ^ 1;
      As[nxt][a_col + 0][a_row] = a_reg.x;
      As[nxt][a_col + 1][a_row] = a_reg.y;
      As[nxt][a_col + 2][a_row] = a_reg.z;
      As[nxt][a_col + 3][a_row] = a_reg.w;
      *reinterpret_cast<float4*>(&Bs[nxt][b_row][b_col]) = b_reg;
    }
    __syncthreads();
  }

  const bool diagonal = bi == bj;  // within a diagonal tile, keep col <= row
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = (i < 4 ? 0 : 64) + ty * 4 + (i & 3);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = h * 64 + tx * 4;
      float4 o = make_float4(acc[i][h * 4 + 0], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
      if (diagonal) {
        if (col + 0 > row) o.x = 0.0f;
        if (col + 1 > row) o.y = 0.0f;
        if (col + 2 > row) o.z = 0.0f;
        if (col + 3 > row) o.w = 0.0f;
      }
      *reinterpret_cast<float4*>(Cblk + (long long)row * N + col) = o;
    }
  }
}

}  // namespace

// A, B, C: N x N row-major, N % 128 == 0, 16-byte aligned. Returns the cudaError_t.
extern "C" int launch_tril_matmul(const float* A, const float* B, float* C, int N, cudaStream_t stream) {
  if (N <= 0) return 0;
  if (N % BM != 0) return (int)cudaErrorInvalidValue;
  const int tiles = N / BM;
  tril_matmul_kernel<<<tiles * tiles, kThreads, 0, stream>>>(A, B, C, N);
  return (int)cudaGetLastError();
}
