// PrometheusMetrics in a build without prometheus-cpp (cudatrace-static made
// without CUDATRACE_STATIC_PROMETHEUS): --prometheus says so and exits.
#include "cudatrace/render/metrics.h"

namespace cudatrace {

std::unique_ptr<PrometheusMetrics> PrometheusMetrics::create(std::string& error) {
  error = "this cudatrace was built without the Prometheus exporter (rebuild with prometheus-cpp; see "
          "scripts/install-deps.sh and CUDATRACE_STATIC_PROMETHEUS)";
  return nullptr;
}

}  // namespace cudatrace
