#include "cudatrace/analysis/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cudatrace/analysis/memory.h"

namespace cudatrace {

using u128 = unsigned __int128;

std::uint64_t ct_hist_bucket_low(unsigned b) {
  if (b < CT_HIST_SUB) return b;
  const unsigned p = b / CT_HIST_SUB + 1, sub = b % CT_HIST_SUB;
  return (std::uint64_t(1) << p) + sub * (std::uint64_t(1) << (p - 2));
}

namespace {

u128 sum_sq(const ct_api_stats& s) { return (u128(s.sum_sq_hi) << 64) | s.sum_sq_lo; }
void set_sum_sq(ct_api_stats& s, u128 v) {
  s.sum_sq_lo = static_cast<std::uint64_t>(v);
  s.sum_sq_hi = static_cast<std::uint64_t>(v >> 64);
}

// End (exclusive) of bucket b's range; the last bucket ends after the longest call.
double bucket_end(const ct_api_stats& s, unsigned b) {
  if (b + 1 < CT_HIST_BUCKETS) return double(ct_hist_bucket_low(b + 1));
  return std::max(double(ct_hist_bucket_low(CT_HIST_BUCKETS)), double(s.max_ns) + 1);
}

}  // namespace

unsigned ct_hist_bucket(std::uint64_t ns) {
  if (ns < CT_HIST_SUB) return static_cast<unsigned>(ns);
  const unsigned p = 63 - static_cast<unsigned>(__builtin_clzll(ns));
  if (p > CT_HIST_MAX_POW) return CT_HIST_BUCKETS - 1;
  return (p - 1) * CT_HIST_SUB + static_cast<unsigned>((ns >> (p - 2)) & (CT_HIST_SUB - 1));
}

void add_call(ct_api_stats& s, std::uint64_t dur_ns, bool failed) {
  if (!s.calls || dur_ns < s.min_ns) s.min_ns = dur_ns;
  s.max_ns = std::max<std::uint64_t>(s.max_ns, dur_ns);
  ++s.calls;
  s.errors += failed;
  s.total_ns += dur_ns;
  set_sum_sq(s, sum_sq(s) + u128(dur_ns) * dur_ns);
  ++s.hist[std::min<unsigned>(ct_hist_bucket(dur_ns), CT_HIST_BUCKETS - 1)];
}

void add_stats(ct_api_stats& total, const ct_api_stats& part) {
  if (!part.calls) return;
  total.min_ns = total.calls ? std::min(total.min_ns, part.min_ns) : part.min_ns;
  total.max_ns = std::max(total.max_ns, part.max_ns);
  total.calls += part.calls;
  total.errors += part.errors;
  total.total_ns += part.total_ns;
  set_sum_sq(total, sum_sq(total) + sum_sq(part));
  for (unsigned b = 0; b < CT_HIST_BUCKETS; ++b) total.hist[b] += part.hist[b];
}

ct_api_stats stats_since(const ct_api_stats& now, const ct_api_stats& before) {
  ct_api_stats d{};
  d.calls = now.calls - before.calls;
  if (!d.calls) return d;
  d.errors = now.errors - before.errors;
  d.total_ns = now.total_ns - before.total_ns;
  set_sum_sq(d, sum_sq(now) - sum_sq(before));
  int first = -1, last = -1;
  for (unsigned b = 0; b < CT_HIST_BUCKETS; ++b) {
    d.hist[b] = now.hist[b] - before.hist[b];
    if (d.hist[b]) {
      if (first < 0) first = static_cast<int>(b);
      last = static_cast<int>(b);
    }
  }
  if (!before.calls || now.min_ns < before.min_ns)
    d.min_ns = now.min_ns;
  else
    d.min_ns = std::max(now.min_ns, first < 0 ? now.min_ns : ct_hist_bucket_low(first));
  if (now.max_ns > before.max_ns || last < 0)
    d.max_ns = now.max_ns;
  else
    d.max_ns = std::min<std::uint64_t>(now.max_ns, static_cast<std::uint64_t>(bucket_end(now, last)) - 1);
  return d;
}

double percentile_ns(const ct_api_stats& s, double q) {
  std::uint64_t n = 0;
  for (std::uint64_t c : s.hist) n += c;
  if (!n) return 0;
  const double rank = q * double(n);
  double below = 0;
  for (unsigned b = 0; b < CT_HIST_BUCKETS; ++b) {
    const std::uint64_t c = s.hist[b];
    if (!c) continue;
    if (below + double(c) >= rank) {
      const double low = double(ct_hist_bucket_low(b));
      const double v = low + (rank - below) / double(c) * (bucket_end(s, b) - low);
      return std::clamp(v, double(s.min_ns), double(s.max_ns));
    }
    below += double(c);
  }
  return double(s.max_ns);
}

double stddev_ns(const ct_api_stats& s) {
  if (s.calls < 2) return 0;
  // n * sum(x^2) - (sum x)^2, exactly in 128 bits when it fits.
  const u128 n = s.calls, total = s.total_ns, sq = sum_sq(s);
  u128 n_sq, total_sq;
  double numer;
  if (!__builtin_mul_overflow(n, sq, &n_sq) && !__builtin_mul_overflow(total, total, &total_sq))
    numer = n_sq > total_sq ? double(n_sq - total_sq) : 0.0;
  else
    numer = std::max(0.0L, (long double)n * (long double)sq - (long double)total * (long double)total);
  return std::sqrt(numer / (double(s.calls) * double(s.calls - 1)));
}

double count_below(const ct_api_stats& s, std::uint64_t ns) {
  double n = 0;
  for (unsigned b = 0; b < CT_HIST_BUCKETS; ++b) {
    const double low = double(ct_hist_bucket_low(b)), end = bucket_end(s, b);
    if (end <= double(ns))
      n += double(s.hist[b]);
    else if (low < double(ns))
      n += double(s.hist[b]) * (double(ns) - low) / (end - low);
  }
  return n;
}

std::vector<std::uint64_t> log2_rows(const ct_api_stats& s) {
  std::vector<std::uint64_t> rows(CT_HIST_MAX_POW + 2, 0);
  for (unsigned b = 0; b < CT_HIST_BUCKETS; ++b) {
    const unsigned row = b < CT_HIST_SUB ? (b < 2 ? 1 : 2) : b / CT_HIST_SUB + 2;
    rows[row] += s.hist[b];
  }
  return rows;
}

std::vector<ApiRow> api_rows(const std::vector<ct_api_stats>& by_id, const Selection& display) {
  std::vector<ApiRow> rows;
  double total = 0;
  for (std::size_t id = 0; id < by_id.size(); ++id) {
    const Api* api = api_by_id(static_cast<std::uint16_t>(id));
    const ct_api_stats& s = by_id[id];
    if (!api || !s.calls || !display.wants(*api)) continue;
    rows.push_back({api, s, 0, double(s.total_ns) / double(s.calls), percentile_ns(s, 0.5), percentile_ns(s, 0.99),
                    stddev_ns(s)});
    total += double(s.total_ns);
  }
  for (ApiRow& r : rows) r.time_pct = total > 0 ? 100.0 * double(r.stats.total_ns) / total : 0;
  std::stable_sort(rows.begin(), rows.end(), [](const ApiRow& a, const ApiRow& b) {
    return a.stats.total_ns != b.stats.total_ns ? a.stats.total_ns > b.stats.total_ns : a.api->symbol < b.api->symbol;
  });
  return rows;
}

void Activity::on_call(const Call& c, const MemoryTracker& memory) {
  if (!c.counted()) return;
  count(c, memory, {1, c.dur_ns, c.ts_ns, c.ts_ns});
}

void Activity::on_calls(const Call& c, const MemoryTracker& memory, const ct_activity& counted) {
  if (counted.calls) count(c, memory, counted);
}

void Activity::count(const Call& c, const MemoryTracker& memory, const ct_activity& counted) {
  const std::uint64_t n = counted.calls;
  const Effect effect = c.api->effect();
  if (effect == Effect::Launch) {
    launches += n;
    first_launch_ns =
        first_launch_ns ? std::min<std::uint64_t>(first_launch_ns, counted.first_ts_ns) : counted.first_ts_ns;
    last_launch_ns = std::max<std::uint64_t>(last_launch_ns, counted.last_ts_ns);
    std::string name;
    if (c.kernel.empty())
      name = fmt::format("graph {:#x}", arg_value(c, ArgType::Handle).value_or(0));
    else if (c.kernel == "?")
      name = fmt::format("? {:#x}", c.kernel_handle);
    else
      name = std::string(c.kernel);
    KernelStats& k = kernels[name];
    if (k.short_name.empty()) k.short_name = c.kernel.empty() || c.kernel == "?" ? name : std::string(c.kernel_short);
    k.launches += n;
    std::vector<Dim3> dims;
    for (const NamedValue& a : c.args)
      if (const auto* d = std::get_if<Dim3>(&a.value)) dims.push_back(*d);
    if (dims.size() >= 2) k.shapes[{dims[0].x, dims[0].y, dims[0].z, dims[1].x, dims[1].y, dims[1].z}] += n;
    return;
  }
  if (effect != Effect::Copy && effect != Effect::Memset) return;
  const Direction dir = copy_direction(c);
  const std::uint64_t bytes = transfer_bytes(c);
  const bool sync = arg_of_type(c, ArgType::Stream) == nullptr;
  TransferStats& t = transfers[static_cast<int>(dir)];
  t.count += n;
  t.bytes += n * bytes;
  if (sync) {
    t.sync_count += n;
    t.sync_bytes += n * bytes;
    t.sync_ns += counted.total_ns;
  }
  if (dir != Direction::HtoD && dir != Direction::DtoH) return;
  std::vector<std::uint64_t> ptrs;  // dst, src
  for (const NamedValue& a : c.args)
    if (a.type == ArgType::Ptr) ptrs.push_back(std::get<Hex>(a.value).v);
  if (ptrs.size() >= 2 && !memory.pinned(c.pid, ptrs[dir == Direction::HtoD ? 1 : 0], bytes)) {
    t.pageable += n;
    t.pageable_bytes += n * bytes;
    t.pageable_async += sync ? 0 : n;
  }
  if (bytes < kTinyTransferBytes) {
    t.tiny += n;
    t.tiny_bytes += n * bytes;
  }
}

ct_activity_api activity_api(const Api& api) {
  ct_activity_api a{};
  const Effect effect = api.effect();
  if (effect == Effect::AllocHost || effect == Effect::AllocManaged || effect == Effect::RegisterHost ||
      effect == Effect::UnregisterHost || effect == Effect::FreeHost || effect == Effect::Free) {
    a.kind = CT_ACT_PAGE_LOCK;  // cudaFree may free managed memory
    return a;
  }
  if (effect != Effect::Launch && effect != Effect::Copy && effect != Effect::Memset) return a;
  a.kind = effect == Effect::Copy ? CT_ACT_COPY : CT_ACT_COUNT;
  int ptrs = 0;
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
    // The first two pointers are the destination and the source (summary.cpp: Activity).
    if (t == ArgType::Ptr && effect == Effect::Copy && ptrs < 2)
      (ptrs++ == 0 ? a.dst_slot : a.src_slot) = static_cast<std::uint8_t>(slot + 1);
  }
  // Without a cudaMemcpyKind argument the name gives the direction.
  const std::string_view name = api.spec->name;
  if (name.find("HtoD") != std::string_view::npos) a.copy_kind = CT_COPY_HTOD;
  if (name.find("DtoH") != std::string_view::npos) a.copy_kind = CT_COPY_DTOH;
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
