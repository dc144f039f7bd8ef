"""Task generation: families of PyTorch→CUDA and C→CUDA tasks and their CUDA implementations."""
