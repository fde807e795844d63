// Work through the CUDA driver API only: loads driver_kernels.fatbin, launches
// its two kernels with cuLaunchKernel and once with cuLaunchKernelEx as a
// 2-block cluster. Counts every driver API call it makes and prints them, with
// the kernels it launched, as one JSON line:
// {"expected":{api:count,...},"kernels":{name:count,...}}.
// Usage: driver_api FATBIN [ITER]   (ITER default 20, at most 100)

#include <cuda.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

// Counted after macro expansion: cuMemAlloc is counted as cuMemAlloc_v2,
// the symbol actually called.
#define STR2(x) #x
#define STR(x) STR2(x)
#define CU(fn, ...) check(STR(fn), fn(__VA_ARGS__), __LINE__)

static std::map<std::string, long> g_expected;
static std::map<std::string, long> g_kernels;

static void check(const char *api, CUresult r, int line) {
  ++g_expected[api];
  if (r != CUDA_SUCCESS) {
    const char *name = "?", *desc = "?";
    cuGetErrorName(r, &name);  // not counted: only used on the way out
    cuGetErrorString(r, &desc);
    fprintf(stderr, "driver_api.cu:%d: %s failed: %s (%d): %s\n", line, api, name, (int)r,
            desc);
    exit(1);
  }
}

static std::vector<char> read_file(const char *path) {
  std::vector<char> data;
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  char buf[65536];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + got);
  fclose(f);
  return data;
}

static void print_map(const std::map<std::string, long> &m) {
  printf("{");
  const char *sep = "";
  for (const auto &kv : m) {
    printf("%s\"%s\":%ld", sep, kv.first.c_str(), kv.second);
    sep = ",";
  }
  printf("}");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FATBIN [ITER]\n", argv[0]);
    return 2;
  }
  const int iters = argc > 2 ? atoi(argv[2]) : 20;
  // drv::scale doubles x each launch: 2^(iters+1) must stay exact in a float.
  if (iters <= 0 || iters > 100) {
    fprintf(stderr, "ITER must be 1..100\n");
    return 2;
  }
  std::vector<char> image = read_file(argv[1]);

  CU(cuInit, 0);
  CUdevice dev;
  CU(cuDeviceGet, &dev, 0);
  int major = 0;
  CU(cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  if (major < 9) {
    fprintf(stderr, "thread block clusters need compute capability 9.0+, device has %d.x\n",
            major);
    return 1;
  }
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain, &ctx, dev);
  CU(cuCtxSetCurrent, ctx);

  CUmodule mod;
  CU(cuModuleLoadData, &mod, image.data());
  CUfunction f_add, f_scale;
  CU(cuModuleGetFunction, &f_add, mod, "vec_add");
  CU(cuModuleGetFunction, &f_scale, mod, "_ZN3drv5scaleEPffi");
  const char *name = nullptr;
  CU(cuFuncGetName, &name, f_add);
  const std::string add_name = name;  // copied: the module owns the string
  CU(cuFuncGetName, &name, f_scale);
  const std::string scale_name = name;

  int n = 1 << 20;
  const size_t bytes = n * sizeof(float);
  std::vector<float> h_a(n), h_b(n), h_x(n, 1.0f), h_c(n);
  for (int i = 0; i < n; ++i) {
    h_a[i] = (float)(i % 1000);
    h_b[i] = (float)(i % 7);
  }
  CUdeviceptr d_a, d_b, d_c, d_x;
  CU(cuMemAlloc, &d_a, bytes);
  CU(cuMemAlloc, &d_b, bytes);
  CU(cuMemAlloc, &d_c, bytes);
  CU(cuMemAlloc, &d_x, bytes);
  CU(cuMemcpyHtoD, d_a, h_a.data(), bytes);
  CU(cuMemcpyHtoD, d_b, h_b.data(), bytes);
  CU(cuMemcpyHtoD, d_x, h_x.data(), bytes);

  const unsigned block = 256, grid = (n + block - 1) / block;  // 4096: even
  float factor = 2.0f;
  void *add_args[] = {&d_a, &d_b, &d_c, &n};
  void *scale_args[] = {&d_x, &factor, &n};
  for (int it = 0; it < iters; ++it) {
    CU(cuLaunchKernel, f_add, grid, 1, 1, block, 1, 1, 0, nullptr, add_args, nullptr);
    CU(cuLaunchKernel, f_scale, grid, 1, 1, block, 1, 1, 0, nullptr, scale_args, nullptr);
  }

  CUlaunchAttribute attr = {};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = 2;
  attr.value.clusterDim.y = 1;
  attr.value.clusterDim.z = 1;
  CUlaunchConfig cfg = {};
  cfg.gridDimX = grid;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = block;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = nullptr;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CU(cuLaunchKernelEx, &cfg, f_scale, scale_args, nullptr);
  CU(cuCtxSynchronize);

  CU(cuMemcpyDtoH, h_c.data(), d_c, bytes);
  CU(cuMemcpyDtoH, h_x.data(), d_x, bytes);
  const float want_x = ldexpf(1.0f, iters + 1);
  for (int i = 0; i < n; ++i) {
    if (h_c[i] != h_a[i] + h_b[i]) {
      fprintf(stderr, "vec_add wrong at %d: %f != %f\n", i, h_c[i], h_a[i] + h_b[i]);
      return 1;
    }
    if (h_x[i] != want_x) {
      fprintf(stderr, "scale wrong at %d: %g != %g\n", i, h_x[i], want_x);
      return 1;
    }
  }

  CU(cuMemFree, d_a);
  CU(cuMemFree, d_b);
  CU(cuMemFree, d_c);
  CU(cuMemFree, d_x);
  CU(cuModuleUnload, mod);
  CU(cuDevicePrimaryCtxRelease, dev);

  g_kernels[add_name] = iters;
  g_kernels[scale_name] = iters + 1;
  fprintf(stderr, "driver_api: %d iterations + 1 cluster launch, results ok\n", iters);
  printf("{\"expected\":");
  print_map(g_expected);
  printf(",\"kernels\":");
  print_map(g_kernels);
  printf(",\"iterations\":%d}\n", iters);
  return 0;
}
