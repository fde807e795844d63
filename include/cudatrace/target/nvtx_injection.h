// --nvtx: the NVTX injection library (src/target/nvtx_inject.c, docs/nvtx.md)
// that the traced program loads through NVTX_INJECTION64_PATH, whose
// functions cudatrace probes to see the program's ranges.
#pragma once

#include <memory>
#include <string>

namespace cudatrace {

// The injection library, built into cudatrace and written to a private
// directory for the traced command; removed again when this goes away.
class NvtxInjection {
 public:
  // nullptr with `error` set when the file cannot be written.
  static std::unique_ptr<NvtxInjection> create(std::string& error);
  ~NvtxInjection();
  const std::string& path() const { return path_; }

 private:
  NvtxInjection(std::string dir, std::string path) : dir_(std::move(dir)), path_(std::move(path)) {}
  std::string dir_, path_;
};

// Writes the injection library to `path` (for -p: start the program with
// NVTX_INJECTION64_PATH=path). False with `error` set on failure.
bool write_nvtx_library(const std::string& path, std::string& error);

}  // namespace cudatrace
