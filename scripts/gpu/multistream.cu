// Two-stream pipeline through the CUDA runtime API. Counts every runtime API
// call it makes and prints them, with the kernels it launched, as one JSON
// line: {"expected":{api:count,...},"kernels":{name:count,...}}.
// Usage: multistream [ITER]   (default 50)

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

// Names are counted after macro expansion, so a build with per-thread default
// streams would count e.g. cudaMemcpyAsync_ptsz, the symbol really called.
#define STR2(x) #x
#define STR(x) STR2(x)
#define CUDA(fn, ...) check(STR(fn), fn(__VA_ARGS__), __LINE__)

static std::map<std::string, long> g_expected;
static std::map<std::string, long> g_kernels;

static void check(const char *api, cudaError_t err, int line) {
  ++g_expected[api];
  if (err != cudaSuccess) {
    fprintf(stderr, "multistream.cu:%d: %s failed: %s (%d)\n", line, api,
            cudaGetErrorString(err), (int)err);
    exit(1);
  }
}

__global__ void scaleKernel(const float *in, float *out, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor;
}

namespace ns {
template <typename T>
__global__ void addKernel(const T *in, T addend, T *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + addend;
}
}  // namespace ns

// API calls a <<<>>> launch makes, which the compiler generates. Since CUDA
// 13 the stub calls __cudaLaunchKernel (a tail jump into cudaLaunchKernel)
// with a cudaKernel_t from __cudaGetKernel (called once per kernel), not
// cudaLaunchKernel with the host stub pointer as before.
static void count_chevron_launch(const void *kernel) {
  static std::map<const void *, bool> seen;
  ++g_expected["__cudaPushCallConfiguration"];
  ++g_expected["__cudaPopCallConfiguration"];
  if (!seen[kernel]) {
    seen[kernel] = true;
    ++g_expected["__cudaGetKernel"];
  }
  ++g_expected["__cudaLaunchKernel"];
  ++g_expected["cudaLaunchKernel"];
}

// Calls the compiler-generated module constructor makes before main (one
// fatbin, both kernels of this file) and its atexit handler makes after it.
static void count_module_registration() {
  ++g_expected["__cudaRegisterFatBinary"];
  g_expected["__cudaRegisterFunction"] += 2;
  ++g_expected["__cudaRegisterFatBinaryEnd"];
  ++g_expected["__cudaUnregisterFatBinary"];
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
  const int iters = argc > 1 ? atoi(argv[1]) : 50;
  if (iters <= 0) {
    fprintf(stderr, "usage: %s [ITER>0]\n", argv[0]);
    return 2;
  }
  const int n = 1 << 20;
  const size_t bytes = n * sizeof(float);
  const int block = 256, grid = (n + block - 1) / block;
  const float factor = 2.0f, addend = 1.0f;

  count_module_registration();
  int ndev = 0;
  CUDA(cudaGetDeviceCount, &ndev);
  if (ndev < 1) {
    fprintf(stderr, "no CUDA device\n");
    return 1;
  }

  cudaStream_t a, b;
  CUDA(cudaStreamCreateWithFlags, &a, cudaStreamNonBlocking);
  CUDA(cudaStreamCreateWithFlags, &b, cudaStreamNonBlocking);

  float *d_in, *d_scaled, *d_out, *h_in, *h_out;
  CUDA(cudaMalloc, (void **)&d_in, bytes);
  CUDA(cudaMalloc, (void **)&d_scaled, bytes);
  CUDA(cudaMalloc, (void **)&d_out, bytes);
  // The C API overloads: cuda_runtime.h's C++ ones (T**, or a flags
  // argument) would call cudaHostAlloc instead.
  CUDA(cudaMallocHost, (void **)&h_in, bytes);
  CUDA(cudaMallocHost, (void **)&h_out, bytes);
  for (int i = 0; i < n; ++i) h_in[i] = (float)(i % 1000);

  cudaEvent_t ev_start, ev_stop, ev_a, ev_b;
  CUDA(cudaEventCreate, &ev_start);
  CUDA(cudaEventCreate, &ev_stop);
  CUDA(cudaEventCreateWithFlags, &ev_a, cudaEventDisableTiming);
  CUDA(cudaEventCreateWithFlags, &ev_b, cudaEventDisableTiming);

  CUDA(cudaEventRecord, ev_start, a);
  // Every iteration writes the same values, so the overlap between stream
  // A's next iteration and stream B's reads of d_scaled cannot change results.
  for (int it = 0; it < iters; ++it) {
    CUDA(cudaMemcpyAsync, d_in, h_in, bytes, cudaMemcpyHostToDevice, a);
    count_chevron_launch((const void *)scaleKernel);
    scaleKernel<<<grid, block, 0, a>>>(d_in, d_scaled, factor, n);
    CUDA(cudaGetLastError);  // the launch's own error, counted like any call
    CUDA(cudaEventRecord, ev_a, a);
    CUDA(cudaStreamWaitEvent, b, ev_a, 0);
    count_chevron_launch((const void *)ns::addKernel<float>);
    ns::addKernel<float><<<grid, block, 0, b>>>(d_scaled, addend, d_out, n);
    CUDA(cudaGetLastError);
    CUDA(cudaMemcpyAsync, h_out, d_out, bytes, cudaMemcpyDeviceToHost, b);
    CUDA(cudaEventRecord, ev_b, b);
    if (it % 10 == 9) {
      CUDA(cudaStreamSynchronize, b);
      CUDA(cudaEventQuery, ev_b);  // complete after the sync: cudaSuccess
    }
  }
  // One launch through the public API with the host stub pointer, the form
  // code built with CUDA 12 and earlier uses. Same values as above.
  void *scale_args[] = {(void *)&d_in, (void *)&d_scaled, (void *)&factor, (void *)&n};
  CUDA(cudaLaunchKernel, (const void *)scaleKernel, dim3(grid), dim3(block), scale_args, 0, a);
  CUDA(cudaEventRecord, ev_stop, b);
  CUDA(cudaEventSynchronize, ev_stop);
  float ms = 0;
  CUDA(cudaEventElapsedTime, &ms, ev_start, ev_stop);
  CUDA(cudaDeviceSynchronize);

  for (int i = 0; i < n; ++i) {
    float want = h_in[i] * factor + addend;
    if (h_out[i] != want) {
      fprintf(stderr, "wrong result at %d: %f != %f\n", i, h_out[i], want);
      return 1;
    }
  }

  const char *name = nullptr;
  CUDA(cudaFuncGetName, &name, (const void *)scaleKernel);
  g_kernels[name] = iters + 1;
  CUDA(cudaFuncGetName, &name, (const void *)ns::addKernel<float>);
  g_kernels[name] = iters;

  CUDA(cudaFree, d_in);
  CUDA(cudaFree, d_scaled);
  CUDA(cudaFree, d_out);
  CUDA(cudaFreeHost, h_in);
  CUDA(cudaFreeHost, h_out);
  CUDA(cudaEventDestroy, ev_start);
  CUDA(cudaEventDestroy, ev_stop);
  CUDA(cudaEventDestroy, ev_a);
  CUDA(cudaEventDestroy, ev_b);
  CUDA(cudaStreamDestroy, a);
  CUDA(cudaStreamDestroy, b);
  int dev = -1;
  CUDA(cudaGetDevice, &dev);
  CUDA(cudaGetDeviceCount, &ndev);

  fprintf(stderr, "multistream: %d iterations, %.3f ms, results ok\n", iters, ms);
  printf("{\"expected\":");
  print_map(g_expected);
  printf(",\"kernels\":");
  print_map(g_kernels);
  printf(",\"iterations\":%d}\n", iters);
  return 0;
}
