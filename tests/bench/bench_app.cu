// Benchmark workload: a tight loop of one cheap CUDA call, timed inside the
// process so that tracer start-up and exit do not count.
//   bench_app getdevice N      N x cudaGetDevice
//   bench_app launch N         N x empty kernel <<<1,1>>> (cudaLaunchKernel)
//   bench_app copy N           N x cudaMemcpyAsync of 4 bytes device to device on a stream
//   bench_app event N          N x cudaEventRecord on a stream
//   bench_app threads T N      T threads, each N x cudaGetDevice
// Prints one line on stderr: "bench: calls=C ns_per_call=X last_error=E".
// Without a GPU driver every call fails fast with an error: the probes still
// fire on the real library code, which is what is measured.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

__global__ void empty_kernel() {}

namespace {

cudaError_t getdevice_loop(long n) {
  int device = 0;
  cudaError_t last = cudaSuccess;
  for (long i = 0; i < n; ++i) last = cudaGetDevice(&device);
  return last;
}

cudaError_t launch_loop(long n) {
  for (long i = 0; i < n; ++i) empty_kernel<<<1, 1>>>();
  return cudaDeviceSynchronize();
}

// The queued operations of issue 35's cost table: one stream, its work
// waited for once at the end.
cudaError_t copy_loop(long n) {
  cudaStream_t s = nullptr;
  void *src = nullptr, *dst = nullptr;
  cudaStreamCreate(&s);
  cudaMalloc(&src, 4);
  cudaMalloc(&dst, 4);
  cudaError_t last = cudaSuccess;
  for (long i = 0; i < n; ++i) last = cudaMemcpyAsync(dst, src, 4, cudaMemcpyDeviceToDevice, s);
  cudaStreamSynchronize(s);
  return last;
}

cudaError_t event_loop(long n) {
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  cudaStreamCreate(&s);
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  cudaError_t last = cudaSuccess;
  for (long i = 0; i < n; ++i) last = cudaEventRecord(e, s);
  cudaStreamSynchronize(s);
  return last;
}

int usage() {
  std::fprintf(stderr, "usage: bench_app getdevice N | launch N | copy N | event N | threads T N\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const char* mode = argv[1];
  long threads = 1, n = 0;
  if (std::strcmp(mode, "threads") == 0) {
    if (argc < 4) return usage();
    threads = std::atol(argv[2]);
    n = std::atol(argv[3]);
  } else {
    n = std::atol(argv[2]);
  }
  if (n <= 0 || threads <= 0) return usage();

  int device = 0;
  cudaGetDevice(&device);  // runtime initialisation outside the timed loop
  const auto start = std::chrono::steady_clock::now();
  cudaError_t last = cudaSuccess;
  if (std::strcmp(mode, "getdevice") == 0) {
    last = getdevice_loop(n);
  } else if (std::strcmp(mode, "launch") == 0) {
    last = launch_loop(n);
  } else if (std::strcmp(mode, "copy") == 0) {
    last = copy_loop(n);
  } else if (std::strcmp(mode, "event") == 0) {
    last = event_loop(n);
  } else if (std::strcmp(mode, "threads") == 0) {
    std::vector<std::thread> pool;
    for (long t = 0; t < threads; ++t) pool.emplace_back([n] { getdevice_loop(n); });
    for (auto& th : pool) th.join();
  } else {
    return usage();
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  const long calls = n * threads;
  std::fprintf(stderr, "bench: calls=%ld ns_per_call=%.2f elapsed_s=%.4f last_error=%d\n", calls, ns / double(calls),
               ns / 1e9, int(last));
  return 0;
}
