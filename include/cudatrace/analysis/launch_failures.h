// Launches that failed (issue 35): the first of each cause in a process is
// worth one clear warning that names the kernel and says why, since the
// status alone ("cudaErrorNoKernelImageForDevice") does not say what to do.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "cudatrace/decode/decode.h"

namespace cudatrace {

class LaunchFailures {
 public:
  // Whether `c` is a launch whose status is a cause not yet seen failing a
  // launch in its process.
  bool first_of_its_cause(const Call& c);
  void forget_process(std::uint32_t pid) { seen_.erase(pid); }

 private:
  std::map<std::uint32_t, std::set<std::int32_t>> seen_;  // statuses, by process
};

// What the process and machine say about a failed launch.
struct LaunchFacts {
  std::string site;                   // the call site, "app+0x1234 (main+0x2a)"
  std::string func_site;              // where its kernel argument points, when that is in a file
  std::string code;                   // the GPU code of the file that launched: "app holds sm_80 only, no PTX"
};

// One line: which launch failed, how, and what that means, e.g.
// "cudaLaunchKernel of addOne failed with cudaErrorNoKernelImageForDevice at app+0x1234 (main+0x2a): no code
// for this GPU: app holds sm_80 only, no PTX; ...".
std::string launch_failure_message(const Call& c, const LaunchFacts& facts);

}  // namespace cudatrace
