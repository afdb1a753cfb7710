// LayerNorm over very long rows (rows x N, N = C*H*W = 4M), split across the whole GPU.
//
// Why it beats eager: PyTorch assigns one block per row; 16 rows keep 16 of 132 SMs busy. Here:
//   1. partial_stats: 16384 blocks each take a 4096-element chunk, compute its mean and its centred sum of
//      squares (M2) from registers (one read of x);
//   2. merge_stats: one block per row merges the chunk statistics with Chan's parallel formula;
//   3. normalize: a grid-stride pass reads x, weight and bias once and writes y.
// Traffic: read x twice, write y once (plus the affine parameters), at full-GPU bandwidth.
#include <cuda_runtime.h>

#include <math.h>

namespace {

constexpr int kThreads = 256;
constexpr int kVec = 4;                            // float4 per thread in partial_stats
constexpr int kChunk = kThreads * kVec * 4;        // 4096 elements per chunk
constexpr int kMergeThreads = 1024;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int THREADS>
__device__ __forceinline__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = lane < THREADS / 32 ? red[lane] : 0.0f;
  r = warp_sum(r);
  __syncthreads();
  return r;
}

// grid (chunks, rows). Writes stats[(row * chunks + chunk) * 2 + {0,1}] = {mean, M2} of the chunk.
__global__ void __launch_bounds__(kThreads) partial_stats_kernel(const float* __restrict__ x,
                                                                 float* __restrict__ stats, long long N,
                                                                 int chunks) {
  __shared__ float red[kThreads / 32];
  const int chunk = blockIdx.x, row = blockIdx.y;
  const long long start = (long long)chunk * kChunk;
  const long long count = N - start < kChunk ? N - start : kChunk;  // N % 4 == 0, so count % 4 == 0
  const float4* xr = reinterpret_cast<const float4*>(x + (long long)row * N + start);
  float4 v[kVec];
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int j = threadIdx.x + i * kThreads;  // float4 index within the chunk
    v[i] = 4LL * j < count ? xr[j] : make_float4(0.f, 0.f, 0.f, 0.f);
    s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
  }
  const float mean = block_sum<kThreads>(s, red) / (float)count;
  float m2 = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int j = threadIdx.x + i * kThreads;
    if (4LL * j < count) {
      const float a = v[i].x - mean, b = v[i].y - mean, c = v[i].z - mean, d = v[i].w - mean;
      m2 += (a * a + b * b) + (c * c + d * d);
    }
  }
  m2 = block_sum<kThreads>(m2, red);
  if (threadIdx.x == 0) {
    float* out = stats + ((long long)row * chunks + chunk) * 2;
    out[0] = mean;
    out[1] = m2;
  }
}

// (n_a, mean_a, m2_a) <- merge with (n_b, mean_b, m2_b) (Chan et al.)
__device__ __forceinline__ void chan_merge(float& n_a, float& mean_a, float& m2_a, float n_b, float mean_b,
                                           float m2_b) {
  const float n = n_a + n_b;
  if (n_b == 0.0f) return;
  const float delta = mean_b - mean_a;
  const float w = n_b / n;
  mean_a += delta * w;
  m2_a += m2_b + delta * delta * n_a * w;
  n_a = n;
}

// grid rows, block kMergeThreads. Writes mean_rstd[row * 2 + {0,1}] = {mean, 1/sqrt(var + eps)}.
__global__ void __launch_bounds__(kMergeThreads) merge_stats_kernel(const float* __restrict__ stats,
                                                                    float* __restrict__ mean_rstd, long long N,
                                                                    int chunks, float eps) {
  __shared__ float sn[kMergeThreads], smean[kMergeThreads], sm2[kMergeThreads];
  const int row = blockIdx.x;
  float n = 0.0f, mean = 0.0f, m2 = 0.0f;
  for (int c = threadIdx.x; c < chunks; c += kMergeThreads) {
    const long long start = (long long)c * kChunk;
    const float cnt = (float)(N - start < kChunk ? N - start : kChunk);
    const float* st = stats + ((long long)row * chunks + c) * 2;
    chan_merge(n, mean, m2, cnt, st[0], st[1]);
  }
  sn[threadIdx.x] = n;
  smean[threadIdx.x] = mean;
  sm2[threadIdx.x] = m2;
  __syncthreads();
  for (int half = kMergeThreads / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) {
      float n_a = sn[threadIdx.x], mean_a = smean[threadIdx.x], m2_a = sm2[threadIdx.x];
      chan_merge(n_a, mean_a, m2_a, sn[threadIdx.x + half], smean[threadIdx.x + half], sm2[threadIdx.x + half]);
      sn[threadIdx.x] = n_a;
      smean[threadIdx.x] = mean_a;
      sm2[threadIdx.x] = m2_a;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float var = sm2[0] / (float)N;  // biased, as LayerNorm uses
    mean_rstd[row * 2] = smean[0];
    mean_rstd[row * 2 + 1] = rsqrtf(var + eps);
  }
}

// y = (x - mean) * rstd * w + b; grid (blocks per row, rows), grid-stride along the row; N % 4 == 0.
__global__ void __launch_bounds__(kThreads) normalize_kernel(const float* __restrict__ x,
                                                             const float* __restrict__ w,
                                                             const float* __restrict__ b,
                                                             const float* __restrict__ mean_rstd,
                                                             float* __restrict__ y, long long N) {
  const long long N4 = N / 4;
  const int row = blockIdx.y;
  const float4* x4 = reinterpret_cast<const float4*>(x + (long long)row * N);
  float4* y4 = reinterpret_cast<float4*>(y + (long long)row * N);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const float4* b4 = reinterpret_cast<const float4*>(b);
  const float mean = mean_rstd[row * 2], rstd = mean_rstd[row * 2 + 1];
  const long long stride = (long long)gridDim.x * kThreads;
  for (long long i = (long long)blockIdx.x * kThreads + threadIdx.x; i < N4; i += stride) {
    const float4 v = x4[i], g = w4[i], h = b4[i];
    float4 o;
    o.x = (v.x - mean) * rstd * g.x + h.x;
    o.y = (v.y - mean) * rstd * g.y + h.y;
    o.z = (v.z - mean) * rstd * g.z + h.z;
    o.w = (v.w - mean) * rstd * g.w + h.w;
    y4[i] = o;
  }
}

int sm_count() {
  static int count = 0;
  if (count == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    if (count <= 0) count = 132;
  }
  return count;
}

}  // namespace

// Number of floats the caller must provide as `stats` workspace.
extern "C" long long layer_norm_large_workspace(int rows, long long N) {
  return (long long)rows * ((N + kChunk - 1) / kChunk) * 2;
}

// x, y: (rows, N); w, b: (N); N % 4 == 0; stats: layer_norm_large_workspace floats; mean_rstd: rows * 2
// floats. rows <= 65535. Returns the cudaError_t.
extern "C" int launch_layer_norm_large(const float* x, const float* w, const float* b, float* y, float* stats,
                                       float* mean_rstd, int rows, long long N, float eps, cudaStream_t stream) {
  if (rows <= 0 || N <= 0) return 0;
  const int chunks = (int)((N + kChunk - 1) / kChunk);
  partial_stats_kernel<<<dim3(chunks, rows), kThreads, 0, stream>>>(x, stats, N, chunks);
  merge_stats_kernel<<<rows, kMergeThreads, 0, stream>>>(stats, mean_rstd, N, chunks, eps);
  // about 8 blocks per SM in total, split evenly over the rows, each block striding along its row
  long long per_row = 8LL * sm_count() / rows;
  const long long need = (N / 4 + kThreads - 1) / kThreads;
  if (per_row > need) per_row = need;
  if (per_row < 1) per_row = 1;
  normalize_kernel<<<dim3((unsigned)per_row, rows), kThreads, 0, stream>>>(x, w, b, mean_rstd, y, N);
  return (int)cudaGetLastError();
}
