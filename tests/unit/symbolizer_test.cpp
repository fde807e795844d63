#include "cudatrace/target/symbolizer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

// A host function and a constant string with known addresses in this binary.
extern "C" __attribute__((noinline, used)) int cudatrace_unit_symbolizer_stub(int x) {
  asm volatile("" ::: "memory");
  return x + 7;
}
extern "C" {
__attribute__((used)) const char cudatrace_unit_rodata_string[] = "_Z17rodataKernelNamev";
}

namespace {

using namespace cudatrace;

std::uint64_t addr_of(const void* p) { return reinterpret_cast<std::uint64_t>(p); }
std::uint64_t stub_addr() { return reinterpret_cast<std::uint64_t>(&cudatrace_unit_symbolizer_stub); }

// ---- read_process_string ---------------------------------------------------

TEST(ReadProcessString, ReadsOwnMemory) {
  const std::string heap = "a string on the heap, longer than the small-string buffer";
  std::string out = "stale";
  ASSERT_TRUE(read_process_string(getpid(), addr_of(heap.c_str()), 4096, out));
  EXPECT_EQ(out, heap);
  ASSERT_TRUE(read_process_string(getpid(), addr_of(cudatrace_unit_rodata_string), 4096, out));
  EXPECT_EQ(out, "_Z17rodataKernelNamev");
}

TEST(ReadProcessString, EmptyString) {
  const char empty[1] = {'\0'};
  std::string out = "stale";
  ASSERT_TRUE(read_process_string(getpid(), addr_of(empty), 16, out));
  EXPECT_EQ(out, "");
}

TEST(ReadProcessString, LongerThanMaxFails) {
  const std::string s(100, 'k');
  std::string out;
  EXPECT_FALSE(read_process_string(getpid(), addr_of(s.c_str()), 100, out));  // NUL is byte 101
  EXPECT_TRUE(read_process_string(getpid(), addr_of(s.c_str()), 101, out));
  EXPECT_EQ(out, s);
}

TEST(ReadProcessString, LongStringAcrossManyChunks) {
  std::string s(3000, '\0');
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>('A' + i % 26);
  std::string out;
  ASSERT_TRUE(read_process_string(getpid(), addr_of(s.c_str()), 4096, out));
  EXPECT_EQ(out, s);
}

class TwoPages : public ::testing::Test {
 protected:
  void SetUp() override {
    page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    base_ = static_cast<char*>(p);
    std::memset(base_, 'x', 2 * page_);
  }
  void TearDown() override {
    if (base_) munmap(base_, 2 * page_);
  }
  std::size_t page_ = 4096;
  char* base_ = nullptr;
};

TEST_F(TwoPages, StringCrossingAPageBoundary) {
  char* s = base_ + page_ - 5;
  std::memcpy(s, "0123456789", 11);
  std::string out;
  ASSERT_TRUE(read_process_string(getpid(), addr_of(s), 256, out));
  EXPECT_EQ(out, "0123456789");
}

TEST_F(TwoPages, StringEndingAtAnUnreadablePage) {
  ASSERT_EQ(mprotect(base_ + page_, page_, PROT_NONE), 0);
  // NUL is the last byte of the readable page: fine.
  char* s = base_ + page_ - 4;
  std::memcpy(s, "abc", 4);
  std::string out;
  ASSERT_TRUE(read_process_string(getpid(), addr_of(s), 256, out));
  EXPECT_EQ(out, "abc");
  // No NUL before the unreadable page: not a string we can read.
  s[3] = 'd';
  EXPECT_FALSE(read_process_string(getpid(), addr_of(s), 256, out));
}

TEST(ReadProcessString, UnmappedAddressFails) {
  std::string out;
  EXPECT_FALSE(read_process_string(getpid(), 0, 64, out));
  EXPECT_FALSE(read_process_string(getpid(), 0xffffffffffff0000ull, 64, out));
}

// ---- Symbolizer --------------------------------------------------------------

TEST(Symbolizer, FunctionAtExactStartOfAFunctionInThisProcess) {
  Symbolizer sym;
  EXPECT_EQ(sym.function_at(getpid(), stub_addr()), "cudatrace_unit_symbolizer_stub");
  EXPECT_EQ(sym.function_at(getpid(), stub_addr() + 1), "");  // inside: not a kernel stub address
  int local = 0;
  EXPECT_EQ(sym.function_at(getpid(), addr_of(&local)), "");  // stack: not executable
  EXPECT_EQ(sym.function_at(getpid(), 0), "");
  EXPECT_EQ(cudatrace_unit_symbolizer_stub(0), 7);
}

TEST(Symbolizer, StringAtLiveProcess) {
  Symbolizer sym;
  const std::string heap = "kernel_name_on_the_heap_0123456789";
  std::string out;
  ASSERT_TRUE(sym.string_at(getpid(), addr_of(heap.c_str()), 256, out));
  EXPECT_EQ(out, heap);
}

TEST(Symbolizer, CapturedMappingsOutliveTheProcess) {
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const std::string heap = "heap_string_not_in_any_file";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(go[1]);
    char c;
    (void)!read(go[0], &c, 1);
    _exit(0);
  }
  close(go[0]);
  std::vector<Mapping> maps;
  const bool got_maps = read_maps(child, maps);
  Symbolizer sym;
  if (got_maps) sym.capture(child, maps);
  close(go[1]);  // the child exits
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(got_maps);
  ASSERT_FALSE(process_exists(child));

  // The child was a fork of this process: same addresses.
  EXPECT_EQ(sym.function_at(child, stub_addr()), "cudatrace_unit_symbolizer_stub");
  std::string out;
  ASSERT_TRUE(sym.string_at(child, addr_of(cudatrace_unit_rodata_string), 256, out));
  EXPECT_EQ(out, "_Z17rodataKernelNamev");
  // Anonymous memory died with the process.
  EXPECT_FALSE(sym.string_at(child, addr_of(heap.c_str()), 256, out));
}

// A mapping made after the capture with no loader notification (as the
// kernel's [uprobes] page is) is found by reading the mappings again, once.
TEST(Symbolizer, MappingMadeAfterTheCaptureIsFound) {
  Symbolizer sym;
  ASSERT_TRUE(sym.locate(getpid(), stub_addr()).function == "cudatrace_unit_symbolizer_stub");  // captured
  const int fd = open("/bin/true", O_RDONLY);
  ASSERT_GE(fd, 0);
  void* late = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
  close(fd);
  ASSERT_NE(late, MAP_FAILED);
  const Symbolizer::Location loc = sym.locate(getpid(), addr_of(late) + 16);
  EXPECT_NE(loc.module.find("true"), std::string::npos) << loc.module;
  EXPECT_EQ(loc.module_offset, 16u);
  // One read again per capture: a second late mapping waits for the next capture.
  const int fd2 = open("/bin/true", O_RDONLY);
  ASSERT_GE(fd2, 0);
  void* later = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd2, 0);
  close(fd2);
  ASSERT_NE(later, MAP_FAILED);
  EXPECT_EQ(sym.locate(getpid(), addr_of(later)).module, "");
  std::vector<Mapping> maps;
  ASSERT_TRUE(read_maps(getpid(), maps));
  sym.capture(getpid(), maps);
  EXPECT_NE(sym.locate(getpid(), addr_of(later)).module.find("true"), std::string::npos);
  munmap(late, 4096);
  munmap(later, 4096);
}

// A named anonymous mapping keeps its name (OpenTelemetry's process
// context is found by it: target/thread_context.cpp); a file has none.
TEST(Symbolizer, MapsKeepTheNamesOfAnonymousMappings) {
  void* area = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(area, MAP_FAILED);
  // Kernels without CONFIG_ANON_VMA_NAME name none: the stack's name is checked still.
  const bool can_name = prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, area, 4096, "cudatrace_test") == 0;
  std::vector<Mapping> maps;
  ASSERT_TRUE(read_maps(getpid(), maps));
  munmap(area, 4096);
  bool named = false, stack = false;
  for (const Mapping& m : maps) {
    if (can_name && m.start == addr_of(area)) {
      EXPECT_EQ(m.name, "[anon:cudatrace_test]");
      EXPECT_EQ(m.path, "");
      named = true;
    }
    stack = stack || m.name == "[stack]";
    if (!m.path.empty()) EXPECT_EQ(m.name, "") << m.path;
  }
  EXPECT_EQ(named, can_name);
  EXPECT_TRUE(stack);
}

TEST(Symbolizer, UnknownGoneProcessGivesNothing) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  Symbolizer sym;
  EXPECT_EQ(sym.function_at(child, stub_addr()), "");
  std::string out;
  EXPECT_FALSE(sym.string_at(child, addr_of(cudatrace_unit_rodata_string), 256, out));
}

// More words than one system call reads, one of them unmapped: each mapped
// word is read, the unmapped one is 0, and the read goes on past it.
TEST(ReadProcessWords, ReadsPastAnUnreadableWordInBatches) {
  std::vector<std::uint64_t> words(3000);
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = 0x1000 + i;
  std::vector<std::uint64_t> addrs;
  for (const std::uint64_t& w : words) addrs.push_back(reinterpret_cast<std::uint64_t>(&w));
  addrs[1500] = 8;  // the zero page: never mapped
  const std::vector<std::uint64_t> got = read_process_words(getpid(), addrs);
  ASSERT_EQ(got.size(), words.size());
  for (std::size_t i = 0; i < words.size(); ++i) EXPECT_EQ(got[i], i == 1500 ? 0u : words[i]) << i;
  EXPECT_TRUE(read_process_words(getpid(), {}).empty());
}

}  // namespace
