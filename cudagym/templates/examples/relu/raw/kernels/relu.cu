// ReLU, y = max(x, 0): one thread per element.
//
// The raw format compiles each kernels/*.cu to a cubin (NVRTC or nvcc) and launches its
// extern "C" __global__ kernels by name from model_new.py through cudagym.runtime. Parameter types
// are read from this signature, so pass a Python int for `n` and it arrives as a 64-bit integer.
extern "C" __global__ void relu(const float* __restrict__ x, float* __restrict__ y, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
