#include "cudatrace/analysis/py_sites.h"

#include "cudatrace/analysis/memory.h"
#include "cudatrace/decode/transfer.h"

namespace cudatrace {

std::string py_site_key(const PyFrame& f) { return f.file + ':' + std::to_string(f.line) + ' ' + f.func; }

void PySites::on_call(const Call& c, const MemoryTracker& memory) {
  if (c.py_stack.empty() || c.unfinished || !c.outermost()) return;
  ++with_stack;
  const PyFrame& top = c.py_stack.front();
  PySiteStats& s = sites_[py_site_key(top)];
  if (s.file.empty()) {
    s.file = top.file;
    s.func = top.func;
    s.line = top.line;
  }
  const Effect e = c.api->effect();
  if (e == Effect::StreamSync || e == Effect::EventSync || e == Effect::DeviceSync) {
    ++s.syncs;
    s.sync_ns += c.dur_ns;
    return;
  }
  if (!c.counted() || c.captured) return;
  if (e == Effect::AllocDevice || e == Effect::AllocManaged) {
    ++s.allocs;
    s.alloc_bytes += role_bytes(c);
  } else if (e == Effect::Launch) {
    ++s.launches;
  } else if (e == Effect::Copy && copy_direction(c) == Direction::HtoD) {
    const std::uint64_t bytes = role_bytes(c);
    ++s.htod;
    s.htod_bytes += bytes;
    const auto src = role_value(c, Role::Source);
    if (src && !memory.pinned(c.pid, *src, bytes)) s.htod_pageable_bytes += bytes;
  }
}

}  // namespace cudatrace
