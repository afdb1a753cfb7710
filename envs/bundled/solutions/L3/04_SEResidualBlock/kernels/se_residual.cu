// out = relu(x * sigmoid(W2 relu(W1 mean_hw(x) + b1) + b2)[n, c] + identity), NCHW fp32.
//
// Why it beats eager: eager reads x for the mean, runs five tiny kernels for the squeeze MLP (each a
// launch of a few microseconds), then mul (read x, write), add (read two, write) and ReLU (read, write):
// about eight passes over 256 MB. Here:
//   1. channel_mean: one block per (image, channel) plane, 16-byte loads, warp-shuffle reduction;
//   2. squeeze: one block per image computes fc1 + ReLU (one warp per hidden unit, shuffles) and
//      fc2 + sigmoid (one thread per channel) from shared memory;
//   3. excite: a 2-D grid over (HW chunk, plane) streams x and identity once and writes relu(x*s + id).
// Four passes over 256 MB instead of eight, and three launches instead of nine.
#include <cuda_runtime.h>

#include <math.h>

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// grid (images * C); means[plane] = sum(x[plane]) / HW; HW % 4 == 0.
__global__ void __launch_bounds__(kThreads) channel_mean_kernel(const float* __restrict__ x,
                                                                float* __restrict__ means, int HW) {
  __shared__ float red[kThreads / 32];
  const float4* xp = reinterpret_cast<const float4*>(x + (long long)blockIdx.x * HW);
  float s = 0.0f;
  for (int i = threadIdx.x; i < HW / 4; i += kThreads) {
    const float4 v = xp[i];
    s += (v.x + v.y) + (v.z + v.w);
  }
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < kThreads / 32 ? red[threadIdx.x] : 0.0f;
    t = warp_sum(t);
    if (threadIdx.x == 0) means[blockIdx.x] = t / (float)HW;
  }
}

// grid (images); C <= 1024 channels, R hidden units (R <= 64). gates[n * C + c] = sigmoid(fc2(relu(fc1(mean)))).
__global__ void __launch_bounds__(kThreads) squeeze_kernel(const float* __restrict__ means,
                                                           const float* __restrict__ w1, const float* __restrict__ b1,
                                                           const float* __restrict__ w2, const float* __restrict__ b2,
                                                           float* __restrict__ gates, int C, int R) {
  __shared__ float sm[1024];
  __shared__ float hid[64];
  const int n = blockIdx.x;
  for (int c = threadIdx.x; c < C; c += kThreads) sm[c] = means[(long long)n * C + c];
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < R; r += kThreads / 32) {  // hidden unit r: dot(w1[r, :], mean) by one warp
    float d = 0.0f;
    for (int c = lane; c < C; c += 32) d = fmaf(w1[(long long)r * C + c], sm[c], d);
    d = warp_sum(d);
    if (lane == 0) hid[r] = fmaxf(d + b1[r], 0.0f);
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += kThreads) {
    float d = 0.0f;
    for (int r = 0; r < R; ++r) d = fmaf(w2[(long long)c * R + r], hid[r], d);
    gates[(long long)n * C + c] = 1.0f / (1.0f + expf(-(d + b2[c])));
  }
}

// grid (chunks, images * C); HW % 4 == 0.
__global__ void __launch_bounds__(kThreads) excite_kernel(const float* __restrict__ x,
                                                          const float* __restrict__ identity,
                                                          const float* __restrict__ gates, float* __restrict__ out,
                                                          int HW) {
  const int plane = blockIdx.y;
  const float g = gates[plane];
  const long long base = (long long)plane * (HW / 4);
  const float4* x4 = reinterpret_cast<const float4*>(x) + base;
  const float4* i4 = reinterpret_cast<const float4*>(identity) + base;
  float4* o4 = reinterpret_cast<float4*>(out) + base;
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < HW / 4; i += gridDim.x * kThreads) {
    const float4 v = x4[i], r = i4[i];
    o4[i] = make_float4(fmaxf(v.x * g + r.x, 0.0f), fmaxf(v.y * g + r.y, 0.0f), fmaxf(v.z * g + r.z, 0.0f),
                        fmaxf(v.w * g + r.w, 0.0f));
  }
}

}  // namespace

// x, identity, out: (images, C, HW) contiguous, 16-byte aligned; w1: (R, C), b1: (R), w2: (C, R), b2: (C);
// means, gates: images * C floats of workspace. C <= 1024, R <= 64, HW % 4 == 0, images * C <= 65535.
// Returns the cudaError_t.
extern "C" int launch_se_residual(const float* x, const float* identity, const float* w1, const float* b1,
                                  const float* w2, const float* b2, float* means, float* gates, float* out,
                                  int images, int C, int R, int HW, cudaStream_t stream) {
  if (images <= 0 || C <= 0 || HW <= 0) return 0;
  if (C > 1024 || R <= 0 || R > 64 || HW % 4 != 0 || (long long)images * C > 65535) {
    return (int)cudaErrorInvalidValue;
  }
  channel_mean_kernel<<<images * C, kThreads, 0, stream>>>(x, means, HW);
  squeeze_kernel<<<images, kThreads, 0, stream>>>(means, w1, b1, w2, b2, gates, C, R);
  int chunks = (HW / 4 + 4 * kThreads - 1) / (4 * kThreads);  // ~4 float4 per thread
  if (chunks < 1) chunks = 1;
  excite_kernel<<<dim3(chunks, images * C), kThreads, 0, stream>>>(x, identity, gates, out, HW);
  return (int)cudaGetLastError();
}
