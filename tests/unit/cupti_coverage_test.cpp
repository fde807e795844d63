// "-f all is all" (issue 35): every function CUPTI reports a callback for
// (the toolkit's cupti_runtime_cbid.h and cupti_driver_cbid.h) that the
// toolkit's libcudart.so.13 or stub libcuda.so exports has a row, probed under
// the same name. Skipped where the toolkit is absent.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <unordered_set>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/target/elf_file.h"

namespace {

using namespace cudatrace;

// Exports that CUPTI names but that have no row, and why.
const std::set<std::string> kNoRow = {
    // Each is a bare `jmp cudaLaunchKernel` (`_ptsz`), which is probed
    // (tests/fixtures/real_app.cu): a row of its own would count every
    // launch nvcc's stubs make twice.
    "__cudaLaunchKernel",
    "__cudaLaunchKernel_ptsz",
};

// The function names of `header`'s CBIDs, each as written and without its
// version tag (cudaMalloc_v3020: cudaMalloc; cuMemAlloc_v2: both names).
std::set<std::string> cbid_functions(const std::string& header, const std::string& prefix) {
  std::set<std::string> names;
  std::ifstream in(header);
  const std::regex cbid("\\s*" + prefix + "(\\w+?)(_v\\d+)?\\s*=.*");
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_match(line, m, cbid)) {
      names.insert(m[1].str() + m[2].str());
      names.insert(m[1].str());
    }
  return names;
}

void expect_rows_for_exports(const std::string& header, const std::string& prefix, const std::string& library) {
  std::ifstream probe(header);
  if (!probe || access(library.c_str(), R_OK) != 0) GTEST_SKIP() << "no " << header << " or " << library;
  const std::set<std::string> named = cbid_functions(header, prefix);
  ASSERT_GT(named.size(), 100u) << header << ": its CBIDs could not be read";
  std::string error;
  auto elf = ElfFile::open(library, error);
  ASSERT_NE(elf, nullptr) << error;
  const std::unordered_set<std::string_view> wanted(named.begin(), named.end());
  const auto exported = elf->find_functions(wanted);
  EXPECT_GT(exported.size(), 100u) << library;
  for (const auto& [name, address] : exported)
    if (!kNoRow.count(name)) EXPECT_NE(api_by_symbol(name), nullptr) << name << " (" << library << ") has no row";
  for (const std::string& name : kNoRow)
    if (named.count(name)) EXPECT_EQ(api_by_symbol(name), nullptr) << name;
}

TEST(CuptiCoverage, EveryRuntimeFunctionCuptiReportsAndLibcudartExportsHasARow) {
  expect_rows_for_exports(CUDA_TOOLKIT_INCLUDE "/cupti_runtime_cbid.h", "CUPTI_RUNTIME_TRACE_CBID_",
                          CUDA_TOOLKIT_INCLUDE "/../lib64/libcudart.so.13");
}

TEST(CuptiCoverage, EveryDriverFunctionCuptiReportsAndTheStubLibcudaExportsHasARow) {
  // No libcuda without a driver: the toolkit's stub exports the same functions.
  expect_rows_for_exports(CUDA_TOOLKIT_INCLUDE "/cupti_driver_cbid.h", "CUPTI_DRIVER_TRACE_CBID_",
                          CUDA_TOOLKIT_INCLUDE "/../lib64/stubs/libcuda.so");
}

}  // namespace
