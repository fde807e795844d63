// Kernels for driver_api.cu, built into a fatbin (nvcc -fatbin -arch=sm_90)
// and loaded at run time with cuModuleLoadData.

// C linkage: the module symbol is the plain name "vec_add".
extern "C" __global__ void vec_add(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// C++ linkage: the module symbol is the mangled name _ZN3drv5scaleEPffi.
namespace drv {
__global__ void scale(float *x, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}
}  // namespace drv
