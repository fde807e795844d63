// A library with its own CUDA runtime linked in statically and stripped, as
// cuBLAS and cuDNN are; late_runtime loads it after CUDA (and CUPTI) started.
// It calls runtime APIs that no analysis reads, some before its runtime
// initialised: cudatrace finds them by their fingerprints (every runtime API
// has one) and must count each call.
#include <cuda_runtime_api.h>

extern "C" int late_runtime_calls() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);  // before this runtime initialised
  cudaDriverGetVersion(&driver);
  cudaGetErrorString(cudaErrorInvalidValue);
  cudaFree(nullptr);  // initialises it
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  cudaGetErrorString(cudaErrorInvalidValue);
  const void* table = nullptr;
  const cudaUUID_t unknown{};
  cudaGetExportTable(&table, &unknown);
  cudaFuncCache config;
  cudaDeviceGetCacheConfig(&config);
  return runtime;
}
