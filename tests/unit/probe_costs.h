// A measured probe cost for the pricing and rendering tests: the same CPU
// and wall time per hit kind.
#pragma once

#include "cudatrace/accounting.h"

namespace cudatrace_test {

inline cudatrace::ProbeCost probe_cost(double entry, double ret, double stepped) {
  cudatrace::ProbeCost c;
  c.entry_ns = c.entry_wall_ns = entry;
  c.return_ns = c.return_wall_ns = ret;
  c.stepped_ns = c.stepped_wall_ns = stepped;
  return c;
}

}  // namespace cudatrace_test
