#include "cudatrace/target/elf_file.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cudatrace {

std::unique_ptr<ElfFile> ElfFile::open(const std::string& path, std::string& error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = path + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = path + ": not a regular file";
    ::close(fd);
    return nullptr;
  }
  if (static_cast<std::size_t>(st.st_size) < sizeof(Elf64_Ehdr)) {
    error = path + ": not an ELF file (too small)";
    ::close(fd);
    return nullptr;
  }
  // Shared, not private: the kernel writes a breakpoint into every private
  // mapping of a probed file (even a read-only one), so code read through a
  // private mapping shows the int3 of any uprobe on it, ours or another
  // tracer's, and the static-runtime fingerprints no longer match.
  void* map = mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    error = path + ": mmap: " + std::strerror(errno);
    return nullptr;
  }
  std::unique_ptr<ElfFile> elf(new ElfFile());
  elf->path_ = path;
  elf->data_ = static_cast<const std::uint8_t*>(map);
  elf->size_ = st.st_size;

  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(elf->data_);
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0) {
    error = path + ": not an ELF file";
    return nullptr;
  }
  if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB || eh->e_machine != EM_X86_64) {
    error = path + ": not an x86-64 ELF64 file (cudatrace decodes the x86-64 calling convention only)";
    return nullptr;
  }
  const auto in_file = [&](std::uint64_t off, std::uint64_t len) {
    return off <= elf->size_ && len <= elf->size_ - off;
  };
  // The headers are read in place from the mapping: a misaligned table is not one a linker wrote.
  if (eh->e_shoff % alignof(Elf64_Shdr) || eh->e_phoff % alignof(Elf64_Phdr) ||
      eh->e_shentsize != sizeof(Elf64_Shdr) || !in_file(eh->e_shoff, std::uint64_t(eh->e_shnum) * sizeof(Elf64_Shdr)) ||
      eh->e_phentsize != sizeof(Elf64_Phdr) || !in_file(eh->e_phoff, std::uint64_t(eh->e_phnum) * sizeof(Elf64_Phdr))) {
    error = path + ": corrupt ELF headers";
    return nullptr;
  }
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(elf->data_ + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_DYNSYM && sh[i].sh_type != SHT_SYMTAB) continue;
    if (sh[i].sh_link >= eh->e_shnum || sh[i].sh_entsize != sizeof(Elf64_Sym) ||
        sh[i].sh_offset % alignof(Elf64_Sym))
      continue;
    const Elf64_Shdr& strs = sh[sh[i].sh_link];
    if (!in_file(sh[i].sh_offset, sh[i].sh_size) || !in_file(strs.sh_offset, strs.sh_size)) continue;
    auto table = std::make_unique<Table>(Table{elf->data_ + sh[i].sh_offset, sh[i].sh_size / sizeof(Elf64_Sym),
                                               reinterpret_cast<const char*>(elf->data_ + strs.sh_offset),
                                               strs.sh_size});
    (sh[i].sh_type == SHT_DYNSYM ? elf->dynsym_ : elf->symtab_) = std::move(table);
  }
  for (int i = 0; i < eh->e_shnum && elf->dynsym_; ++i)
    if (sh[i].sh_type == SHT_GNU_versym && sh[i].sh_offset % 2 == 0 && in_file(sh[i].sh_offset, sh[i].sh_size) &&
        sh[i].sh_size / 2 == elf->dynsym_->count)
      elf->versions_ = reinterpret_cast<const std::uint16_t*>(elf->data_ + sh[i].sh_offset);
  return elf;
}

ElfFile::~ElfFile() {
  if (data_) munmap(const_cast<std::uint8_t*>(data_), size_);
}

void ElfFile::release(std::string_view part) const {
  const auto* begin = reinterpret_cast<const std::uint8_t*>(part.data());
  if (part.empty() || begin < data_ || begin + part.size() > data_ + size_) return;
  // Whole pages inside the part; a page it shares with a neighbour stays.
  const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const std::uintptr_t from = (reinterpret_cast<std::uintptr_t>(begin) + page - 1) & ~(page - 1);
  const std::uintptr_t to = (reinterpret_cast<std::uintptr_t>(begin) + part.size()) & ~(page - 1);
  if (to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

template <typename Keep, typename Fn>
void ElfFile::for_each_symbol_by_name(const Table& t, Keep&& keep, Fn&& fn) const {
  // A big library's tables are over 100 MiB, and .dynsym is in hash order,
  // not in the order of its names: read in entry order, every name would
  // bring its neighbours in (64 KiB of fault-around each). So the entries
  // are read first, then the names in the order they lie in the file; both
  // reads let go of what they have read as they go (ReleasingScan).
  const auto* syms = static_cast<const Elf64_Sym*>(t.syms);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> by_name;  // (name offset, entry)
  {
    ReleasingScan scan(*this, {static_cast<const char*>(t.syms), t.count * sizeof(Elf64_Sym)});
    for (std::size_t i = 0; i < t.count && i < UINT32_MAX; ++i) {
      scan.at(i * sizeof(Elf64_Sym));
      if (syms[i].st_name < t.strings_size && keep(syms[i])) by_name.emplace_back(syms[i].st_name, i);
    }
  }
  std::sort(by_name.begin(), by_name.end());
  ReleasingScan scan(*this, {t.strings, t.strings_size});
  for (const auto& [at, i] : by_name) {
    scan.at(at);
    const char* name = t.strings + at;
    fn(std::string_view(name, strnlen(name, t.strings_size - at)), syms[i], i);
  }
}

namespace {

bool defined_function(const Elf64_Sym& s) {
  const int type = ELF64_ST_TYPE(s.st_info);
  return (type == STT_FUNC || type == STT_GNU_IFUNC) && s.st_shndx != SHN_UNDEF && s.st_value != 0;
}

}  // namespace

template <typename Fn>
void ElfFile::for_each_function(const Table& t, Fn&& fn) const {
  for_each_symbol_by_name(t, defined_function, fn);
}

std::unordered_map<std::string, std::uint64_t> ElfFile::find_functions(
    const std::unordered_set<std::string_view>& wanted) const {
  std::unordered_map<std::string, std::uint64_t> found;
  for (const Table* t : {dynsym_.get(), symtab_.get()}) {
    if (!t) continue;
    for_each_function(*t, [&](std::string_view name, const Elf64_Sym& s, std::uint32_t i) {
      // An old version kept for old callers (realpath@GLIBC_2.2.5 beside
      // realpath@@GLIBC_2.3) is not what a program linked today calls.
      // .dynsym marks it in .gnu.version; .symtab names carry the version.
      const std::size_t at = name.find('@');
      const bool hidden = t == dynsym_.get() ? versions_ && (versions_[i] & 0x8000)
                                             : at != std::string_view::npos && name.substr(at, 2) != "@@";
      const std::string_view base = name.substr(0, at);
      if (!hidden && wanted.count(base)) found.emplace(std::string(base), s.st_value);
    });
  }
  return found;
}

std::vector<std::string> ElfFile::imported(const std::unordered_set<std::string_view>& wanted) const {
  std::vector<std::string> found;
  if (!dynsym_) return found;
  for_each_symbol_by_name(
      *dynsym_, [](const Elf64_Sym& s) { return s.st_shndx == SHN_UNDEF && s.st_name != 0; },
      [&](std::string_view name, const Elf64_Sym&, std::uint32_t) {
        const std::string_view base = name.substr(0, name.find('@'));
        if (wanted.count(base)) found.emplace_back(base);
      });
  return found;
}

std::uint64_t ElfFile::exported_object(std::string_view name) const {
  if (!dynsym_) return 0;
  const auto* syms = static_cast<const Elf64_Sym*>(dynsym_->syms);
  for (std::size_t i = 0; i < dynsym_->count; ++i) {
    const Elf64_Sym& s = syms[i];
    if (ELF64_ST_TYPE(s.st_info) != STT_OBJECT || s.st_shndx == SHN_UNDEF || s.st_name >= dynsym_->strings_size)
      continue;
    const char* sym_name = dynsym_->strings + s.st_name;
    if (std::string_view(sym_name, strnlen(sym_name, dynsym_->strings_size - s.st_name)) == name) {
      release_all();
      return s.st_value;
    }
  }
  release_all();
  return 0;
}

std::optional<std::uint64_t> ElfFile::tls_symbol(std::string_view name) const {
  for (const Table* t : {dynsym_.get(), symtab_.get()}) {
    if (!t) continue;
    const auto* syms = static_cast<const Elf64_Sym*>(t->syms);
    for (std::size_t i = 0; i < t->count; ++i) {
      const Elf64_Sym& s = syms[i];
      if (ELF64_ST_TYPE(s.st_info) != STT_TLS || s.st_shndx == SHN_UNDEF || s.st_name >= t->strings_size) continue;
      const char* sym_name = t->strings + s.st_name;
      if (std::string_view(sym_name, strnlen(sym_name, t->strings_size - s.st_name)) == name) {
        release_all();
        return s.st_value;
      }
    }
  }
  release_all();
  return std::nullopt;
}

FunctionSymbol ElfFile::symbol(std::uint32_t ref) const {
  const Table& t = ref & kSymtabBit ? *symtab_ : *dynsym_;
  const Elf64_Sym& s = static_cast<const Elf64_Sym*>(t.syms)[ref & ~kSymtabBit];
  const char* name = t.strings + s.st_name;
  const std::string_view full(name, strnlen(name, t.strings_size - s.st_name));
  return {full.substr(0, full.find('@')), s.st_value, s.st_size};
}

const std::vector<ElfFile::IndexedFunction>& ElfFile::by_address() const {
  if (indexed_) return by_address_;
  indexed_ = true;
  by_address_.reserve((dynsym_ ? dynsym_->count : 0) + (symtab_ ? symtab_->count : 0));
  for (const Table* t : {dynsym_.get(), symtab_.get()}) {
    if (!t || t->count >= kSymtabBit) continue;
    const std::uint32_t tag = t == symtab_.get() ? kSymtabBit : 0;
    // The entries alone, not their names (most of a big table's bytes),
    // let go of as the walk goes: the peak RSS stays that of the index.
    const auto* syms = static_cast<const Elf64_Sym*>(t->syms);
    ReleasingScan scan(*this, {static_cast<const char*>(t->syms), t->count * sizeof(Elf64_Sym)});
    for (std::uint32_t i = 0; i < t->count; ++i) {
      scan.at(i * sizeof(Elf64_Sym));
      if (defined_function(syms[i]) && syms[i].st_name < t->strings_size)
        by_address_.push_back({syms[i].st_value, tag | i});
    }
  }
  // Of aliases, the first in the file wins, .dynsym before .symtab (which
  // repeats most of it): no name is read to decide.
  std::sort(by_address_.begin(), by_address_.end(), [](const IndexedFunction& x, const IndexedFunction& y) {
    return x.address < y.address || (x.address == y.address && x.ref < y.ref);
  });
  by_address_.erase(std::unique(by_address_.begin(), by_address_.end(),
                                [](const IndexedFunction& x, const IndexedFunction& y) { return x.address == y.address; }),
                    by_address_.end());
  by_address_.shrink_to_fit();
  return by_address_;
}

std::vector<FunctionSymbol> ElfFile::functions() const {
  std::vector<FunctionSymbol> out;
  for (const IndexedFunction& f : by_address()) out.push_back(symbol(f.ref));
  return out;
}

std::optional<ElfFile::Section> ElfFile::section(std::string_view name) const {
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(data_);
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(data_ + eh->e_shoff);
  if (eh->e_shstrndx >= eh->e_shnum) return std::nullopt;
  const Elf64_Shdr& names = sh[eh->e_shstrndx];
  if (names.sh_offset > size_ || names.sh_size > size_ - names.sh_offset) return std::nullopt;
  const char* strings = reinterpret_cast<const char*>(data_ + names.sh_offset);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_name >= names.sh_size || sh[i].sh_type == SHT_NOBITS) continue;
    if (std::string_view(strings + sh[i].sh_name, strnlen(strings + sh[i].sh_name, names.sh_size - sh[i].sh_name)) != name)
      continue;
    if (sh[i].sh_offset > size_ || sh[i].sh_size > size_ - sh[i].sh_offset) return std::nullopt;
    return Section{sh[i].sh_addr, sh[i].sh_offset, sh[i].sh_size};
  }
  return std::nullopt;
}

void ElfFile::count_lookup() const {
  if (++lookups_since_release_ < kLookupsBetweenReleases) return;
  lookups_since_release_ = 0;
  release_all();
}

bool ElfFile::function_at(std::uint64_t vaddr, FunctionSymbol& out) const {
  const auto& index = by_address();
  count_lookup();  // what it found stays readable: a page read after a release comes back
  auto it = std::lower_bound(index.begin(), index.end(), vaddr,
                             [](const IndexedFunction& f, std::uint64_t v) { return f.address < v; });
  if (it == index.end() || it->address != vaddr) return false;
  out = symbol(it->ref);
  return true;
}

bool ElfFile::function_containing(std::uint64_t vaddr, FunctionSymbol& out) const {
  const auto& index = by_address();
  count_lookup();
  auto it = std::upper_bound(index.begin(), index.end(), vaddr,
                             [](std::uint64_t v, const IndexedFunction& f) { return v < f.address; });
  if (it == index.begin()) return false;
  const FunctionSymbol f = symbol((--it)->ref);
  if (vaddr >= f.address + f.size) return false;
  out = f;
  return true;
}

std::vector<std::uint64_t> ElfFile::got_slots(std::string_view name) const {
  std::vector<std::uint64_t> slots;
  if (!dynsym_) return slots;
  // The entries of that name first (in name order), then the relocations
  // by entry: no name is read during the walk of the relocations, which a
  // big library has hundreds of thousands of.
  std::unordered_set<std::uint32_t> entries;
  for_each_symbol_by_name(
      *dynsym_, [](const Elf64_Sym&) { return true; },
      [&](std::string_view symbol, const Elf64_Sym&, std::uint32_t i) {
        if (symbol == name) entries.insert(i);
      });
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(data_);
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(data_ + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum && !entries.empty(); ++i) {
    if (sh[i].sh_type != SHT_RELA || sh[i].sh_entsize != sizeof(Elf64_Rela) || sh[i].sh_offset > size_ ||
        sh[i].sh_size > size_ - sh[i].sh_offset || sh[i].sh_link >= eh->e_shnum || sh[sh[i].sh_link].sh_type != SHT_DYNSYM)
      continue;
    const auto* rela = reinterpret_cast<const Elf64_Rela*>(data_ + sh[i].sh_offset);
    ReleasingScan scan(*this, {reinterpret_cast<const char*>(rela), static_cast<std::size_t>(sh[i].sh_size)});
    for (std::size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Rela); ++k) {
      scan.at(k * sizeof(Elf64_Rela));
      const std::uint32_t type = ELF64_R_TYPE(rela[k].r_info);
      if ((type == R_X86_64_JUMP_SLOT || type == R_X86_64_GLOB_DAT) && entries.count(ELF64_R_SYM(rela[k].r_info)))
        slots.push_back(rela[k].r_offset);
    }
  }
  return slots;
}

std::int64_t rel32_at(std::string_view bytes, std::size_t at) {
  std::int32_t v = 0;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

std::uint64_t ElfFile::plt_stub_slot(std::uint64_t vaddr) const {
  const std::string_view stub = bytes_at(vaddr).substr(0, 16);
  std::size_t skip = 0;
  if (stub.substr(0, 4) == std::string_view("\xf3\x0f\x1e\xfa", 4)) skip += 4;  // endbr64
  if (skip < stub.size() && static_cast<unsigned char>(stub[skip]) == 0xf2) ++skip;    // bnd
  if (skip + 6 > stub.size() || static_cast<unsigned char>(stub[skip]) != 0xff ||
      static_cast<unsigned char>(stub[skip + 1]) != 0x25)
    return 0;
  return vaddr + skip + 6 + static_cast<std::uint64_t>(rel32_at(stub, skip + 2));
}

std::string_view ElfFile::bytes_at(std::uint64_t vaddr) const {
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(data_);
  const auto* ph = reinterpret_cast<const Elf64_Phdr*>(data_ + eh->e_phoff);
  for (int i = 0; i < eh->e_phnum; ++i) {
    if (ph[i].p_type != PT_LOAD || vaddr < ph[i].p_vaddr || vaddr - ph[i].p_vaddr >= ph[i].p_filesz) continue;
    const std::uint64_t offset = vaddr - ph[i].p_vaddr + ph[i].p_offset;
    const std::uint64_t end = std::min<std::uint64_t>(ph[i].p_offset + ph[i].p_filesz, size_);
    if (offset >= end) return {};
    return {reinterpret_cast<const char*>(data_) + offset, static_cast<std::size_t>(end - offset)};
  }
  return {};
}

bool ElfFile::vaddr_to_offset(std::uint64_t vaddr, std::uint64_t& offset) const {
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(data_);
  const auto* ph = reinterpret_cast<const Elf64_Phdr*>(data_ + eh->e_phoff);
  for (int i = 0; i < eh->e_phnum; ++i) {
    if (ph[i].p_type != PT_LOAD || !(ph[i].p_flags & PF_X)) continue;
    if (vaddr >= ph[i].p_vaddr && vaddr < ph[i].p_vaddr + ph[i].p_memsz) {
      offset = vaddr - ph[i].p_vaddr + ph[i].p_offset;
      return true;
    }
  }
  return false;
}

bool ElfFile::offset_to_vaddr(std::uint64_t offset, std::uint64_t& vaddr) const {
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(data_);
  const auto* ph = reinterpret_cast<const Elf64_Phdr*>(data_ + eh->e_phoff);
  for (int i = 0; i < eh->e_phnum; ++i) {
    if (ph[i].p_type != PT_LOAD) continue;
    if (offset >= ph[i].p_offset && offset < ph[i].p_offset + ph[i].p_filesz) {
      vaddr = offset - ph[i].p_offset + ph[i].p_vaddr;
      return true;
    }
  }
  return false;
}

}  // namespace cudatrace
