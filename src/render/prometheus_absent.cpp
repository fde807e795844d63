// PrometheusMetrics in a build without prometheus-cpp (cudatrace-static made
// without its source package, cmake/static-deps.cmake): --prometheus says so
// and exits.
#include "cudatrace/render/metrics.h"

namespace cudatrace {

std::unique_ptr<PrometheusMetrics> PrometheusMetrics::create(std::string& error) {
  error = "this cudatrace was built without the Prometheus exporter (scripts/install-deps.sh fetches "
          "prometheus-cpp's source for cudatrace-static; then build again)";
  return nullptr;
}

}  // namespace cudatrace
