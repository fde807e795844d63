// The rows of every function the toolkit's headers declare, generated at
// build time by scripts/gen-api-rows.py (cuda.h, cuda_runtime_api.h, the
// profiler-control and the OpenGL, EGL and VDPAU interoperability headers),
// and the enums their arguments name. The
// headers say names, types and where each argument travels, not what a call
// means: src/decode/api_overrides.cpp places each row in a group and gives
// it its effect, or replaces it with a hand-written row.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "cudatrace/decode/api_table.h"

namespace cudatrace {

struct HeaderRow {
  const char* name;
  Layer layer;
  Returns returns;
  const char* prototype;
  std::vector<ArgSpec> args;
  std::uint8_t per_thread;  // kPerThreadPtsz | kPerThreadPtds
};

const std::vector<HeaderRow>& header_rows();
extern const EnumType kHeaderEnums[];
extern const std::size_t kHeaderEnumCount;
// The enum the headers call `name` (CUresult, cudaMemcpyKind, ...), nullptr if none.
const EnumType* header_enum(std::string_view name);

}  // namespace cudatrace
