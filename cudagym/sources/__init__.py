"""Task sources: KernelBench (checkout or Hugging Face), CUDA-Agent-Ops-6K, and the bundled suite."""
