// What GPU code a program's file holds: the fact behind a launch that failed
// for want of code for the GPU (cudaErrorNoKernelImageForDevice, issue 35).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cudatrace {

// The architectures of the code in a file's fat binaries (.nv_fatbin, as nvcc
// embeds them): machine code (cubins, "sm_80") and PTX the driver can compile
// for a newer GPU ("compute_80"); 80 is 8.0. Sorted, each once.
struct GpuCode {
  std::vector<unsigned> cubins, ptx;
  bool empty() const { return cubins.empty() && ptx.empty(); }
};

// From the bytes of a .nv_fatbin section: a run of fat binaries, each a
// header (magic 0xBA55ED50) and entries (PTX or ELF) that name their
// architecture. What cannot be read ends the walk.
GpuCode gpu_code_of_fatbins(std::string_view section);

// "sm_80, sm_90 and PTX for compute_90"; "no GPU code" when empty.
std::string describe(const GpuCode& code);

}  // namespace cudatrace
