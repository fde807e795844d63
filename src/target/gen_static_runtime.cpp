// Build tool: writes the fingerprint table of the traced runtime APIs found in
// static CUDA runtime archives (libcudart_static.a), compiled into cudatrace
// so that GPU hosts without the toolkit can find a stripped static runtime.
//
//   gen_static_runtime OUTPUT.cpp [ARCHIVE.a | OBJECT.o]...
//
// A fingerprint is the function's code with every relocated field zeroed
// and listed (docs/static-runtime.md). Each fingerprint must find its own
// function, and nothing else, in the archive it came from when symbols are
// ignored; one that does not is left out with a warning.
#include <elf.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/target/static_runtime.h"

namespace {

using namespace cudatrace;

struct Function {
  std::string name;
  std::vector<unsigned char> code;
  std::uint32_t key_offset = 0, origin = 0;
  std::vector<RelocSite> sites;
};

// Fingerprints of one relocatable object, with the code they come from (for
// the self-check).
struct Object {
  std::string name;
  std::vector<unsigned char> text;  // the executable sections, concatenated
  std::vector<Function> functions;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "gen_static_runtime: %s\n", message.c_str());
  std::exit(1);
}

template <typename T>
const T& at(const std::string& data, std::uint64_t offset, const std::string& what) {
  if (offset > data.size() || sizeof(T) > data.size() - offset) fail(what + ": truncated ELF");
  return *reinterpret_cast<const T*>(data.data() + offset);
}

bool is_traced_runtime_api(const std::string& name) {
  const Api* api = api_by_symbol(name);
  return api && fingerprinted_runtime_api(*api);
}

// The start of the kKeyRun compared bytes of `f` whose first 8 occur least
// often in `counts`; nullopt when it has no such run (a stub shorter than
// kKeyRun, like __cudaGetProcAddress's `xor eax,eax; ret`).
std::optional<std::uint32_t> rarest_key(const Function& f, const std::vector<std::uint8_t>& mask,
                         const std::unordered_map<std::uint64_t, std::uint32_t>& counts) {
  std::uint32_t best = 0, best_count = ~0u;
  for (std::uint32_t off = 0; off + kKeyRun <= f.code.size(); ++off) {
    bool compared = true;
    for (std::uint32_t b = 0; b < kKeyRun && compared; ++b) compared = mask[off + b];
    if (!compared) continue;
    std::uint64_t key;
    std::memcpy(&key, &f.code[off], 8);
    const std::uint32_t n = counts.at(key);
    if (n < best_count) best = off, best_count = n;
  }
  if (best_count == ~0u) return std::nullopt;
  return best;
}

Object parse_object(const std::string& data, const std::string& name, std::uint32_t& next_target) {
  Object obj{name, {}, {}};
  const auto& eh = at<Elf64_Ehdr>(data, 0, name);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 || eh.e_type != ET_REL)
    fail(name + ": not an x86-64 relocatable object");
  std::vector<Elf64_Shdr> sh;
  for (int i = 0; i < eh.e_shnum; ++i) sh.push_back(at<Elf64_Shdr>(data, eh.e_shoff + i * sizeof(Elf64_Shdr), name));
  // Executable sections laid end to end, as a linker would (the origin of a
  // function is its offset there).
  std::map<int, std::uint32_t> section_base;
  for (int i = 0; i < eh.e_shnum; ++i) {
    if (sh[i].sh_type != SHT_PROGBITS || !(sh[i].sh_flags & SHF_EXECINSTR)) continue;
    const std::uint64_t align = sh[i].sh_addralign ? sh[i].sh_addralign : 1;
    obj.text.resize((obj.text.size() + align - 1) / align * align, 0);
    section_base[i] = static_cast<std::uint32_t>(obj.text.size());
    at<char>(data, sh[i].sh_offset + sh[i].sh_size - 1, name);
    obj.text.insert(obj.text.end(), data.begin() + sh[i].sh_offset, data.begin() + sh[i].sh_offset + sh[i].sh_size);
  }
  const Elf64_Shdr* symtab = nullptr;
  for (const auto& s : sh)
    if (s.sh_type == SHT_SYMTAB) symtab = &s;
  if (!symtab || symtab->sh_link >= sh.size()) return obj;
  const Elf64_Shdr& strtab = sh[symtab->sh_link];
  const auto symbol = [&](std::uint64_t i) {
    return at<Elf64_Sym>(data, symtab->sh_offset + i * sizeof(Elf64_Sym), name);
  };

  std::unordered_map<std::uint64_t, std::uint32_t> counts;  // 8-byte sequences of the code
  for (std::size_t off = 0; off + 8 <= obj.text.size(); ++off) {
    std::uint64_t key;
    std::memcpy(&key, &obj.text[off], 8);
    ++counts[key];
  }
  std::map<std::pair<std::uint32_t, std::int64_t>, std::uint32_t> target_ids;  // (symbol, addend)
  for (std::uint64_t i = 0; i < symtab->sh_size / sizeof(Elf64_Sym); ++i) {
    const Elf64_Sym sym = symbol(i);
    if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_size == 0 || !section_base.count(sym.st_shndx)) continue;
    std::string fname = &at<char>(data, strtab.sh_offset + sym.st_name, name);
    fname = fname.substr(0, fname.find('@'));
    if (!is_traced_runtime_api(fname)) continue;
    const Elf64_Shdr& sec = sh[sym.st_shndx];
    if (sym.st_value + sym.st_size > sec.sh_size) fail(name + ": " + fname + " lies outside its section");
    Function f{fname, {}, 0, static_cast<std::uint32_t>(section_base[sym.st_shndx] + sym.st_value), {}};
    f.code.assign(obj.text.begin() + f.origin, obj.text.begin() + f.origin + sym.st_size);
    bool supported = true;
    for (const auto& rs : sh) {
      if (rs.sh_type != SHT_RELA || rs.sh_info != sym.st_shndx) continue;
      for (std::uint64_t r = 0; r < rs.sh_size / sizeof(Elf64_Rela); ++r) {
        const auto& rela = at<Elf64_Rela>(data, rs.sh_offset + r * sizeof(Elf64_Rela), name);
        if (rela.r_offset < sym.st_value || rela.r_offset >= sym.st_value + sym.st_size) continue;
        RelocSite site{static_cast<std::uint32_t>(rela.r_offset - sym.st_value), RelocSite::PcRelative, 0, 0};
        switch (ELF64_R_TYPE(rela.r_info)) {
          case R_X86_64_PC32:
          case R_X86_64_PLT32: {
            const auto key = std::make_pair(static_cast<std::uint32_t>(ELF64_R_SYM(rela.r_info)), rela.r_addend);
            auto [it, added] = target_ids.emplace(key, next_target);
            if (added) ++next_target;
            site.target = it->second;
            break;
          }
          // The linker may turn these loads through the GOT into other
          // instructions: the REX prefix, opcode and ModRM change too.
          case R_X86_64_GOTPCRELX:
            site = {site.offset, RelocSite::GotRelaxable, 2, 0};
            break;
          case R_X86_64_REX_GOTPCRELX:
            site = {site.offset, RelocSite::GotRelaxable, 3, 0};
            break;
          default:
            supported = false;
        }
        if (site.offset + 4 > f.code.size()) supported = false;
        f.sites.push_back(site);
      }
    }
    if (!supported) {
      std::fprintf(stderr, "gen_static_runtime: %s: %s has a relocation it cannot mask; left out\n", name.c_str(),
                   fname.c_str());
      continue;
    }
    std::vector<std::uint8_t> mask(f.code.size(), 1);
    for (const RelocSite& s : f.sites)
      for (std::uint32_t b = s.offset - std::min<std::uint32_t>(s.offset, s.lead); b < s.offset + 4; ++b) mask[b] = 0;
    for (std::size_t b = 0; b < f.code.size(); ++b)
      if (!mask[b]) f.code[b] = 0;
    const auto key = rarest_key(f, mask, counts);
    if (!key) {
      std::fprintf(stderr, "gen_static_runtime: %s: %s has no %u bytes in a row without a relocation; left out\n",
                   name.c_str(), fname.c_str(), kKeyRun);
      continue;
    }
    f.key_offset = *key;
    obj.functions.push_back(std::move(f));
  }
  return obj;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path + ": cannot read");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The ELF objects of an ar archive (or the file itself if it is one).
std::vector<std::pair<std::string, std::string>> members(const std::string& path) {
  const std::string data = read_file(path);
  if (data.compare(0, 4, ELFMAG) == 0) return {{path, data}};
  if (data.compare(0, 8, "!<arch>\n") != 0) fail(path + ": neither an ar archive nor an ELF object");
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t off = 8; off + 60 <= data.size();) {
    const std::string header = data.substr(off, 60);
    char* end = nullptr;
    const std::string size_field = header.substr(48, 10);
    const std::size_t size = std::strtoul(size_field.c_str(), &end, 10);
    if (end == size_field.c_str()) fail(path + ": corrupt archive member header");
    const std::string member_name = header.substr(0, header.find_first_of("/ "));
    if (off + 60 + size > data.size()) fail(path + ": truncated archive");
    const std::string body = data.substr(off + 60, size);
    if (body.compare(0, 4, ELFMAG) == 0) out.emplace_back(path + "(" + member_name + ")", body);
    off += 60 + size + (size & 1);
  }
  return out;
}

// Drops the fingerprints that do not find their own function, and only it,
// in the code they come from.
void self_check(Object& obj) {
  std::vector<Fingerprint> views;
  for (const Function& f : obj.functions)
    views.push_back({f.name.c_str(), static_cast<std::uint32_t>(f.code.size()), f.code.data(), f.key_offset, f.origin,
                     f.sites.data(), static_cast<std::uint32_t>(f.sites.size())});
  const FingerprintTable table{views.data(), views.size(), ""};
  // Relocated as a linker would: each symbol at its own address.
  std::vector<unsigned char> linked = obj.text;
  for (const Function& f : obj.functions)
    for (const RelocSite& s : f.sites) {
      if (s.kind != RelocSite::PcRelative) continue;
      const std::uint32_t field = f.origin + s.offset;
      const std::int32_t disp = static_cast<std::int32_t>(0x40000000 + 16 * s.target - field);
      std::memcpy(&linked[field], &disp, sizeof disp);
    }
  const auto found =
      match_fingerprints(std::string_view(reinterpret_cast<const char*>(linked.data()), linked.size()), 0, table);
  std::set<std::size_t> right;
  for (const FingerprintMatch& m : found)
    if (m.position == obj.functions[m.index].origin) right.insert(m.index);
  std::vector<Function> kept;
  for (std::size_t i = 0; i < obj.functions.size(); ++i) {
    if (right.count(i))
      kept.push_back(std::move(obj.functions[i]));
    else
      std::fprintf(stderr, "gen_static_runtime: %s: %s is not found exactly once at its own address; left out\n",
                   obj.name.c_str(), obj.functions[i].name.c_str());
  }
  obj.functions = std::move(kept);
}

void write_bytes(std::ostream& out, const std::vector<unsigned char>& bytes) {
  out << '"';
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i && i % 32 == 0) out << "\"\n    \"";
    char octal[5];
    std::snprintf(octal, sizeof octal, "\\%03o", bytes[i]);
    out << octal;
  }
  out << '"';
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) fail("usage: gen_static_runtime OUTPUT.cpp [ARCHIVE]...");
  std::vector<Object> objects;
  std::string sources;
  std::uint32_t next_target = 0;
  for (int i = 2; i < argc; ++i) {
    sources += (sources.empty() ? "" : " ") + std::string(argv[i]);
    for (const auto& [name, data] : members(argv[i])) {
      objects.push_back(parse_object(data, name, next_target));
      self_check(objects.back());
    }
  }
  std::ostringstream out;
  out << "// Generated by gen_static_runtime from " << (sources.empty() ? "no archive" : sources)
      << ". Do not edit.\n#include \"cudatrace/target/static_runtime.h\"\n\nnamespace cudatrace {\nnamespace {\n\n";
  std::size_t n = 0, bytes = 0;
  for (const Object& obj : objects)
    for (const Function& f : obj.functions) {
      out << "// " << f.name << "\nconst unsigned char kCode" << n << "[] =\n    ";
      write_bytes(out, f.code);
      out << ";\n";
      if (!f.sites.empty()) {
        out << "const RelocSite kSites" << n << "[] = {";
        for (const RelocSite& s : f.sites)
          out << "{" << s.offset << ", RelocSite::" << (s.kind == RelocSite::PcRelative ? "PcRelative" : "GotRelaxable")
              << ", " << int(s.lead) << ", " << s.target << "}, ";
        out << "};\n";
      }
      ++n;
      bytes += f.code.size();
    }
  out << "\nconst Fingerprint kFunctions[] = {\n";
  n = 0;
  for (const Object& obj : objects)
    for (const Function& f : obj.functions) {
      out << "  {\"" << f.name << "\", " << f.code.size() << ", kCode" << n << ", " << f.key_offset << ", " << f.origin
          << ", " << (f.sites.empty() ? "nullptr" : "kSites" + std::to_string(n)) << ", " << f.sites.size() << "},\n";
      ++n;
    }
  if (n == 0) out << "  {},\n";
  out << "};\n\n}  // namespace\n\nconst FingerprintTable& static_runtime_fingerprints() {\n"
      << "  static const FingerprintTable kTable{kFunctions, " << n << ", \"" << sources << "\"};\n"
      << "  return kTable;\n}\n\n}  // namespace cudatrace\n";
  // Rewritten only when it changes, so that an unchanged toolkit rebuilds nothing.
  const std::string text = out.str();
  std::ifstream old(argv[1], std::ios::binary);
  if (old && std::string(std::istreambuf_iterator<char>(old), {}) == text) return 0;
  std::ofstream file(argv[1], std::ios::binary | std::ios::trunc);
  file << text;
  if (!file.flush()) fail(std::string(argv[1]) + ": cannot write");
  std::fprintf(stderr, "gen_static_runtime: %zu fingerprints, %zu bytes of code\n", n, bytes);
  return 0;
}
