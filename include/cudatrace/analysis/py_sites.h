// --py-stack's summary tables (docs/python.md): CUDA work by Python call
// site, the innermost Python frame of each call (file, line, function):
// synchronisation time, allocations and their bytes never freed,
// host-to-device bytes with the pageable share, launches.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cudatrace/decode/decode.h"

namespace cudatrace {

class MemoryTracker;

// "path/to/file.py:412 func": a site's key (the whole path).
std::string py_site_key(const PyFrame& f);

struct PySiteStats {
  std::string file, func;  // the site: file (whole path), line, function
  int line = 0;
  std::uint64_t syncs = 0, sync_ns = 0;  // outermost synchronisations, their time
  std::uint64_t allocs = 0, alloc_bytes = 0, unfreed_bytes = 0;  // unfreed: filled by the report
  std::uint64_t unfreed = 0;
  std::uint64_t htod = 0, htod_bytes = 0, htod_pageable_bytes = 0;
  std::uint64_t launches = 0;
};

class PySites {
 public:
  // A displayed call, after the memory tracker saw it.
  void on_call(const Call& c, const MemoryTracker& memory);
  const std::map<std::string, PySiteStats>& sites() const { return sites_; }
  bool empty() const { return sites_.empty(); }
  // Calls that carried a Python stack, and calls of Python processes that did not.
  std::uint64_t with_stack = 0;

 private:
  std::map<std::string, PySiteStats> sites_;  // by py_site_key
};

}  // namespace cudatrace
