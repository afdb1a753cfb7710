// Swish with a slope, y = x * sigmoid(beta * x): a grid-stride loop, one element per step.
// The raw format: an extern "C" kernel compiled to a cubin and launched from model_new.py.
extern "C" __global__ void swish(const float* __restrict__ x, float* __restrict__ y, long long n, float beta) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    y[i] = v / (1.0f + expf(-beta * v));
  }
}
