/* Stands in for PyTorch's CUDA library in the preload tests: its soname is
 * libtorch_cuda.so, which is what libkjit_preload.so looks for. */
int kjit_fake_torch_cuda_marker(void);
int kjit_fake_torch_cuda_marker(void) { return 1; }
