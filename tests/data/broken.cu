extern "C" __global__ void k(float* x) {
  x[0] = not_declared;
}
