#include "cudatrace/record/bpf_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "cudatrace/analysis/summary.h"

namespace cudatrace {

bool read_api_stats(int map_fd, std::size_t apis, std::vector<ct_api_stats>& out) {
  static_assert(sizeof(ct_api_stats) % 8 == 0, "per-CPU values are laid out at 8-byte multiples");
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return false;
  std::vector<ct_api_stats> per_cpu(static_cast<std::size_t>(ncpu));
  out.assign(apis, ct_api_stats{});
  for (__u32 id = 0; id < apis; ++id) {
    if (bpf_map_lookup_elem(map_fd, &id, per_cpu.data()) != 0) return false;
    for (const ct_api_stats& s : per_cpu) add_stats(out[id], s);
  }
  return true;
}

std::size_t ActivityReader::KeyHash::operator()(const ct_activity_key& k) const {
  return std::hash<std::string_view>()(std::string_view(reinterpret_cast<const char*>(&k), sizeof k));
}

bool ActivityReader::KeyEq::operator()(const ct_activity_key& a, const ct_activity_key& b) const {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

bool ActivityReader::read(int map_fd, std::uint64_t below_gen, const Sink& sink) {
  ct_activity_key key{}, next{};
  const ct_activity_key* prev = nullptr;
  ct_activity now{};
  while (bpf_map_get_next_key(map_fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (key.page_locked_gen >= below_gen || bpf_map_lookup_elem(map_fd, &key, &now) != 0) continue;
    ct_activity& seen = seen_[key];
    if (now.calls <= seen.calls) continue;
    // The first new call started no earlier than the last one seen before.
    const ct_activity added{now.calls - seen.calls, now.total_ns - seen.total_ns,
                            seen.calls ? seen.last_ts_ns : now.first_ts_ns, now.last_ts_ns};
    seen = now;
    sink(key, added);
  }
  return errno == ENOENT;
}

}  // namespace cudatrace
