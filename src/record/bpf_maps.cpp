#include "cudatrace/record/bpf_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "cudatrace/decode/api_stats.h"
#include "cudatrace/decode/transfer.h"

namespace cudatrace {

bool read_api_stats(int map_fd, std::size_t apis, std::vector<ct_api_stats>& out) {
  static_assert(sizeof(ct_api_stats) % 8 == 0, "per-CPU values are laid out at 8-byte multiples");
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return false;
  std::vector<ct_api_stats> per_cpu(static_cast<std::size_t>(ncpu));
  out.assign(apis, ct_api_stats{});
  for (__u32 id = 0; id < apis; ++id) {
    // The map ends at the largest id probed (bpf_object.cpp): the rest were not.
    if (bpf_map_lookup_elem(map_fd, &id, per_cpu.data()) != 0) return id > 0 && errno == ENOENT;
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

bool ActivityReader::read(int keys_fd, int counts_fd, std::uint64_t below_gen, const Sink& sink) {
  ct_activity_key key{}, next{};
  const ct_activity_key* prev = nullptr;
  std::uint32_t slot = 0;
  ct_activity now{};
  while (bpf_map_get_next_key(keys_fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (key.page_locked_gen >= below_gen || bpf_map_lookup_elem(keys_fd, &key, &slot) != 0 ||
        bpf_map_lookup_elem(counts_fd, &slot, &now) != 0)
      continue;
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

static_assert(static_cast<int>(Direction::HtoD) == CT_COPY_HTOD && static_cast<int>(Direction::DtoH) == CT_COPY_DTOH,
              "record.h's copy kinds are decode/transfer.h's Direction");

ct_activity_api activity_api(const Api& api) {
  ct_activity_api a{};
  const Effect effect = api.effect();
  if (effect == Effect::AllocHost || effect == Effect::AllocManaged || effect == Effect::RegisterHost ||
      effect == Effect::UnregisterHost || effect == Effect::FreeHost || effect == Effect::Free) {
    a.kind = CT_ACT_PAGE_LOCK;  // cudaFree may free managed memory
    return a;
  }
  if (effect == Effect::CaptureBegin || effect == Effect::CaptureEnd) {
    a.kind = effect == Effect::CaptureBegin ? CT_ACT_CAPTURE_BEGIN : CT_ACT_CAPTURE_END;
    return a;
  }
  // A graph launch sends its record: the stream model knows what the graph runs (summary.h).
  const bool graph_launch = effect == Effect::Launch && std::none_of(api.spec->args.begin(), api.spec->args.end(),
                                                                      [](const ArgSpec& arg) { return arg.type == ArgType::Func; });
  if (graph_launch || (effect != Effect::Launch && effect != Effect::Copy && effect != Effect::Memset)) return a;
  a.kind = effect == Effect::Copy ? CT_ACT_COPY : CT_ACT_COUNT;
  for (std::size_t i = 0; i < api.spec->args.size(); ++i) {
    const ArgType t = api.spec->args[i].type;
    const int slot = api.slots[i];
    auto key = [&](int slots) {
      for (int s = 0; s < slots; ++s) a.key_args |= 1u << (slot + s);
    };
    if (effect == Effect::Launch) {
      if (t == ArgType::Func || t == ArgType::Handle) key(1);
      if (t == ArgType::Dim3 || t == ArgType::Dim3Split) key(slot_count(t));
      if (t == ArgType::LaunchConfig) a.config_slot = static_cast<std::uint8_t>(slot + 1);
      continue;
    }
    if (t == ArgType::Size || t == ArgType::MemcpyKind) key(1);
    if (t == ArgType::MemcpyKind) a.copy_kind_slot = static_cast<std::uint8_t>(slot + 1);
  }
  for (const auto& [role, slot] : {std::pair{Role::Destination, &a.dst_slot}, std::pair{Role::Source, &a.src_slot}})
    if (const RoleArg& arg = api.roles[role]; arg.index >= 0) *slot = static_cast<std::uint8_t>(api.slots[arg.index] + 1);
  // Without a cudaMemcpyKind argument the name gives the direction; only the host side of HtoD and DtoH is keyed.
  const Direction d = copy_direction(*api.spec);
  if (d == Direction::HtoD || d == Direction::DtoH) a.copy_kind = static_cast<std::uint8_t>(d);
  return a;
}

void activity_record(const ct_activity_key& key, const ct_activity& counted, ActivityRecord& out) {
  std::memset(out.bytes, 0, sizeof out.bytes);
  auto& rec = *reinterpret_cast<ct_call*>(out.bytes);
  rec.type = CT_REC_CALL;
  rec.api = key.api;
  rec.parent_api = kNoApi;
  rec.pid = key.tgid;
  rec.tid = key.tgid;
  rec.ts_ns = counted.first_ts_ns;
  rec.dur_ns = counted.total_ns;
  std::memcpy(rec.args, key.args, sizeof rec.args);
  const Api* api = api_by_id(key.api);
  if (api && api->payload_index >= 0 && api->spec->args[api->payload_index].type == ArgType::LaunchConfig) {
    // CUlaunchConfig / cudaLaunchConfig_t: grid x, y, z and block x, y, z first; no attributes.
    std::memcpy(out.bytes + sizeof(ct_call), key.dims, sizeof key.dims);
    rec.payload_len = CT_LAUNCH_CONFIG_SIZE;
  }
}

}  // namespace cudatrace
