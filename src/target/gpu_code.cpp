#include "cudatrace/target/gpu_code.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace cudatrace {
namespace {

constexpr std::uint32_t kFatbinMagic = 0xBA55ED50;
constexpr std::size_t kFatbinHeader = 16;     // magic, version, header size, size of what follows
constexpr std::size_t kEntryArchOffset = 28;  // in an entry's header: its architecture
constexpr std::uint16_t kEntryPtx = 1, kEntryElf = 2;

template <typename T>
T read_at(std::string_view bytes, std::size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

void add_once(std::vector<unsigned>& archs, unsigned arch) {
  if (std::find(archs.begin(), archs.end(), arch) == archs.end()) archs.push_back(arch);
}

std::string arch_list(const std::vector<unsigned>& archs, const char* prefix) {
  std::string out;
  for (std::size_t i = 0; i < archs.size(); ++i) {
    out += i == 0 ? "" : i + 1 == archs.size() ? " and " : ", ";
    out += prefix + std::to_string(archs[i]);
  }
  return out;
}

}  // namespace

GpuCode gpu_code_of_fatbins(std::string_view section) {
  GpuCode code;
  std::size_t at = 0;
  // Fat binaries follow each other, 8-byte aligned.
  while (at + kFatbinHeader <= section.size()) {
    if (read_at<std::uint32_t>(section, at) != kFatbinMagic) {
      at += 8;
      continue;
    }
    const std::size_t header = read_at<std::uint16_t>(section, at + 6);
    const std::uint64_t size = read_at<std::uint64_t>(section, at + 8);
    if (header < kFatbinHeader || size > section.size() - at - std::min(section.size() - at, header)) break;
    std::size_t entry = at + header;
    const std::size_t end = at + header + size;
    while (entry + kEntryArchOffset + 4 <= end) {
      const auto kind = read_at<std::uint16_t>(section, entry);
      const std::size_t entry_header = read_at<std::uint32_t>(section, entry + 4);
      const std::uint64_t payload = read_at<std::uint64_t>(section, entry + 8);
      const unsigned arch = read_at<std::uint32_t>(section, entry + kEntryArchOffset);
      if (kind == kEntryElf) add_once(code.cubins, arch);
      if (kind == kEntryPtx) add_once(code.ptx, arch);
      if (entry_header == 0 || payload > end - entry - std::min(end - entry, entry_header)) break;
      entry += entry_header + payload;
    }
    at = (end + 7) & ~std::size_t(7);
  }
  std::sort(code.cubins.begin(), code.cubins.end());
  std::sort(code.ptx.begin(), code.ptx.end());
  return code;
}

std::string describe(const GpuCode& code) {
  if (code.empty()) return "no GPU code";
  std::string out = arch_list(code.cubins, "sm_");
  if (code.ptx.empty()) return out + " only, no PTX";
  return out + (out.empty() ? "" : " and ") + "PTX for " + arch_list(code.ptx, "compute_");
}

}  // namespace cudatrace
