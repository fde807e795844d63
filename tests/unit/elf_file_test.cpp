#include "cudatrace/target/elf_file.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cudatrace/target/process.h"

// A function with a known name for the symbol-table tests.
extern "C" __attribute__((noinline, used)) int cudatrace_unit_marker_function(int x) {
  asm volatile("" ::: "memory");
  return x * 3 + 1;
}
// A data object: its address is in no executable segment.
extern "C" {
__attribute__((used)) int cudatrace_unit_marker_data[64] = {1};
}

namespace {

using namespace cudatrace;

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The mapping of this process that holds `addr`, or nullptr.
const Mapping* mapping_at(const std::vector<Mapping>& maps, std::uint64_t addr) {
  for (const Mapping& m : maps)
    if (addr >= m.start && addr < m.end) return &m;
  return nullptr;
}

// A scratch directory, removed with its files afterwards.
class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/cudatrace-unit-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& f : files_) unlink(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string write(const std::string& name, const std::string& content, mode_t mode = 0644) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << content;
    chmod(path.c_str(), mode);
    files_.push_back(path);
    return path;
  }
  static std::string header_bytes(const Elf64_Ehdr& eh) { return std::string(reinterpret_cast<const char*>(&eh), sizeof eh); }
  static Elf64_Ehdr x86_64_header() {
    Elf64_Ehdr eh{};
    std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_type = ET_DYN;
    eh.e_machine = EM_X86_64;
    eh.e_version = EV_CURRENT;
    eh.e_ehsize = sizeof(Elf64_Ehdr);
    eh.e_phentsize = sizeof(Elf64_Phdr);
    eh.e_shentsize = sizeof(Elf64_Shdr);
    return eh;
  }

  std::string dir_;
  std::vector<std::string> files_;
};

// ---- ElfFile on the test binary ---------------------------------------------

TEST(ElfFileSelf, OpensTheTestBinary) {
  std::string error;
  auto elf = ElfFile::open("/proc/self/exe", error);
  ASSERT_NE(elf, nullptr) << error;
  EXPECT_TRUE(error.empty());
  EXPECT_EQ(elf->path(), "/proc/self/exe");
  EXPECT_TRUE(elf->has_symtab()) << "the test binary is expected to be unstripped";
}

// The resident KiB of the mapping that holds `addr`, from /proc/self/smaps.
std::size_t resident_kib_at(const void* addr) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long from = 0, to = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &from, &to) == 2) inside = a >= from && a < to;
    std::size_t kib = 0;
    if (inside && std::sscanf(line.c_str(), "Rss: %zu kB", &kib) == 1) return kib;
  }
  return 0;
}

// A scan of a whole file costs the tracer's RSS nothing once it lets go
// (issue 37: a 100 MB .text made the peak RSS 190 MiB).
TEST(ElfFileSelf, ReleasedPagesLeaveTheResidentSetAndReadTheSameAgain) {
  std::string error;
  auto elf = ElfFile::open("/proc/self/exe", error);
  ASSERT_NE(elf, nullptr) << error;
  const std::string_view all = elf->contents();
  ASSERT_GT(all.size(), std::size_t(8) << 20) << "a test binary of some size";
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < all.size(); i += 4096) sum += static_cast<unsigned char>(all[i]);
  const std::size_t touched = resident_kib_at(all.data());
  EXPECT_GT(touched, all.size() / 1024 / 2);
  elf->release(all);
  EXPECT_LT(resident_kib_at(all.data()), touched / 8) << "released";
  std::uint64_t again = 0;
  for (std::size_t i = 0; i < all.size(); i += 4096) again += static_cast<unsigned char>(all[i]);
  EXPECT_EQ(again, sum) << "read back from the page cache";
  // A scan releases as it goes.
  elf->release(all);
  {
    ReleasingScan scan(*elf, all, 4096);
    for (std::size_t i = 0; i < all.size(); i += 4096) {
      scan.at(i);
      again += static_cast<unsigned char>(all[i]);
    }
    EXPECT_LT(resident_kib_at(all.data()), std::size_t(32) << 10) << "at most a few steps resident";
  }
  EXPECT_LT(resident_kib_at(all.data()), touched / 8) << "all of it released at the end";
  elf->release(all.substr(1, 10));  // less than a page: nothing to do, nothing broken
  elf->release(std::string_view("not of the file"));
}

// The KiB of [data, data + size) that this process has mapped in its page
// tables (/proc/self/pagemap: bit 63, present): what the tracer's RSS holds
// of that range, and of nothing around it.
std::size_t mapped_kib(const char* data, std::size_t size) {
  const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(data) / page;
  const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(data) + size + page - 1) / page;
  std::vector<std::uint64_t> entries(end - first);
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SIZE_MAX;
  const ssize_t got = pread(fd, entries.data(), entries.size() * 8, static_cast<off_t>(first * 8));
  close(fd);
  if (got != static_cast<ssize_t>(entries.size() * 8)) return SIZE_MAX;
  std::size_t present = 0;
  for (std::uint64_t e : entries) present += e >> 63;
  return present * page / 1024;
}

// Naming an address reads the symbol tables whole once, to index them,
// then only the entry it finds: the tables do not stay in the tracer's RSS
// (issue 37: libtorch_cuda's symbols, over a hundred MiB, stayed resident).
// Measured on the tables' own pages: the mapping's whole RSS also holds the
// headers and whatever the kernel maps around them, which differ by build.
TEST(ElfFileSelf, SymbolLookupsKeepOnlyThePagesOfWhatTheyFind) {
  std::string error;
  std::vector<FunctionSymbol> functions;
  {
    auto listing = ElfFile::open("/proc/self/exe", error);
    ASSERT_NE(listing, nullptr) << error;
    for (const FunctionSymbol& f : listing->functions()) functions.push_back({{}, f.address, f.size});
    listing->release(listing->contents());
  }
  ASSERT_GT(functions.size(), 1000u);
  auto elf = ElfFile::open("/proc/self/exe", error);
  ASSERT_NE(elf, nullptr) << error;
  const std::string_view all = elf->contents();
  std::vector<std::string_view> tables;
  for (const char* name : {".dynsym", ".dynstr", ".symtab", ".strtab"})
    if (const auto s = elf->section(name)) tables.push_back(all.substr(s->offset, s->size));
  const auto tables_mapped_kib = [&] {
    std::size_t kib = 0;
    for (std::string_view t : tables) kib += mapped_kib(t.data(), t.size());
    return kib;
  };
  std::size_t tables_kib = 0;
  for (std::string_view t : tables) tables_kib += t.size() / 1024;
  // What one read maps: a page with the kernel's fault-around (64 KiB) or a
  // large folio around it. The largest of a few reads across the tables.
  std::size_t window_kib = 0;
  for (std::string_view t : tables)
    for (std::size_t i = 1; i <= 4; ++i) {
      elf->release(all);
      volatile char c = t[t.size() * i / 5];
      (void)c;
      window_kib = std::max(window_kib, tables_mapped_kib());
    }
  elf->release(all);
  // A page that a table shares with its neighbours (the file's last one, with
  // the section headers) is not the table's to let go of.
  const std::size_t boundary_kib = tables.size() * 2 * sysconf(_SC_PAGESIZE) / 1024;
  ASSERT_LE(tables_mapped_kib(), boundary_kib) << "released";
  ASSERT_GT(tables_kib, 4 * window_kib) << "tables of some size";
  // Without the releases, the lookups below would map windows across all of
  // the tables; a quarter of them is the most any window sizes explain.
  const std::size_t most_kib = std::max(2 * window_kib + boundary_kib, tables_kib / 4);
  // Each lookup maps its entry's and its name's windows, beside the index's
  // scan, which keeps at most the pages it shares with what lies around the
  // tables; every kLookupsBetweenReleases-th lets go of all that: after
  // 2 x that many, only the last one's windows remain.
  const std::size_t lookups = 2 * ElfFile::kLookupsBetweenReleases;
  std::size_t found = 0;
  for (std::size_t n = 0; n < lookups; ++n) {
    const FunctionSymbol& wanted = functions[n * (functions.size() / lookups)];
    FunctionSymbol f;
    if (elf->function_at(wanted.address, f) && f.address == wanted.address) ++found;
  }
  EXPECT_EQ(found, lookups);
  EXPECT_LE(tables_mapped_kib(), most_kib)
      << "of " << tables_kib << " KiB of tables; one read maps up to " << window_kib << " KiB";
  // A search of the tables by name lets go of them too, all but the window
  // of the entry it found.
  EXPECT_EQ(elf->find_functions({"main"}).size(), 1u);
  EXPECT_LE(tables_mapped_kib(), most_kib)
      << "of " << tables_kib << " KiB of tables; one read maps up to " << window_kib << " KiB";
}

// glibc keeps old versions beside the current one, and in its .dynsym
// the old one may come first: pthread_cond_init@GLIBC_2.2.5 (LinuxThreads'
// ABI) before pthread_cond_init@@GLIBC_2.3.2, at other addresses. The one
// found is the one a program linked today calls, as the dynamic linker
// resolves it.
TEST(ElfFileLibc, FindsTheDefaultVersionOfAVersionedFunction) {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr);
  void* resolved = dlsym(libc, "pthread_cond_init");  // libc's own, not a sanitizer's interceptor
  Dl_info info{};
  ASSERT_TRUE(resolved && dladdr(resolved, &info) && info.dli_fname);
  std::string error;
  auto elf = ElfFile::open(info.dli_fname, error);
  ASSERT_NE(elf, nullptr) << error;
  const auto found = elf->find_functions({"pthread_cond_init"});
  ASSERT_EQ(found.count("pthread_cond_init"), 1u);
  EXPECT_EQ(found.at("pthread_cond_init"),
            reinterpret_cast<std::uintptr_t>(resolved) - reinterpret_cast<std::uintptr_t>(info.dli_fbase))
      << info.dli_fname;
  dlclose(libc);
}

TEST(ElfFileSelf, FindsAFunctionDefinedInTheTest) {
  std::string error;
  auto elf = ElfFile::open("/proc/self/exe", error);
  ASSERT_NE(elf, nullptr) << error;
  const auto found = elf->find_functions({"cudatrace_unit_marker_function", "no_such_function_xyz",
                                          "cudatrace_unit_marker_data"});
  ASSERT_EQ(found.count("cudatrace_unit_marker_function"), 1u);
  EXPECT_EQ(found.count("no_such_function_xyz"), 0u);
  EXPECT_EQ(found.count("cudatrace_unit_marker_data"), 0u);  // an object, not a function
  const std::uint64_t value = found.at("cudatrace_unit_marker_function");
  EXPECT_NE(value, 0u);

  std::uint64_t offset = 0;
  EXPECT_TRUE(elf->vaddr_to_offset(value, offset));
  std::uint64_t back = 0;
  EXPECT_TRUE(elf->offset_to_vaddr(offset, back));
  EXPECT_EQ(back, value);
  EXPECT_EQ(cudatrace_unit_marker_function(1), 4);
}

TEST(ElfFileSelf, TextSectionHoldsTheTestsFunctions) {
  std::string error;
  auto elf = ElfFile::open("/proc/self/exe", error);
  ASSERT_NE(elf, nullptr) << error;
  const auto text = elf->section(".text");
  ASSERT_TRUE(text);
  const std::uint64_t value = elf->find_functions({"cudatrace_unit_marker_function"}).at("cudatrace_unit_marker_function");
  EXPECT_GE(value, text->address);
  EXPECT_LT(value, text->address + text->size);
  std::uint64_t offset = 0;
  ASSERT_TRUE(elf->vaddr_to_offset(value, offset));
  EXPECT_EQ(offset - text->offset, value - text->address);
}

TEST(ElfFileSelf, FileOffsetMatchesTheExecutableMapping) {
  // What uprobes attach by: the file offset of the function must be where the
  // kernel mapped it (start + (addr - start) == file offset + delta).
  std::string error;
  auto elf = ElfFile::open("/proc/self/exe", error);
  ASSERT_NE(elf, nullptr) << error;
  const std::uint64_t value = elf->find_functions({"cudatrace_unit_marker_function"}).at("cudatrace_unit_marker_function");
  std::uint64_t offset = 0;
  ASSERT_TRUE(elf->vaddr_to_offset(value, offset));

  std::vector<Mapping> maps;
  ASSERT_TRUE(read_maps(getpid(), maps));
  const auto runtime = reinterpret_cast<std::uint64_t>(&cudatrace_unit_marker_function);
  const Mapping* m = mapping_at(maps, runtime);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->exec);
  EXPECT_EQ(m->path, self_exe());
  EXPECT_EQ(runtime - m->start + m->offset, offset);
  // And back: what the symbolizer does with a launched host stub address.
  std::uint64_t vaddr = 0;
  ASSERT_TRUE(elf->offset_to_vaddr(runtime - m->start + m->offset, vaddr));
  EXPECT_EQ(vaddr, value);
}

TEST(ElfFileSelf, FunctionsAreSortedAndIncludeTheMarker) {
  std::string error;
  auto elf = ElfFile::open("/proc/self/exe", error);
  ASSERT_NE(elf, nullptr) << error;
  const auto fns = elf->functions();
  ASSERT_FALSE(fns.empty());
  for (std::size_t i = 1; i < fns.size(); ++i) EXPECT_LT(fns[i - 1].address, fns[i].address) << fns[i].name;
  const auto it = std::find_if(fns.begin(), fns.end(),
                               [](const FunctionSymbol& f) { return f.name == "cudatrace_unit_marker_function"; });
  ASSERT_NE(it, fns.end());
  EXPECT_GT(it->size, 0u);
  EXPECT_EQ(it->address, elf->find_functions({"cudatrace_unit_marker_function"}).at("cudatrace_unit_marker_function"));
}

TEST(ElfFileSelf, DataAndWildAddressesHaveNoFileOffset) {
  std::string error;
  auto elf = ElfFile::open("/proc/self/exe", error);
  ASSERT_NE(elf, nullptr) << error;
  std::vector<Mapping> maps;
  ASSERT_TRUE(read_maps(getpid(), maps));
  const auto runtime = reinterpret_cast<std::uint64_t>(&cudatrace_unit_marker_data);
  const Mapping* m = mapping_at(maps, runtime);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->path, self_exe()) << "initialised data is file-backed";
  EXPECT_FALSE(m->exec);
  std::uint64_t data_vaddr = 0;
  ASSERT_TRUE(elf->offset_to_vaddr(runtime - m->start + m->offset, data_vaddr));
  std::uint64_t offset = 12345;
  EXPECT_FALSE(elf->vaddr_to_offset(data_vaddr, offset));  // writable data segment, not PF_X
  EXPECT_FALSE(elf->vaddr_to_offset(0xffffffffffff0000ull, offset));
  EXPECT_EQ(offset, 12345u);  // untouched on failure
}

// ---- ElfFile errors -----------------------------------------------------------

using ElfFileErrors = TempDir;

TEST_F(ElfFileErrors, NonElfFile) {
  const std::string path = write("notes.txt", std::string(200, 'x'));
  std::string error;
  EXPECT_EQ(ElfFile::open(path, error), nullptr);
  EXPECT_EQ(error, path + ": not an ELF file");
}

TEST_F(ElfFileErrors, ShortNonElfFile) {
  const std::string path = write("short", "#!/bin/sh\n");
  std::string error;
  EXPECT_EQ(ElfFile::open(path, error), nullptr);
  EXPECT_NE(error.find("not an ELF file"), std::string::npos) << error;
  EXPECT_EQ(error.rfind(path + ": ", 0), 0u) << error;
}

TEST_F(ElfFileErrors, EmptyFile) {
  const std::string path = write("empty", "");
  std::string error;
  EXPECT_EQ(ElfFile::open(path, error), nullptr);
  EXPECT_NE(error.find("not an ELF file"), std::string::npos) << error;
}

TEST_F(ElfFileErrors, Elf32Header) {
  Elf32_Ehdr eh32{};
  std::memcpy(eh32.e_ident, ELFMAG, SELFMAG);
  eh32.e_ident[EI_CLASS] = ELFCLASS32;
  eh32.e_ident[EI_DATA] = ELFDATA2LSB;
  eh32.e_ident[EI_VERSION] = EV_CURRENT;
  eh32.e_type = ET_EXEC;
  eh32.e_machine = EM_386;
  std::string bytes(reinterpret_cast<const char*>(&eh32), sizeof eh32);
  bytes.resize(64, '\0');  // big enough to pass the size check
  const std::string path = write("elf32", bytes);
  std::string error;
  EXPECT_EQ(ElfFile::open(path, error), nullptr);
  EXPECT_NE(error.find("not an x86-64 ELF64"), std::string::npos) << error;
  EXPECT_EQ(error.rfind(path + ": ", 0), 0u) << error;
}

TEST_F(ElfFileErrors, OtherMachineOrByteOrder) {
  Elf64_Ehdr eh = x86_64_header();
  eh.e_machine = EM_AARCH64;
  std::string error;
  EXPECT_EQ(ElfFile::open(write("arm64", header_bytes(eh)), error), nullptr);
  EXPECT_NE(error.find("not an x86-64 ELF64"), std::string::npos) << error;

  eh = x86_64_header();
  eh.e_ident[EI_DATA] = ELFDATA2MSB;
  error.clear();
  EXPECT_EQ(ElfFile::open(write("bigendian", header_bytes(eh)), error), nullptr);
  EXPECT_NE(error.find("not an x86-64 ELF64"), std::string::npos) << error;
}

TEST_F(ElfFileErrors, SectionTableOutsideTheFileIsCorrupt) {
  Elf64_Ehdr eh = x86_64_header();
  eh.e_shoff = 1 << 20;
  eh.e_shnum = 4;
  const std::string path = write("corrupt", header_bytes(eh));
  std::string error;
  EXPECT_EQ(ElfFile::open(path, error), nullptr);
  EXPECT_EQ(error, path + ": corrupt ELF headers");

  eh = x86_64_header();
  eh.e_shoff = 0;
  eh.e_shnum = 0xffff;  // 0xffff * 64 bytes: far past the end
  error.clear();
  EXPECT_EQ(ElfFile::open(write("corrupt2", header_bytes(eh)), error), nullptr);
  EXPECT_NE(error.find("corrupt ELF headers"), std::string::npos) << error;

  eh = x86_64_header();
  eh.e_shentsize = 40;  // an ELF32 section header size
  error.clear();
  EXPECT_EQ(ElfFile::open(write("corrupt3", header_bytes(eh)), error), nullptr);
  EXPECT_NE(error.find("corrupt ELF headers"), std::string::npos) << error;
}

TEST_F(ElfFileErrors, HeaderOnlyElfOpensWithNothingInIt) {
  const std::string path = write("bare", header_bytes(x86_64_header()));
  std::string error;
  auto elf = ElfFile::open(path, error);
  ASSERT_NE(elf, nullptr) << error;
  EXPECT_FALSE(elf->has_symtab());
  EXPECT_TRUE(elf->functions().empty());
  EXPECT_TRUE(elf->find_functions({"main"}).empty());
  std::uint64_t off;
  EXPECT_FALSE(elf->vaddr_to_offset(0x1000, off));
  std::uint64_t vaddr;
  EXPECT_FALSE(elf->offset_to_vaddr(0, vaddr));
  EXPECT_EQ(elf->contents().size(), sizeof(Elf64_Ehdr));
  EXPECT_EQ(elf->contents().substr(0, 4), "\x7f" "ELF");
  EXPECT_FALSE(elf->section(".text"));
}

TEST_F(ElfFileErrors, SectionReachingPastTheFileIsNotReturned) {
  std::string names("\0.text\0.rodata\0.shstrtab\0", 25);
  names.resize(32, '\0');  // the section headers that follow stay 8-byte aligned, as a linker leaves them
  Elf64_Ehdr eh = x86_64_header();
  eh.e_shoff = sizeof eh + names.size();
  eh.e_shnum = 4;
  eh.e_shstrndx = 3;
  Elf64_Shdr sh[4] = {};
  sh[1].sh_name = 1;  // .text: a megabyte the file does not have
  sh[1].sh_type = SHT_PROGBITS;
  sh[1].sh_offset = sizeof eh;
  sh[1].sh_size = 1 << 20;
  sh[2].sh_name = 7;  // .rodata: the names, in bounds
  sh[2].sh_type = SHT_PROGBITS;
  sh[2].sh_addr = 0x4000;
  sh[2].sh_offset = sizeof eh;
  sh[2].sh_size = names.size();
  sh[3].sh_name = 15;
  sh[3].sh_type = SHT_STRTAB;
  sh[3].sh_offset = sizeof eh;
  sh[3].sh_size = names.size();
  const std::string path =
      write("sections", header_bytes(eh) + names + std::string(reinterpret_cast<const char*>(sh), sizeof sh));
  std::string error;
  auto elf = ElfFile::open(path, error);
  ASSERT_NE(elf, nullptr) << error;
  EXPECT_FALSE(elf->section(".text"));
  const auto rodata = elf->section(".rodata");
  ASSERT_TRUE(rodata);
  EXPECT_EQ(rodata->address, 0x4000u);
  EXPECT_EQ(rodata->offset, sizeof eh);
  EXPECT_EQ(rodata->size, names.size());
  EXPECT_FALSE(elf->section(".data"));
}

TEST_F(ElfFileErrors, NonexistentPath) {
  const std::string path = dir_ + "/does-not-exist";
  std::string error;
  EXPECT_EQ(ElfFile::open(path, error), nullptr);
  EXPECT_EQ(error, path + ": No such file or directory");
}

TEST_F(ElfFileErrors, DirectoryIsNotARegularFile) {
  std::string error;
  EXPECT_EQ(ElfFile::open(dir_, error), nullptr);
  EXPECT_EQ(error, dir_ + ": not a regular file");
}

// ---- process.h ------------------------------------------------------------------

TEST(ProgramInterpreter, BinShUsesTheX86_64Loader) {
  const std::string interp = program_interpreter("/bin/sh");
  EXPECT_TRUE(ends_with(interp, "ld-linux-x86-64.so.2")) << interp;
  EXPECT_EQ(interp.front(), '/');
  EXPECT_EQ(interp.find('\0'), std::string::npos);
}

TEST(ProgramInterpreter, TestBinaryHasTheSameLoader) {
  EXPECT_EQ(program_interpreter(self_exe()), program_interpreter("/bin/sh"));
}

using ProgramInterpreterFiles = TempDir;

TEST_F(ProgramInterpreterFiles, ScriptResolvesThroughItsShebang) {
  const std::string expected = program_interpreter("/bin/sh");
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(program_interpreter(write("a.sh", "#!/bin/sh\necho hi\n", 0755)), expected);
  EXPECT_EQ(program_interpreter(write("b.sh", "#! /bin/sh -eu\necho hi\n", 0755)), expected);
}

TEST_F(ProgramInterpreterFiles, ScriptThroughAnotherScript) {
  // Linux runs nested interpreters; so does the resolution.
  const std::string inner = write("inner.sh", "#!/bin/sh\n", 0755);
  const std::string outer = write("outer", "#!" + inner + "\n", 0755);
  EXPECT_EQ(program_interpreter(outer), program_interpreter("/bin/sh"));
}

TEST_F(ProgramInterpreterFiles, UnresolvableCasesGiveEmpty) {
  EXPECT_EQ(program_interpreter(dir_ + "/missing"), "");
  EXPECT_EQ(program_interpreter(write("text", "just text\n")), "");
  EXPECT_EQ(program_interpreter(write("empty", "")), "");
  EXPECT_EQ(program_interpreter(write("bang-only", "#!\n", 0755)), "");
  EXPECT_EQ(program_interpreter(write("bad-interp", "#!" + dir_ + "/nope\n", 0755)), "");
  const std::string self_ref = dir_ + "/self.sh";
  EXPECT_EQ(program_interpreter(write("self.sh", "#!" + self_ref + "\n", 0755)), "");
  // An ELF with no PT_INTERP (what a static executable looks like).
  Elf64_Ehdr eh = x86_64_header();
  EXPECT_EQ(program_interpreter(write("static", header_bytes(eh))), "");
}

// Runs program_interpreter(path) on a thread with a 64 KiB stack, so that
// unbounded recursion shows up the same way whatever the descriptor limit.
std::string interpreter_on_small_stack(const std::string& path) {
  struct Job {
    std::string path, result;
  } job{path, {}};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  pthread_t t;
  const int rc = pthread_create(
      &t, &attr,
      [](void* p) -> void* {
        auto* j = static_cast<Job*>(p);
        j->result = program_interpreter(j->path);
        return nullptr;
      },
      &job);
  pthread_attr_destroy(&attr);
  if (rc != 0) return "pthread_create failed";
  pthread_join(t, nullptr);
  return job.result;
}

TEST_F(ProgramInterpreterFiles, ShallowChainsWorkOnASmallStack) {
  const std::string inner = write("inner.sh", "#!/bin/sh\n", 0755);
  const std::string outer = write("outer", "#!" + inner + "\n", 0755);
  EXPECT_EQ(interpreter_on_small_stack(outer), program_interpreter("/bin/sh"));
}

TEST_F(ProgramInterpreterFiles, FourScriptLevelsResolve) {
  // Every Linux kernel runs a chain of four scripts ending in an ELF binary.
  std::string next = "/bin/sh";
  for (int i = 4; i >= 1; --i) next = write("level" + std::to_string(i), "#!" + next + "\n", 0755);
  EXPECT_EQ(interpreter_on_small_stack(next), program_interpreter("/bin/sh"));
}

TEST_F(ProgramInterpreterFiles, ShebangCycleTerminates) {
  // Regression: program_interpreter() followed "#!" lines without a depth
  // limit (the kernel gives up with ELOOP). a -> b -> a recursed, holding an
  // open ifstream per level, until the stack overflowed (SIGSEGV) or the
  // descriptor table ran out: `cudatrace ./a` crashed instead of reporting.
  const std::string a = dir_ + "/cycle-a", b = dir_ + "/cycle-b";
  write("cycle-a", "#!" + b + "\n", 0755);
  write("cycle-b", "#!" + a + "\n", 0755);
  EXPECT_EXIT(
      {
        const std::string r = interpreter_on_small_stack(a);
        std::_Exit(r.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(FindInPath, FindsSh) {
  const std::string sh = find_in_path("sh");
  ASSERT_FALSE(sh.empty());
  EXPECT_TRUE(ends_with(sh, "/sh")) << sh;
  EXPECT_EQ(access(sh.c_str(), X_OK), 0) << sh;
}

TEST(FindInPath, MissingCommandGivesEmpty) {
  EXPECT_EQ(find_in_path("definitely-not-a-command-xyz"), "");
  EXPECT_EQ(find_in_path(""), "");
}

TEST(FindInPath, PathsWithASlashAreTakenAsIs) {
  EXPECT_EQ(find_in_path("/bin/sh"), "/bin/sh");
  EXPECT_EQ(find_in_path("/definitely/not/here"), "");
}

using FindInPathFiles = TempDir;

TEST_F(FindInPathFiles, SkipsNonExecutablesAndDirectories) {
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  write("tool", "#!/bin/sh\n", 0644);  // not executable
  mkdir((dir_ + "/sub").c_str(), 0755);
  const std::string exec_dir = dir_ + "/sub";
  setenv("PATH", (dir_ + ":" + exec_dir).c_str(), 1);
  EXPECT_EQ(find_in_path("tool"), "");
  EXPECT_EQ(find_in_path("sub"), "");  // a directory in PATH dir_
  const std::string tool = exec_dir + "/tool";
  std::ofstream(tool) << "#!/bin/sh\n";
  chmod(tool.c_str(), 0755);
  EXPECT_EQ(find_in_path("tool"), tool);
  chmod((dir_ + "/tool").c_str(), 0755);  // now the first PATH entry wins
  EXPECT_EQ(find_in_path("tool"), dir_ + "/tool");
  setenv("PATH", saved.c_str(), 1);
  unlink(tool.c_str());
  rmdir(exec_dir.c_str());
}

using CommandProblems = TempDir;

// Everything that keeps a command from running is found before it is
// started, each with its reason (one exit status, 3, for all of them).
TEST_F(CommandProblems, SayWhyACommandCannotRun) {
  std::string exe;
  EXPECT_EQ(command_problem("sh", exe), "");
  EXPECT_TRUE(ends_with(exe, "/sh")) << exe;
  EXPECT_EQ(command_problem("definitely-not-a-command-xyz", exe), "command not found: definitely-not-a-command-xyz");
  EXPECT_EQ(command_problem("/definitely/not/here", exe), "command not found: /definitely/not/here");
  EXPECT_EQ(command_problem(dir_, exe), "cannot run " + dir_ + ": it is a directory");
  const std::string text = write("notes.txt", "hello\n", 0644);
  EXPECT_EQ(command_problem(text, exe), "cannot run " + text + ": it is not executable");
  const std::string junk = write("junk", "hello\n", 0755);
  EXPECT_EQ(command_problem(junk, exe),
            "cannot run " + junk + ": not a program (neither an ELF executable nor a script starting with #!)");
  const std::string empty = write("empty", "", 0755);
  EXPECT_NE(command_problem(empty, exe).find(": not a program"), std::string::npos);
  const std::string script = write("script", "#!/bin/sh\ntrue\n", 0755);
  EXPECT_EQ(command_problem(script, exe), "");
  EXPECT_EQ(exe, script);
  Elf64_Ehdr arm = x86_64_header();
  arm.e_machine = EM_AARCH64;
  const std::string foreign = write("arm-app", header_bytes(arm), 0755);
  EXPECT_EQ(command_problem(foreign, exe), "cannot run " + foreign + ": not an x86-64 program");
}

TEST(ReadMaps, ContainsTheTestBinary) {
  std::vector<Mapping> maps;
  ASSERT_TRUE(read_maps(getpid(), maps));
  ASSERT_FALSE(maps.empty());
  const std::string exe = self_exe();
  bool exec_mapping = false;
  for (const Mapping& m : maps) {
    EXPECT_LT(m.start, m.end);
    if (m.path == exe && m.exec) exec_mapping = true;
  }
  EXPECT_TRUE(exec_mapping) << exe;
}

TEST(ReadMaps, StackAndAnonymousMappingsHaveNoPath) {
  std::vector<Mapping> maps;
  ASSERT_TRUE(read_maps(getpid(), maps));
  int local = 0;
  const auto addr = reinterpret_cast<std::uint64_t>(&local);
  const Mapping* stack = nullptr;
  for (const Mapping& m : maps)
    if (addr >= m.start && addr < m.end) stack = &m;
  ASSERT_NE(stack, nullptr);
  EXPECT_EQ(stack->path, "");  // "[stack]" is not a file
  EXPECT_EQ(stack->inode, 0u);
  for (const Mapping& m : maps)
    if (!m.path.empty()) {
      EXPECT_EQ(m.path.front(), '/') << m.path;
    }
}

TEST(ReadMaps, GoneProcessFails) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  std::vector<Mapping> maps{Mapping{1, 2, 0, 0, false, "x"}};
  EXPECT_FALSE(read_maps(child, maps));
  EXPECT_TRUE(maps.empty());
  EXPECT_FALSE(process_exists(child));
}

TEST(ProcessExists, Self) { EXPECT_TRUE(process_exists(getpid())); }

TEST(HostPath, SameInodeGoesThroughProcRoot) {
  std::vector<Mapping> maps;
  ASSERT_TRUE(read_maps(getpid(), maps));
  const std::string exe = self_exe();
  const Mapping* m = nullptr;
  for (const Mapping& x : maps)
    if (x.path == exe) m = &x;
  ASSERT_NE(m, nullptr);
  const std::string pid = std::to_string(getpid());
  EXPECT_EQ(host_path(getpid(), *m), "/proc/" + pid + "/root" + exe);

  Mapping replaced = *m;
  replaced.inode += 1;  // the file on disk is not the mapped one any more
  char range[64];
  std::snprintf(range, sizeof range, "%llx-%llx", static_cast<unsigned long long>(m->start),
                static_cast<unsigned long long>(m->end));
  EXPECT_EQ(host_path(getpid(), replaced), "/proc/" + pid + "/map_files/" + range);
}

#ifdef REAL_APP_SHARED
// nvcc's registration code names each kernel's host stub, with or without
// symbols: the stubs of the unstripped program (its symbols say which they
// are) are named alike in the stripped copy, which has no symbol for them;
// with the runtime linked in statically (cuBLASLt's way), not even for
// __cudaRegisterFunction, which is then known by its calls' shape.
void expect_stubs_named_by_registration_code(const char* unstripped, const char* stripped_copy) {
  SCOPED_TRACE(stripped_copy);
  std::string error;
  const auto full = ElfFile::open(unstripped, error);
  ASSERT_NE(full, nullptr) << error;
  const auto stripped = ElfFile::open(stripped_copy, error);
  ASSERT_NE(stripped, nullptr) << error;
  ASSERT_FALSE(stripped->has_symtab());
  const auto stubs = full->find_functions({"_Z6addOnePfi", "_ZN2nsL5scaleIfEEvPT_S1_"});
  ASSERT_EQ(stubs.size(), 2u);
  // Registered by the device function's name, as CUDA names the kernel: the
  // host stub of a function of internal linkage has an "L" the device's lacks.
  const std::map<std::string_view, std::string_view> device_name = {
      {"_Z6addOnePfi", "_Z6addOnePfi"}, {"_ZN2nsL5scaleIfEEvPT_S1_", "_ZN2ns5scaleIfEEvPT_S1_"}};
  for (const auto& [symbol, address] : stubs) {
    FunctionSymbol none;
    EXPECT_FALSE(stripped->function_at(address, none)) << symbol;
    std::string_view name;
    ASSERT_TRUE(stripped->registered_kernel(address, name)) << symbol;
    EXPECT_EQ(name, device_name.at(symbol));
    ASSERT_TRUE(full->registered_kernel(address, name)) << symbol;
    EXPECT_EQ(name, device_name.at(symbol));
  }
  // Anything else is no stub: main, and an address inside a stub.
  const auto main_fn = full->find_functions({"main"});
  ASSERT_EQ(main_fn.size(), 1u);
  std::string_view name;
  EXPECT_FALSE(stripped->registered_kernel(main_fn.begin()->second, name));
  EXPECT_FALSE(stripped->registered_kernel(stubs.begin()->second + 1, name));
}

TEST(RegisteredKernel, StubsOfAStrippedProgramAreNamedByItsRegistrationCode) {
  expect_stubs_named_by_registration_code(REAL_APP_SHARED, REAL_APP_SHARED_STRIPPED);
  expect_stubs_named_by_registration_code(REAL_APP_STATIC, REAL_APP_STRIPPED);
}

// Each stub keeps its kernel's handle in a static variable of its own, which
// its __cudaGetKernel(&variable, stub) names: data, not code, one per kernel.
TEST(KernelHandleSlots, EachStubsHandleVariableIsFoundWithoutSymbols) {
  std::string error;
  const auto stripped = ElfFile::open(REAL_APP_SHARED_STRIPPED, error);
  ASSERT_NE(stripped, nullptr) << error;
  const auto text = stripped->section(".text");
  ASSERT_TRUE(text.has_value());
  std::map<std::string_view, std::uint64_t> variable_of;
  for (const ElfFile::KernelHandleSlot& slot : stripped->kernel_handle_slots()) {
    EXPECT_TRUE(variable_of.emplace(slot.name, slot.variable).second) << slot.name;
    EXPECT_TRUE(slot.variable < text->address || slot.variable >= text->address + text->size) << slot.name;
    EXPECT_NE(slot.variable, 0u) << slot.name;
  }
  ASSERT_EQ(variable_of.size(), 2u);
  EXPECT_TRUE(variable_of.count("_Z6addOnePfi"));
  EXPECT_TRUE(variable_of.count("_ZN2ns5scaleIfEEvPT_S1_"));
  EXPECT_NE(variable_of["_Z6addOnePfi"], variable_of["_ZN2ns5scaleIfEEvPT_S1_"]);
  // In the unstripped program, at the symbols nvcc gives them.
  const auto full = ElfFile::open(REAL_APP_SHARED, error);
  ASSERT_NE(full, nullptr) << error;
  ASSERT_EQ(full->kernel_handle_slots().size(), 2u);
}
#endif

}  // namespace
