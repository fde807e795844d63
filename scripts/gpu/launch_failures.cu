// Launches that fail (issue 35), for checking that cudatrace shows each one
// with its status and says why once. Built twice by build.sh:
//   launch_failures_sm80: code for sm_80 only, no PTX: on an sm_90 GPU every
//     launch fails with cudaErrorNoKernelImageForDevice, in the runtime
//   launch_failures: code for this GPU; each scenario below fails one way
// Usage: launch_failures wrong-arch N | bad-config
//   wrong-arch N  N launches of scale<<<1, 32>>>, then cudaDeviceSynchronize
//   bad-config    2,048 threads a block; 4 MiB of dynamic shared memory; a
//                 host function as the kernel; then one good launch, then
//                 cudaDeviceSynchronize (which waits for that one alone)
// Prints one JSON line: {"expected":{api:count},"statuses":{api:[status,...]}}
// with what each launch returned, in order.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

__global__ void scale(float* data, float factor) {
  if (data) data[threadIdx.x] *= factor;
}

static void host_function(float*, float) {}

static std::vector<int> g_launches;
static int g_syncs = 0;

static void launch(const void* func, dim3 grid, dim3 block, size_t shared, float* data) {
  float factor = 2.0f;
  void* args[] = {&data, &factor};
  g_launches.push_back(int(cudaLaunchKernel(func, grid, block, args, shared, nullptr)));
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  float* d = nullptr;
  if (cudaMalloc(&d, 4096) != cudaSuccess) return 1;
  if (mode == "wrong-arch" && argc > 2) {
    const long n = std::atol(argv[2]);
    for (long i = 0; i < n; ++i) launch(reinterpret_cast<const void*>(scale), dim3(1), dim3(32), 0, d);
  } else if (mode == "bad-config") {
    launch(reinterpret_cast<const void*>(scale), dim3(1), dim3(2048), 0, d);
    launch(reinterpret_cast<const void*>(scale), dim3(1), dim3(32), 4 << 20, d);
    launch(reinterpret_cast<const void*>(host_function), dim3(1), dim3(32), 0, d);
    launch(reinterpret_cast<const void*>(scale), dim3(1), dim3(32), 0, d);
  } else {
    std::fprintf(stderr, "usage: launch_failures wrong-arch N | bad-config\n");
    return 2;
  }
  cudaGetLastError();  // the launch errors are not sticky: clear them before the synchronisation
  ++g_syncs;
  const int synced = int(cudaDeviceSynchronize());
  cudaFree(d);
  std::printf("{\"expected\":{\"cudaLaunchKernel\":%zu,\"cudaDeviceSynchronize\":%d},\"statuses\":{\"cudaLaunchKernel\":[",
              g_launches.size(), g_syncs);
  for (std::size_t i = 0; i < g_launches.size(); ++i) std::printf("%s%d", i ? "," : "", g_launches[i]);
  std::printf("],\"cudaDeviceSynchronize\":[%d]}}\n", synced);
  return 0;
}
