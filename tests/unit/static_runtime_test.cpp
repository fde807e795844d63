#include "cudatrace/target/static_runtime.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "cudatrace/target/elf_file.h"

namespace {

using namespace cudatrace;

// ---- The matcher on made-up code ------------------------------------------------

// A function of 40 bytes whose bytes 10..13 are a call's rel32 (masked) and
// whose key run starts at 20.
struct Synthetic {
  std::vector<unsigned char> code;
  RelocSite site{10, RelocSite::PcRelative, 0, 7};
  Fingerprint fingerprint{};
  FingerprintTable table{};

  Synthetic() {
    for (int i = 0; i < 40; ++i) code.push_back(static_cast<unsigned char>(0x40 + i));
    std::memset(&code[10], 0, 4);
    fingerprint = {"cudaMalloc", 40, code.data(), 20, 0, &site, 1};
    table = {&fingerprint, 1, "synthetic"};
  }
  // A copy of the function at `at` in `text` whose call goes to `target`.
  void place(std::string& text, std::size_t at, std::uint64_t target) const {
    std::memcpy(&text[at], code.data(), code.size());
    const auto disp = static_cast<std::int32_t>(target - (at + 10));
    std::memcpy(&text[at + 10], &disp, 4);
  }
};

TEST(StaticRuntimeMatcher, FindsTheOnlyCopyWhateverItsRelocatedBytes) {
  Synthetic s;
  std::string text(4096, '\x90');
  s.place(text, 1000, 3000);
  const auto found = match_fingerprints(text, 0, s.table);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].index, 0u);
  EXPECT_EQ(found[0].position, 1000u);
}

TEST(StaticRuntimeMatcher, FoundAtEveryAlignmentAndAtTheEdges) {
  // The code is read a word every kKeyStride bytes: every placement must
  // still line up with one of the key's windows.
  Synthetic s;
  std::vector<std::size_t> places;
  for (std::size_t at = 1000; at < 1000 + 2 * kKeyStride; ++at) places.push_back(at);
  places.push_back(0);
  places.push_back(4096 - s.code.size());
  for (std::size_t at : places) {
    std::string text(4096, '\x90');
    s.place(text, at, 3000);
    const auto found = match_fingerprints(text, 0, s.table);
    ASSERT_EQ(found.size(), 1u) << "at " << at;
    EXPECT_EQ(found[0].position, at);
  }
}

TEST(StaticRuntimeMatcher, AnUnmaskedByteThatDiffersIsNoMatch) {
  Synthetic s;
  std::string text(4096, '\x90');
  s.place(text, 1000, 3000);
  text[1000 + 35] ^= 1;
  EXPECT_TRUE(match_fingerprints(text, 0, s.table).empty());
}

TEST(StaticRuntimeMatcher, TwoCopiesAreAmbiguousAndNeitherIsReported) {
  Synthetic s;
  std::string text(4096, '\x90');
  s.place(text, 1000, 3000);
  s.place(text, 2000, 3000);
  EXPECT_TRUE(match_fingerprints(text, 0, s.table).empty());
}

TEST(StaticRuntimeMatcher, MatchesWhoseCallsDisagreeAreDropped) {
  // Two functions calling the same symbol (target id 7): found when both
  // calls land on one address, dropped when they do not.
  Synthetic a, b;
  for (auto& byte : b.code) byte ^= 0x80;  // a different function
  std::memset(&b.code[10], 0, 4);
  const Fingerprint both[] = {a.fingerprint, {"cudaFree", 40, b.code.data(), 20, 100, &b.site, 1}};
  const FingerprintTable table{both, 2, "synthetic"};
  std::string text(4096, '\x90');
  a.place(text, 1000, 3000);
  b.place(text, 1100, 3000);
  EXPECT_EQ(match_fingerprints(text, 0x400000, table).size(), 2u);
  b.place(text, 1100, 3500);
  EXPECT_TRUE(match_fingerprints(text, 0x400000, table).empty());
}

TEST(StaticRuntimeMatcher, NothingInFilesWithoutTheRuntime) {
  std::string error;
  auto self = ElfFile::open("/proc/self/exe", error);
  ASSERT_NE(self, nullptr) << error;
  EXPECT_TRUE(find_static_runtime(*self, static_runtime_fingerprints()).empty());
}

// ---- The compiled-in table against the toolkit it was made from --------------------

// The directory of the archive the table was made from ("" if none).
std::string toolkit_lib_dir() {
  const std::string source = static_runtime_fingerprints().source;
  const auto first = source.substr(0, source.find(' '));
  const auto slash = first.rfind('/');
  return slash == std::string::npos ? "" : first.substr(0, slash);
}

std::string toolkit_file(const std::string& name) {
  const std::string dir = toolkit_lib_dir();
  return !dir.empty() && access((dir + "/" + name).c_str(), R_OK) == 0 ? dir + "/" + name : "";
}

TEST(StaticRuntimeToolkit, TableHasEveryRuntimeApiTheToolkitRuntimeExports) {
  const std::string cudart = toolkit_file("libcudart.so.13");
  if (cudart.empty()) GTEST_SKIP() << "built without the CUDA 13 toolkit";
  std::string error;
  auto elf = ElfFile::open(cudart, error);
  ASSERT_NE(elf, nullptr) << error;
  std::unordered_set<std::string_view> runtime;
  for (const Api& a : apis())
    if (fingerprinted_runtime_api(a)) runtime.insert(a.symbol);
  // What no fingerprint finds, so gen_static_runtime leaves it out: __cudaGetProcAddress is 3 bytes,
  // __cudaRegisterFatBinary(End) have no kKeyRun bytes in a row without a relocation, and
  // __cudaRegisterVar and __cudaRegisterManagedVar are the same code calling different functions.
  const std::set<std::string> unfindable = {"__cudaGetProcAddress", "__cudaRegisterFatBinary",
                                            "__cudaRegisterFatBinaryEnd", "__cudaRegisterVar",
                                            "__cudaRegisterManagedVar"};
  std::set<std::string> exported, fingerprinted;
  for (const auto& [name, vaddr] : elf->find_functions(runtime))
    if (!unfindable.count(name)) exported.insert(name);
  const FingerprintTable& table = static_runtime_fingerprints();
  for (std::size_t i = 0; i < table.count; ++i) fingerprinted.insert(table.functions[i].name);
  EXPECT_EQ(fingerprinted, exported);
  EXPECT_EQ(fingerprinted_api_count(table), exported.size());
  EXPECT_GE(exported.size(), 40u);
}

struct Located {
  std::map<std::string, std::uint64_t> offset;  // API -> file offset
  std::set<std::int64_t> shifts;  // file offset - origin in the archive, over all functions
};

Located locate(const std::string& path) {
  Located out;
  std::string error;
  auto elf = ElfFile::open(path, error);
  EXPECT_NE(elf, nullptr) << error;
  if (!elf) return out;
  const FingerprintTable& table = static_runtime_fingerprints();
  std::map<std::string, std::uint32_t> origin;
  for (std::size_t i = 0; i < table.count; ++i) origin[table.functions[i].name] = table.functions[i].origin;
  for (const auto& [api, offset] : find_static_runtime(*elf, table)) {
    EXPECT_TRUE(out.offset.emplace(api->symbol, offset).second) << api->symbol << " twice";
    out.shifts.insert(static_cast<std::int64_t>(offset) - origin.at(api->symbol));
  }
  return out;
}

TEST(StaticRuntimeToolkit, FindsEveryFunctionInTheToolkitsCublas) {
  // cuBLAS and cuBLASLt link the very archive the table comes from: every
  // function is found, and all at one shift from their places in the archive
  // (the runtime's code copied as one block), which validates each match
  // against the archive's symbols.
  const FingerprintTable& table = static_runtime_fingerprints();
  for (const char* name : {"libcublas.so.13", "libcublasLt.so.13"}) {
    const std::string path = toolkit_file(name);
    if (path.empty()) GTEST_SKIP() << "no " << name << " beside the archive";
    const Located found = locate(path);
    EXPECT_EQ(found.offset.size(), table.count) << name;
    EXPECT_EQ(found.shifts.size(), 1u) << name;
  }
}

TEST(StaticRuntimeToolkit, FindsEveryFunctionInALibraryBuiltWithAnotherRuntimeBuild) {
  // cuDNN ships with the toolkit here but embeds a different build of the
  // runtime (functions at other relative places): the fingerprints still
  // find every function.
  const std::string path = toolkit_file("libcudnn_graph.so.9");
  if (path.empty()) GTEST_SKIP() << "no cuDNN beside the archive";
  const Located found = locate(path);
  EXPECT_EQ(found.offset.size(), static_runtime_fingerprints().count);
  EXPECT_GT(found.shifts.size(), 1u) << "expected another build of the runtime than the toolkit's";
}

TEST(StaticRuntimeToolkit, AChangedFunctionIsLeftOutAndTheOthersStillFound) {
  // What a runtime of another CUDA version looks like where one function's
  // code changed: a copy of libcublas with one compared byte of cudaMalloc
  // altered.
  const std::string path = toolkit_file("libcublas.so.13");
  if (path.empty()) GTEST_SKIP() << "no libcublas.so.13 beside the archive";
  const Located original = locate(path);
  ASSERT_EQ(original.offset.count("cudaMalloc"), 1u);
  const FingerprintTable& table = static_runtime_fingerprints();
  std::uint32_t key_offset = 0;
  for (std::size_t i = 0; i < table.count; ++i)
    if (std::string(table.functions[i].name) == "cudaMalloc") key_offset = table.functions[i].key_offset;
  char tmpl[] = "/tmp/cudatrace-unit-cublas-XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    bytes[original.offset.at("cudaMalloc") + key_offset] ^= 0x01;
    std::ofstream(tmpl, std::ios::binary) << bytes;
  }
  const Located changed = locate(tmpl);
  unlink(tmpl);
  EXPECT_EQ(changed.offset.count("cudaMalloc"), 0u);
  EXPECT_EQ(changed.offset.size(), original.offset.size() - 1);
}

TEST(StaticRuntimeToolkit, NothingInLibrariesWithoutAStaticRuntime) {
  // cuFFT reaches the driver without the runtime; CUPTI names
  // cuGetProcAddress but has no runtime either.
  for (const char* name : {"libcufft.so.12", "libcupti.so.13"}) {
    const std::string path = toolkit_file(name);
    if (path.empty()) continue;
    EXPECT_TRUE(locate(path).offset.empty()) << name;
  }
}

}  // namespace
