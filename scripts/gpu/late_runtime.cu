// late_runtime LIBRARY: starts CUDA through libcudart.so, then loads LIBRARY
// (late_runtime_lib.cu: its own runtime, linked in statically and stripped)
// and calls it. Prints the calls made, as compare.py's "expected" object:
//   {"expected":{api:count,...}}
// CUPTI, counting the same run, sees neither cudaGetExportTable nor the
// library's cudaRuntimeGetVersion made before its runtime initialised
// (docs/gpu-check.md).
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: late_runtime LIBRARY\n");
    return 2;
  }
  cudaFree(nullptr);
  void* library = dlopen(argv[1], RTLD_NOW);
  if (!library) {
    std::fprintf(stderr, "late_runtime: %s\n", dlerror());
    return 1;
  }
  auto calls = reinterpret_cast<int (*)()>(dlsym(library, "late_runtime_calls"));
  if (!calls) {
    std::fprintf(stderr, "late_runtime: %s has no late_runtime_calls\n", argv[1]);
    return 1;
  }
  if (calls() <= 0) {
    std::fprintf(stderr, "late_runtime: the library's runtime gave no version\n");
    return 1;
  }
  std::printf(
      "{\"expected\":{\"cudaFree\":2,\"cudaRuntimeGetVersion\":2,\"cudaDriverGetVersion\":2,"
      "\"cudaGetErrorString\":2,\"cudaGetExportTable\":1,\"cudaDeviceGetCacheConfig\":1}}\n");
  return 0;
}
