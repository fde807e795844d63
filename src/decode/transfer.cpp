#include "cudatrace/decode/transfer.h"

#include <string_view>

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

}  // namespace cudatrace
