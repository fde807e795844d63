#include "cudatrace/record/node_stats.h"

#include <bpf/bpf.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <tuple>

#include "cudatrace/decode/transfer.h"
#include "cudatrace/record/cost.h"

namespace cudatrace {

bool NodeStats::KeyLess::operator()(const ct_export_key& a, const ct_export_key& b) const {
  return std::tie(a.tgid, a.api, a.status, a.direction) < std::tie(b.tgid, b.api, b.status, b.direction);
}

ct_export_value export_delta(const ct_export_value& now, const ct_export_value& before) {
  auto grew = [](std::uint64_t n, std::uint64_t b) { return n > b ? n - b : 0; };
  ct_export_value d{};
  d.calls = grew(now.calls, before.calls);
  d.outer_ok = grew(now.outer_ok, before.outer_ok);
  d.total_ns = grew(now.total_ns, before.total_ns);
  d.bytes = grew(now.bytes, before.bytes);
  for (int i = 0; i < CT_EXPORT_BUCKETS; ++i) d.buckets[i] = grew(now.buckets[i], before.buckets[i]);
  return d;
}

bool NodeStats::read(const std::function<bool(std::uint32_t)>& alive, std::vector<CallDelta>& calls,
                     std::vector<HitDelta>& hits, std::string& error) {
  calls.clear();
  hits.clear();
  // Liveness is decided before reading: an entry of a process found gone is
  // final (nothing can add to it), so deleting it after this read loses nothing.
  std::map<std::uint32_t, bool> live;
  auto is_alive = [&](std::uint32_t pid) {
    auto [it, added] = live.emplace(pid, false);
    if (added) it->second = alive(pid);
    return it->second;
  };
  std::vector<ct_export_key> keys;
  ct_export_key key{}, next{};
  const ct_export_key* prev = nullptr;
  while (bpf_map_get_next_key(export_fd_, prev, &next) == 0) {
    key = next;
    prev = &key;
    keys.push_back(key);
  }
  for (const ct_export_key& k : keys) is_alive(k.tgid);
  std::map<std::uint32_t, ProcessCounters> seen;
  std::vector<ct_export_key> finished;
  ct_export_value value{};
  for (const ct_export_key& k : keys) {
    if (bpf_map_lookup_elem(export_fd_, &k, &value) != 0) {
      if (errno == ENOENT) continue;
      error = std::string("reading the aggregation map: ") + std::strerror(errno);
      return false;
    }
    ct_export_value& before = last_[k];
    const ct_export_value d = export_delta(value, before);
    before = value;
    if (d.calls || d.bytes || d.outer_ok) calls.push_back({k, d});
    if (!live[k.tgid]) {
      finished.push_back(k);
      continue;
    }
    ProcessCounters& p = seen[k.tgid];
    p.pid = k.tgid;
    p.calls += value.calls;
    p.total_ns += value.total_ns;
  }
  for (const ct_export_key& k : finished) {
    bpf_map_delete_elem(export_fd_, &k);
    last_.erase(k);
  }

  std::vector<HitCount> counts;
  read_hit_counts(cost_fd_, threads_fd_, counts);
  for (const auto& [pid, h] : hits_by_process(counts)) {
    // A thread moving from "threads" to "process_cost" between the two map
    // reads can be missed or counted twice once: keep the highest seen.
    auto& [entry_before, return_before] = last_hits_[pid];
    const std::uint64_t entry_grew = h.entry_hits > entry_before ? h.entry_hits - entry_before : 0;
    const std::uint64_t return_grew = h.return_hits > return_before ? h.return_hits - return_before : 0;
    entry_before += entry_grew;
    return_before += return_grew;
    if (entry_grew || return_grew) hits.push_back({pid, h.comm, entry_grew, return_grew});
    if (!is_alive(pid)) {
      if (forget_exited_hits_) {
        bpf_map_delete_elem(cost_fd_, &pid);
        last_hits_.erase(pid);
      }
      continue;
    }
    ProcessCounters& p = seen[pid];
    p.pid = pid;
    p.comm = h.comm;
    p.entry_hits = entry_before;
    p.return_hits = return_before;
  }
  processes_ = std::move(seen);
  return true;
}

static_assert(static_cast<int>(Direction::Default) == CT_EXPORT_DIR_DEFAULT && static_cast<int>(Direction::HtoD) == 1 &&
                  static_cast<int>(Direction::DtoD) == 3,
              "bpf_abi.h's export directions are decode/transfer.h's Direction");

ct_export_api export_api(const Api& api) {
  ct_export_api a{};
  switch (api.effect()) {
    case Effect::Launch:
      a.kind = CT_EXP_LAUNCH;
      return a;
    case Effect::AllocDevice:
    case Effect::AllocManaged:
    case Effect::Free:
      a.kind = CT_EXP_MEMORY;
      return a;
    case Effect::Copy:
      break;
    default:
      return a;
  }
  a.kind = CT_EXP_COPY;
  // The arguments of role_bytes() (decode.h): Bytes, times Rows for the 2D forms.
  auto slot_of = [&](Role r) {
    const RoleArg& arg = api.roles[r];
    return static_cast<std::uint8_t>(arg.index >= 0 ? api.slots[arg.index] + 1 : 0);
  };
  a.bytes_slot = slot_of(Role::Bytes);
  a.rows_slot = slot_of(Role::Rows);
  for (std::size_t i = 0; i < api.spec->args.size(); ++i)
    if (api.spec->args[i].type == ArgType::MemcpyKind) a.copy_kind_slot = static_cast<std::uint8_t>(api.slots[i] + 1);
  // Without a cudaMemcpyKind argument the name says it.
  a.copy_kind = static_cast<std::uint8_t>(copy_direction(*api.spec));
  return a;
}

}  // namespace cudatrace
