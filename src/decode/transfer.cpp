#include "cudatrace/decode/transfer.h"

#include <string_view>
#include <vector>

namespace cudatrace {

const char* direction_name(Direction d) {
  static const char* const kNames[kDirections] = {"HtoH", "HtoD", "DtoH", "DtoD", "Peer", "Default", "Memset"};
  return kNames[static_cast<int>(d)];
}

Direction copy_direction(const ApiSpec& row, std::optional<std::uint64_t> memcpy_kind) {
  if (row.effect == Effect::Memset) return Direction::Memset;
  if (memcpy_kind) {
    switch (*memcpy_kind) {
      case 0:
        return Direction::HtoH;
      case CT_COPY_HTOD:
        return Direction::HtoD;
      case CT_COPY_DTOH:
        return Direction::DtoH;
      case 3:
        return Direction::DtoD;
      default:  // cudaMemcpyDefault, or a value CUDA does not define
        return Direction::Default;
    }
  }
  const std::string_view name = row.name;
  if (name.find("HtoD") != std::string_view::npos) return Direction::HtoD;
  if (name.find("DtoH") != std::string_view::npos) return Direction::DtoH;
  if (name.find("DtoD") != std::string_view::npos) return Direction::DtoD;
  if (name.find("Peer") != std::string_view::npos) return Direction::Peer;
  return Direction::Default;
}

Direction copy_direction(const Call& c) {
  // A kind argument that could not be read is no known kind: Default, not the name's.
  const bool has_kind = arg_of_type(c, ArgType::MemcpyKind);
  return copy_direction(*c.api->spec,
                        has_kind ? std::optional(arg_value(c, ArgType::MemcpyKind).value_or(~0ull)) : std::nullopt);
}

std::uint64_t transfer_bytes(const Call& c) {
  std::vector<std::uint64_t> sizes;
  for (const NamedValue& a : c.args)
    if (a.type == ArgType::Size) sizes.push_back(std::get<std::uint64_t>(a.value));
  if (sizes.empty()) return 0;
  if (c.api->effect() == Effect::Memset) {
    const std::string_view name = c.api->spec->name;
    const std::uint64_t element = name.find("D32") != std::string_view::npos   ? 4
                                  : name.find("D16") != std::string_view::npos ? 2
                                                                               : 1;
    return sizes.front() * element;
  }
  return sizes.size() > 2 ? sizes[sizes.size() - 2] * sizes.back() : sizes.front();
}

}  // namespace cudatrace
