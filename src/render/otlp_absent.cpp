// make_otlp_writer in a build without libprotobuf and libcurl (CUDATRACE_OTLP
// off): --otlp says so and exits.
#include "cudatrace/render/otlp.h"

namespace cudatrace {

bool otlp_export_built() { return false; }

std::unique_ptr<OtlpWriter> make_otlp_writer(const OtlpConfig&, std::string& error) {
  error = "this cudatrace was built without the OTLP exporter (rebuild with libprotobuf, protoc and libcurl; see "
          "docs/otlp.md)";
  return nullptr;
}

}  // namespace cudatrace
