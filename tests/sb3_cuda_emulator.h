// Runs the kernel families' CUDA C on a CPU, for tests on machines without a GPU (tests/sb3_cuda_emulator.py).
//
// One OS thread per CUDA thread of a block; the grid's blocks run one after another on the same threads, so a
// function-scope `static` array is exactly one block's __shared__ memory. __syncthreads is a barrier over the
// block; a warp shuffle writes each lane's value to the warp's slot array and reads another lane's between two
// warp barriers. A thread that returns leaves both barriers, as an exited CUDA thread stops counting toward
// __syncthreads. Covers what the families use: 1-D blocks, float/float2/float4, shuffles, static shared
// memory, the float math functions. It checks logic (indexing, bounds, barriers, the scans' and softmaxes'
// arithmetic in float), not the memory model or performance.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

struct emu_uint3 { unsigned x, y, z; };
inline thread_local emu_uint3 threadIdx;
inline thread_local emu_uint3 blockIdx;
inline emu_uint3 blockDim, gridDim;

struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float __int_as_float(unsigned v) { float f; std::memcpy(&f, &v, sizeof f); return f; }
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }

struct EmuWarp { std::unique_ptr<std::barrier<>> bar; float lanes[32]; };
inline std::unique_ptr<std::barrier<>> emu_block_barrier;
inline std::vector<EmuWarp> emu_warps;

inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }

inline float emu_exchange(float v, int src) {
  EmuWarp& w = emu_warps[threadIdx.x >> 5];
  w.lanes[threadIdx.x & 31] = v;
  w.bar->arrive_and_wait();
  const float got = w.lanes[src];
  w.bar->arrive_and_wait();  // nobody overwrites a slot before every lane has read
  return got;
}
inline float __shfl_xor_sync(unsigned, float v, int o) { return emu_exchange(v, (threadIdx.x & 31) ^ o); }
inline float __shfl_up_sync(unsigned, float v, int d) {
  const int lane = threadIdx.x & 31;
  return emu_exchange(v, lane >= d ? lane - d : lane);
}
inline float __shfl_sync(unsigned, float v, int src) { return emu_exchange(v, src & 31); }

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

inline void emu_fresh_barriers(unsigned threads) {
  emu_block_barrier = std::make_unique<std::barrier<>>(threads);
  emu_warps = std::vector<EmuWarp>((threads + 31) / 32);
  for (unsigned w = 0; w < emu_warps.size(); ++w)
    emu_warps[w].bar = std::make_unique<std::barrier<>>(std::min(32u, threads - w * 32));
}

// Runs body() as every thread of every block of a (gx, gy, gz) grid of 1-D blocks of bx threads.
inline void emu_launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const std::function<void()>& body) {
  gridDim = {gx, gy, gz};
  blockDim = {bx, 1, 1};
  emu_fresh_barriers(bx);
  auto next_block = [bx]() noexcept { emu_fresh_barriers(bx); };
  std::barrier block_done(bx, next_block);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < bx; ++t) {
    threads.emplace_back([&, t]() {
      threadIdx = {t, 0, 0};
      for (unsigned z = 0; z < gz; ++z)
        for (unsigned y = 0; y < gy; ++y)
          for (unsigned x = 0; x < gx; ++x) {
            blockIdx = {x, y, z};
            body();
            emu_block_barrier->arrive_and_drop();
            emu_warps[t >> 5].bar->arrive_and_drop();
            block_done.arrive_and_wait();
          }
    });
  }
  for (auto& thread : threads) thread.join();
}
