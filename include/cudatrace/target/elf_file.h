// Minimal read-only ELF64 reader: just what attaching uprobes and naming host
// functions needs. The file is mapped once, and what a pass over whole tables
// or sections read is let go of as it goes (release): a library's mapping
// costs cudatrace's RSS only the pages of what it looked up last.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace cudatrace {

struct FunctionSymbol {
  std::string_view name;
  std::uint64_t address;  // st_value: link-time virtual address
  std::uint64_t size;
};

class ElfFile {
 public:
  // Opens and validates an x86-64 ELF64 file. On failure returns nullptr and
  // sets `error` to one line saying why.
  static std::unique_ptr<ElfFile> open(const std::string& path, std::string& error);
  ~ElfFile();
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  // Defined functions whose name is in `wanted`, from .dynsym and .symtab.
  // When a name is in both, the .dynsym entry wins (they agree in practice).
  std::unordered_map<std::string, std::uint64_t> find_functions(
      const std::unordered_set<std::string_view>& wanted) const;

  // Link-time address of a data object the file exports in .dynsym (such as
  // the loader's _r_debug); 0 if it exports none of that name.
  // The names in `wanted` that the file imports: undefined dynamic symbols,
  // which the loader binds to another object's definition.
  std::vector<std::string> imported(const std::unordered_set<std::string_view>& wanted) const;
  std::uint64_t exported_object(std::string_view name) const;
  // The offset in the file's TLS block of the defined thread-local variable
  // `name` (an STT_TLS symbol of .dynsym or .symtab: st_value); nullopt if none.
  std::optional<std::uint64_t> tls_symbol(std::string_view name) const;

  // Every defined function, sorted by address, one per address.
  std::vector<FunctionSymbol> functions() const;
  // The function starting exactly at `vaddr`, or the one whose
  // [address, address + size) holds it. Each lookup reads its entry and name
  // (with the kernel's fault-around, 64 KiB each); every kLookupsBetweenReleases
  // lookups, what they read is let go (release), so that naming thousands of
  // kernels does not bring a library's symbol tables back into the RSS.
  static constexpr unsigned kLookupsBetweenReleases = 32;
  bool function_at(std::uint64_t vaddr, FunctionSymbol& out) const;
  bool function_containing(std::uint64_t vaddr, FunctionSymbol& out) const;

  // The device function that the host stub at `vaddr` registers, when the
  // file has no symbol for the stub (stripped, or hidden in .symtab only):
  // read from the module's registration code, the calls
  // __cudaRegisterFunction(handle, stub, name, ...) that nvcc writes, also
  // where that function is a stripped copy linked in (cuBLASLt's runtime)
  // (kernel_registrations.cpp). Found once per file, on first use.
  bool registered_kernel(std::uint64_t vaddr, std::string_view& name) const;

  // The static variables in which nvcc's host stubs keep their kernel's
  // handle (cudaKernel_t, what they launch with), from the stubs' calls
  // __cudaGetKernel(&variable, stub), with the kernel's name.
  struct KernelHandleSlot {
    std::uint64_t variable;  // link-time address
    std::string_view name;   // mangled
  };
  const std::vector<KernelHandleSlot>& kernel_handle_slots() const;  // found once per file

  // Link-time addresses of the GOT slots that the loader fills with the
  // dynamic symbol `name` (JUMP_SLOT and GLOB_DAT relocations).
  std::vector<std::uint64_t> got_slots(std::string_view name) const;
  // The GOT slot (link-time address) through which the PLT stub at `vaddr`
  // jumps: [endbr64] [bnd] jmp *disp(%rip). 0 when there is no such stub.
  std::uint64_t plt_stub_slot(std::uint64_t vaddr) const;
  // The file's bytes from virtual address `vaddr` to the end of the file
  // part of the PT_LOAD segment that holds it; empty if none does.
  std::string_view bytes_at(std::uint64_t vaddr) const;

  // File offset of a virtual address inside a PT_LOAD segment; what uprobes
  // are attached by. Returns false if no segment holds it.
  bool vaddr_to_offset(std::uint64_t vaddr, std::uint64_t& offset) const;

  // The inverse, for an address found in a mapping of the file.
  bool offset_to_vaddr(std::uint64_t offset, std::uint64_t& vaddr) const;

  struct Section {
    std::uint64_t address, offset, size;
  };
  // The section named `name` (".text"), if the file has one within its bounds.
  std::optional<Section> section(std::string_view name) const;

  // The file's bytes (mapped read-only).
  std::string_view contents() const { return {reinterpret_cast<const char*>(data_), size_}; }
  // Lets go of the pages of `part` (a view into contents()) that this
  // process has read: they stay in the page cache and come back on the next
  // read, but no longer count in cudatrace's RSS (issue 37: scanning a
  // 100 MB .text of cuBLASLt made the tracer's peak RSS 190 MiB).
  void release(std::string_view part) const;
  bool has_symtab() const { return symtab_ != nullptr; }
  const std::string& path() const { return path_; }

 private:
  ElfFile() = default;
  struct Table {
    const void* syms;
    std::size_t count;
    const char* strings;
    std::size_t strings_size;
  };
  // fn(name, entry, index) for the entries `keep` accepts, in the order of
  // their names in the file.
  template <typename Keep, typename Fn>
  void for_each_symbol_by_name(const Table& t, Keep&& keep, Fn&& fn) const;
  template <typename Fn>
  void for_each_function(const Table& t, Fn&& fn) const;
  // Symbol references: index into .dynsym, or with kSymtabBit into .symtab.
  static constexpr std::uint32_t kSymtabBit = 1u << 31;
  FunctionSymbol symbol(std::uint32_t ref) const;
  // Searched without reading the file: the address is kept beside the reference.
  struct IndexedFunction {
    std::uint64_t address;
    std::uint32_t ref;
  };
  const std::vector<IndexedFunction>& by_address() const;
  // After a pass over whole tables or sections: what it read no longer
  // counts in cudatrace's RSS (a lookup then reads back a page or two).
  void release_all() const { release(contents()); }

  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::unique_ptr<Table> dynsym_, symtab_;
  const std::uint16_t* versions_ = nullptr;  // .gnu.version, one per .dynsym entry: bit 15 = hidden
  mutable std::vector<IndexedFunction> by_address_;  // built on first use
  mutable bool indexed_ = false;
  mutable unsigned lookups_since_release_ = 0;
  void count_lookup() const;
  // registered_kernel's map, stub address -> device function name.
  mutable std::unique_ptr<std::unordered_map<std::uint64_t, std::string_view>> registrations_;
  mutable std::unique_ptr<std::vector<KernelHandleSlot>> handle_slots_;
};

// The little-endian 32-bit displacement at `bytes[at]`, sign-extended (the
// caller checks that four bytes are there).
std::int64_t rel32_at(std::string_view bytes, std::size_t at);

// A scan of a large part of a file that lets go of what it has read as it
// goes (ElfFile::release): tell it how far the scan is; it releases all but
// the last `keep` bytes before that every few MiB, and the whole part at its end.
class ReleasingScan {
 public:
  ReleasingScan(const ElfFile& file, std::string_view part, std::size_t keep = 0)
      : file_(file), part_(part), keep_(keep) {}
  ~ReleasingScan() { file_.release(part_); }
  ReleasingScan(const ReleasingScan&) = delete;
  ReleasingScan& operator=(const ReleasingScan&) = delete;
  void at(std::size_t pos) {
    if (pos < next_) return;
    next_ = pos + kStep;
    if (pos > keep_) file_.release(part_.substr(0, pos - keep_));
  }

 private:
  static constexpr std::size_t kStep = 8 << 20;
  const ElfFile& file_;
  std::string_view part_;
  std::size_t keep_;
  std::size_t next_ = kStep;
};

}  // namespace cudatrace
