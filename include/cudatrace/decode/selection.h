// Which APIs a command line picked (-f groups, --layer): the ones probed,
// and the ones whose calls are shown and counted in the tables.
#pragma once

#include "cudatrace/decode/api_table.h"

namespace cudatrace {

struct Selection {
  bool group[kGroupCount] = {};
  bool layer[kLayerCount] = {true, true, false, true};  // indexed by Layer; nvtx with --nvtx
  // The graph group's calls that the stream model needs to know what a graph
  // launch runs (is_graph_model_effect), without the rest of the group: set
  // with launches, so that they are traced and shown by default (they are rare).
  bool graph_model = false;
  // The module group's calls that name kernels (names_kernels), without the
  // rest of the group: set with launches, so that launches are named.
  bool kernel_names = false;
  bool wants(const Api& a) const {
    return (group[static_cast<int>(a.group())] || (graph_model && is_graph_model_effect(a.effect())) ||
            (kernel_names && names_kernels(*a.spec))) &&
           layer[static_cast<int>(a.layer())];
  }
};

}  // namespace cudatrace
