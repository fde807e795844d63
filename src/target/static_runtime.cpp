#include "cudatrace/target/static_runtime.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "cudatrace/target/elf_file.h"

namespace cudatrace {
namespace {

std::uint64_t load64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::int32_t load32(const unsigned char* p) {
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// 1 where a byte is compared, 0 where the linker may have rewritten it.
std::vector<std::uint8_t> compared_bytes(const Fingerprint& f) {
  std::vector<std::uint8_t> mask(f.size, 1);
  for (std::uint32_t i = 0; i < f.site_count; ++i) {
    const RelocSite& s = f.sites[i];
    const std::uint32_t begin = s.offset >= s.lead ? s.offset - s.lead : 0;
    for (std::uint32_t b = begin; b < s.offset + 4 && b < f.size; ++b) mask[b] = 0;
  }
  return mask;
}

// Whether `part` of `elf` holds `needle`, read a window at a time and let go
// of (ElfFile::release) as it goes.
bool contains(const ElfFile& elf, std::string_view part, std::string_view needle) {
  constexpr std::size_t kWindow = 8 << 20;
  ReleasingScan scan(elf, part, needle.size());
  for (std::size_t at = 0; at < part.size(); at += kWindow) {
    scan.at(at);
    if (part.substr(at, kWindow + needle.size() - 1).find(needle) != std::string_view::npos) return true;
  }
  return false;
}

constexpr int kFilterBits = 16;
std::size_t filter_slot(std::uint64_t key) { return (key * 0x9e3779b97f4a7c15ull) >> (64 - kFilterBits); }

}  // namespace

bool fingerprinted_runtime_api(const Api& a) { return a.layer() == Layer::Runtime; }

std::size_t fingerprinted_api_count(const FingerprintTable& table) {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < table.count; ++i) names.insert(table.functions[i].name);
  return names.size();
}

std::vector<FingerprintMatch> match_fingerprints(std::string_view code, std::uint64_t vaddr,
                                                 const FingerprintTable& table,
                                                 const std::function<void(std::size_t scanned)>& progress) {
  const auto* text = reinterpret_cast<const unsigned char*>(code.data());
  std::vector<std::vector<std::uint8_t>> masks;
  struct Window {
    std::size_t index;  // fingerprint
    std::uint32_t offset;  // of the window in the function
  };
  std::unordered_map<std::uint64_t, std::vector<Window>> by_key;
  std::vector<std::uint64_t> filter((std::size_t(1) << kFilterBits) / 64);  // a bit per key hash
  for (std::size_t i = 0; i < table.count; ++i) {
    const Fingerprint& f = table.functions[i];
    masks.push_back(compared_bytes(f));
    for (std::uint32_t s = 0; s < kKeyStride; ++s) {
      const std::uint64_t key = load64(f.code + f.key_offset + s);
      by_key[key].push_back({i, f.key_offset + s});
      filter[filter_slot(key) / 64] |= std::uint64_t(1) << (filter_slot(key) % 64);
    }
  }

  // One pass over the code, a word every kKeyStride bytes: a word that is
  // one of a fingerprint's key windows is checked against that whole
  // fingerprint at the place the window puts it.
  std::vector<std::vector<std::uint64_t>> hits(table.count);
  for (std::size_t pos = 0; pos + 8 <= code.size(); pos += kKeyStride) {
    if (progress && pos % (1 << 20) == 0) progress(pos);
    const std::uint64_t word = load64(text + pos);
    const std::size_t slot = filter_slot(word);
    if (!(filter[slot / 64] >> (slot % 64) & 1)) continue;
    auto it = by_key.find(word);
    if (it == by_key.end()) continue;
    for (const Window& w : it->second) {
      const Fingerprint& f = table.functions[w.index];
      if (pos < w.offset || code.size() - (pos - w.offset) < f.size) continue;
      const unsigned char* start = text + pos - w.offset;
      bool same = true;
      for (std::uint32_t b = 0; b < f.size && same; ++b) same = !masks[w.index][b] || start[b] == f.code[b];
      if (same) hits[w.index].push_back(pos - w.offset);
    }
  }

  // One place per API name, whichever of its fingerprints found it.
  std::map<std::string_view, std::set<std::uint64_t>> places;
  for (std::size_t i = 0; i < table.count; ++i)
    places[table.functions[i].name].insert(hits[i].begin(), hits[i].end());
  std::vector<FingerprintMatch> found;
  std::set<std::string_view> named;
  for (std::size_t i = 0; i < table.count; ++i) {
    const std::string_view name = table.functions[i].name;
    if (hits[i].size() == 1 && places[name].size() == 1 && named.insert(name).second) found.push_back({i, hits[i][0]});
  }

  // The calls of a wrong match would go elsewhere than the right matches'
  // calls to the same symbol: drop every match that calls a symbol the
  // matches disagree on.
  std::map<std::uint32_t, std::set<std::uint64_t>> targets;
  for (const FingerprintMatch& m : found) {
    const Fingerprint& f = table.functions[m.index];
    for (std::uint32_t s = 0; s < f.site_count; ++s) {
      if (f.sites[s].kind != RelocSite::PcRelative) continue;
      const std::uint64_t field = m.position + f.sites[s].offset;
      targets[f.sites[s].target].insert(vaddr + field + load32(text + field));
    }
  }
  found.erase(std::remove_if(found.begin(), found.end(),
                             [&](const FingerprintMatch& m) {
                               const Fingerprint& f = table.functions[m.index];
                               for (std::uint32_t s = 0; s < f.site_count; ++s)
                                 if (f.sites[s].kind == RelocSite::PcRelative && targets[f.sites[s].target].size() > 1)
                                   return true;
                               return false;
                             }),
              found.end());
  std::sort(found.begin(), found.end(),
            [](const FingerprintMatch& a, const FingerprintMatch& b) { return a.position < b.position; });
  return found;
}

std::vector<std::pair<const Api*, std::uint64_t>> find_static_runtime(const ElfFile& elf,
                                                                       const FingerprintTable& table) {
  std::vector<std::pair<const Api*, std::uint64_t>> out;
  // Cheap tests before scanning the code (they only save time: cudatrace
  // itself passes them).
  const auto rodata = elf.section(".rodata");
  const auto text = elf.section(".text");
  if (table.count == 0 || !rodata || !text) return out;
  const std::string_view contents = elf.contents();
  if (!contains(elf, contents.substr(rodata->offset, rodata->size), "cuGetProcAddress") ||
      !contains(elf, contents.substr(rodata->offset, rodata->size), "cudaErrorInsufficientDriver"))
    return out;
  const std::string_view code = contents.substr(text->offset, text->size);
  // A fingerprint reaches back at most its size from the word that finds it.
  std::size_t longest = 0;
  for (std::size_t i = 0; i < table.count; ++i) longest = std::max<std::size_t>(longest, table.functions[i].size);
  std::vector<FingerprintMatch> found;
  {
    ReleasingScan scan(elf, code, longest);
    found = match_fingerprints(code, text->address, table, [&scan](std::size_t pos) { scan.at(pos); });
  }
  for (const FingerprintMatch& m : found)
    if (const Api* api = api_by_symbol(table.functions[m.index].name))
      out.emplace_back(api, text->offset + m.position);
  return out;
}

}  // namespace cudatrace
