// Which APIs a command line picked (-f groups, --layer): the ones probed,
// and the ones whose calls are shown and counted in the tables.
#pragma once

#include "cudatrace/decode/api_table.h"

namespace cudatrace {

struct Selection {
  bool group[kGroupCount] = {};
  bool layer[kLayerCount] = {true, true, false, true};  // indexed by Layer; nvtx with --nvtx
  bool wants(const Api& a) const {
    return group[static_cast<int>(a.group())] && layer[static_cast<int>(a.layer())];
  }
};

}  // namespace cudatrace
