// Where the CUDA driver keeps a kernel's name behind the handles a program
// holds (issue 37): for each kind of handle, the paths from the handle's
// address to the name that this process knows it by. A path is up to two
// steps: the name inline at handle+A; a pointer at handle+A to the name; or
// a pointer at handle+A to a block whose word at +B points to the name (or
// holds it inline). Memory is read with process_vm_readv on this process, so
// an address that is not mapped costs a failed read, never a crash.
// Usage: handle_layout FATBIN   (driver_kernels.fatbin of build.sh)
// Prints, for every handle, the paths found; then the paths every handle of a
// kind shares.
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

__global__ void runtime_kernel_one(float* p) { if (p) p[0] = 1; }
namespace ns {
__global__ void runtime_kernel_two(float* p, int n) { if (p) p[n] = 2; }
}

static bool read_self(std::uint64_t addr, void* out, std::size_t n) {
  iovec local{out, n}, remote{reinterpret_cast<void*>(addr), n};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

static bool name_at(std::uint64_t addr, const std::string& name) {
  std::vector<char> buf(name.size() + 1);
  return read_self(addr, buf.data(), buf.size()) && std::memcmp(buf.data(), name.c_str(), name.size() + 1) == 0;
}

constexpr int kSpan = 1024;  // bytes of a block searched

static std::set<std::string> paths_to(std::uint64_t handle, const std::string& name) {
  std::set<std::string> out;
  std::vector<std::uint64_t> words(kSpan / 8);
  if (!read_self(handle, words.data(), kSpan)) {
    // The block may end before kSpan bytes: read what fits.
    for (int i = 0; i < kSpan / 8; ++i)
      if (!read_self(handle + 8 * i, &words[i], 8)) words[i] = 0;
  }
  for (int a = 0; a < kSpan; a += 8) {
    if (name_at(handle + a, name)) out.insert("inline+" + std::to_string(a));
    const std::uint64_t p = words[a / 8];
    if (p < 4096) continue;
    if (name_at(p, name)) out.insert("*+" + std::to_string(a));
    for (int b = 0; b < 512; b += 8) {
      std::uint64_t q = 0;
      if (name_at(p + b, name)) out.insert("*+" + std::to_string(a) + " inline+" + std::to_string(b));
      if (read_self(p + b, &q, 8) && q >= 4096 && name_at(q, name))
        out.insert("*+" + std::to_string(a) + " *+" + std::to_string(b));
    }
  }
  return out;
}

static std::map<std::string, std::vector<std::set<std::string>>> g_by_kind;

static void report(const char* kind, std::uint64_t handle, const std::string& name) {
  const std::set<std::string> paths = paths_to(handle, name);
  std::printf("%s %#lx %s:", kind, static_cast<unsigned long>(handle), name.c_str());
  for (const std::string& p : paths) std::printf(" [%s]", p.c_str());
  std::printf("\n");
  g_by_kind[kind].push_back(paths);
}

#define CU(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { std::fprintf(stderr, "%s: %d\n", #x, int(r)); return 1; } } while (0)

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  cudaFree(nullptr);  // the runtime's context
  FILE* f = std::fopen(argv[1], "rb");
  if (!f) return 2;
  std::vector<char> image;
  char buf[65536];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) image.insert(image.end(), buf, buf + n);
  std::fclose(f);
  image.push_back(0);
  const char* names[] = {"vec_add", "_ZN3drv5scaleEPffi"};
  CUmodule module;
  CU(cuModuleLoadData(&module, image.data()));
  CUlibrary library;
  CU(cuLibraryLoadData(&library, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  for (const char* name : names) {
    CUfunction fn;
    CU(cuModuleGetFunction(&fn, module, name));
    report("CUfunction(cuModuleGetFunction)", reinterpret_cast<std::uint64_t>(fn), name);
    CUkernel kernel;
    CU(cuLibraryGetKernel(&kernel, library, name));
    report("CUkernel(cuLibraryGetKernel)", reinterpret_cast<std::uint64_t>(kernel), name);
    CUfunction from_kernel;
    CU(cuKernelGetFunction(&from_kernel, kernel));
    report("CUfunction(cuKernelGetFunction)", reinterpret_cast<std::uint64_t>(from_kernel), name);
  }
  const std::pair<const void*, const char*> runtime[] = {
      {reinterpret_cast<const void*>(runtime_kernel_one), "_Z18runtime_kernel_onePf"},
      {reinterpret_cast<const void*>(ns::runtime_kernel_two), "_ZN2ns18runtime_kernel_twoEPfi"}};
  for (const auto& [stub, name] : runtime) {
    cudaKernel_t kernel;
    if (cudaGetKernel(&kernel, stub) == cudaSuccess)
      report("cudaKernel_t(cudaGetKernel)", reinterpret_cast<std::uint64_t>(kernel), name);
    cudaFunction_t fn;
    if (cudaGetFuncBySymbol(&fn, stub) == cudaSuccess)
      report("cudaFunction_t(cudaGetFuncBySymbol)", reinterpret_cast<std::uint64_t>(fn), name);
    CUfunction from_kernel;
    if (cuKernelGetFunction(&from_kernel, reinterpret_cast<CUkernel>(kernel)) == CUDA_SUCCESS)
      report("CUfunction(cuKernelGetFunction of cudaKernel_t)", reinterpret_cast<std::uint64_t>(from_kernel), name);
  }
  runtime_kernel_one<<<1, 1>>>(nullptr);
  cudaDeviceSynchronize();
  std::printf("\nshared by every handle of a kind:\n");
  for (const auto& [kind, all] : g_by_kind) {
    std::set<std::string> common = all.front();
    for (const auto& s : all) {
      std::set<std::string> both;
      for (const std::string& p : common)
        if (s.count(p)) both.insert(p);
      common = both;
    }
    std::printf("%s:", kind.c_str());
    for (const std::string& p : common) std::printf(" [%s]", p.c_str());
    std::printf("\n");
  }
  return 0;
}
