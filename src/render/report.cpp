#include "cudatrace/render/report.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string_view>

#include "cudatrace/render/json.h"
#include "cudatrace/analysis/nccl.h"
#include "cudatrace/target/stacks.h"

namespace cudatrace {

std::string group_digits(std::uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string group_tenths(double v) {
  const auto tenths = static_cast<std::uint64_t>(std::llround(std::max(0.0, v) * 10));
  return group_digits(tenths / 10) + "." + std::to_string(tenths % 10);
}

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

namespace {

using Buf = fmt::memory_buffer;

// A text table in nsys's layout: right-aligned numbers, two spaces apart.
struct Table {
  std::vector<std::string> headers;
  std::vector<bool> left;  // left-aligned columns
  std::vector<std::vector<std::string>> rows;

  std::vector<std::string> lines() const {
    std::vector<std::size_t> width(headers.size());
    for (std::size_t c = 0; c < headers.size(); ++c) {
      width[c] = headers[c].size();
      for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
    }
    auto line = [&](auto cell) {
      std::string s;
      for (std::size_t c = 0; c < headers.size(); ++c) {
        const std::string v = cell(c);
        const std::string pad(width[c] - v.size(), ' ');
        s += c ? "  " : " ";
        s += left[c] ? v + pad : pad + v;
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      return s;
    };
    std::vector<std::string> out;
    out.push_back(line([&](std::size_t c) { return headers[c]; }));
    out.push_back(line([&](std::size_t c) { return std::string(width[c], '-'); }));
    for (const auto& r : rows) out.push_back(line([&](std::size_t c) { return r[c]; }));
    return out;
  }
};

void append_lines(Buf& out, const std::vector<std::string>& lines) {
  for (const std::string& l : lines) {
    out.append(l);
    out.push_back('\n');
  }
}

// "\nTITLE:\n\n" and the table, or " none" when it has no rows.
void append_section(Buf& out, std::string_view title, const Table& table) {
  fmt::format_to(std::back_inserter(out), "\n{}:\n\n", title);
  if (table.rows.empty())
    out.append(std::string_view(" none\n"));
  else
    append_lines(out, table.lines());
}

void append_number(Buf& out, double v, int decimals) {
  if (std::isfinite(v))
    fmt::format_to(std::back_inserter(out), "{:.{}f}", v, decimals);
  else
    out.append(std::string_view("null"));
}

std::string shape_text(const std::array<std::uint32_t, 6>& s) {
  return fmt::format("({},{},{})x({},{},{})", s[0], s[1], s[2], s[3], s[4], s[5]);
}

// Shapes of a kernel, most launched first.
std::vector<std::pair<std::array<std::uint32_t, 6>, std::uint64_t>> sorted_shapes(const KernelStats& k) {
  std::vector<std::pair<std::array<std::uint32_t, 6>, std::uint64_t>> v(k.shapes.begin(), k.shapes.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return v;
}

std::vector<std::pair<const std::string*, const KernelStats*>> sorted_kernels(const Activity& a) {
  std::vector<std::pair<const std::string*, const KernelStats*>> v;
  for (const auto& [name, k] : a.kernels) v.push_back({&name, &k});
  std::stable_sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.second->launches > y.second->launches; });
  return v;
}

// log2 rows as bcc prints them: row i >= 1 holds [2^(i-1), 2^i - 1] ns, row 1 also 0.
std::vector<std::uint64_t> log2_rows(const ct_api_stats& s) {
  std::vector<std::uint64_t> rows(CT_HIST_MAX_POW + 2, 0);
  for (unsigned b = 0; b < CT_HIST_BUCKETS; ++b) {
    const unsigned row = b < CT_HIST_SUB ? (b < 2 ? 1 : 2) : b / CT_HIST_SUB + 2;
    rows[row] += s.hist[b];
  }
  return rows;
}
std::uint64_t log2_row_low(unsigned i) { return i <= 1 ? 0 : std::uint64_t(1) << (i - 1); }
std::uint64_t log2_row_high(unsigned i) { return (std::uint64_t(1) << i) - 1; }

void append_histogram_text(Buf& out, const ApiRow& r) {
  const std::vector<std::uint64_t> rows = log2_rows(r.stats);
  unsigned idx_max = 0;
  std::uint64_t val_max = 0;
  for (unsigned i = 1; i < rows.size(); ++i) {
    if (rows[i]) idx_max = i;
    val_max = std::max(val_max, rows[i]);
  }
  if (!idx_max) return;
  auto it = std::back_inserter(out);
  const bool narrow = idx_max <= 32;
  const int stars = narrow ? 40 : 20;
  fmt::format_to(it, "\nAPI = {}\n", r.api->symbol);
  if (narrow)
    fmt::format_to(it, "     {:<19} : count     distribution\n", "nsecs");
  else
    fmt::format_to(it, "               {:<29} : count     distribution\n", "nsecs");
  for (unsigned i = 1; i <= idx_max; ++i) {
    const auto n = static_cast<int>(std::floor(double(stars) * double(rows[i]) / double(val_max)));
    const std::string bar(static_cast<std::size_t>(n), '*');
    if (narrow)
      fmt::format_to(it, "{:>10} -> {:<10} : {:<8} |{:<40}|\n", log2_row_low(i), log2_row_high(i), rows[i], bar);
    else
      fmt::format_to(it, "{:>20} -> {:<20} : {:<8} |{:<20}|\n", log2_row_low(i), log2_row_high(i), rows[i], bar);
  }
}

void append_histogram_json(Buf& out, const ApiRow& r) {
  const std::vector<std::uint64_t> rows = log2_rows(r.stats);
  fmt::format_to(std::back_inserter(out), "{{\"name\":\"{}\",\"buckets\":[", r.api->symbol);
  bool first = true;
  for (unsigned i = 1; i < rows.size(); ++i) {
    if (!rows[i]) continue;
    fmt::format_to(std::back_inserter(out), "{}{{\"low\":{},\"high\":{},\"count\":{}}}", first ? "" : ",",
                   log2_row_low(i), log2_row_high(i), rows[i]);
    first = false;
  }
  out.append(std::string_view("]}"));
}

}  // namespace

std::uint64_t Reporter::calls(const std::vector<ct_api_stats>& run) const {
  std::uint64_t n = 0;
  for (const ApiRow& r : api_rows(run, opts_.display)) n += r.stats.calls;
  return n;
}

InsightInput Reporter::insight_input(const std::vector<ct_api_stats>& run, std::uint64_t now_ns) const {
  InsightInput in;
  in.traced_s = double(now_ns - std::min(now_ns, opts_.start_ns)) / 1e9;
  // Runtime synchronisations nest driver ones: merge one layer, the runtime's when it has any.
  ct_api_stats per_layer[kLayerCount] = {};
  for (std::size_t id = 0; id < run.size(); ++id) {
    const Api* api = api_by_id(static_cast<std::uint16_t>(id));
    if (!api || !opts_.display.wants(*api)) continue;
    const Effect e = api->effect();
    if (e == Effect::StreamSync || e == Effect::EventSync || e == Effect::DeviceSync)
      add_stats(per_layer[static_cast<int>(api->layer())], run[id]);
  }
  const ct_api_stats& runtime = per_layer[static_cast<int>(Layer::Runtime)];
  in.syncs = runtime.calls ? runtime : per_layer[static_cast<int>(Layer::Driver)];
  const Activity& whole_run = pipeline_.run_activity();
  in.launches = whole_run.launches;
  in.launch_span_ns = whole_run.last_launch_ns - whole_run.first_launch_ns;
  in.transfers = whole_run.transfers;
  for (const auto& [key, site] : pipeline_.memory().churn()) {
    const auto& [pid, caller, bytes] = key;
    std::string where = stacks_ && caller ? frame_text(stacks_->frame(static_cast<pid_t>(pid), caller))
                                          : fmt::format("{:#x}", caller);
    in.churn.push_back({std::move(where), bytes, site});
  }
  return in;
}

void Reporter::report(Buf& out, const std::vector<ct_api_stats>& run, std::uint64_t now_ns, bool final,
                      const CostReport* cost) {
  if (previous_.empty()) {
    previous_.assign(run.size(), ct_api_stats{});
    previous_ns_ = opts_.start_ns;
  }
  std::vector<ct_api_stats> shown = run;
  if (!final)
    for (std::size_t id = 0; id < run.size() && id < previous_.size(); ++id) shown[id] = stats_since(run[id], previous_[id]);
  const Activity& activity = final ? pipeline_.run_activity() : pipeline_.window_activity();
  const MemoryTracker& memory_tracker = pipeline_.memory();
  const std::uint64_t from_ns = final ? opts_.start_ns : previous_ns_;
  const double covered_s = double(now_ns - std::min(now_ns, from_ns)) / 1e9;
  const double at_s = double(now_ns - std::min(now_ns, opts_.start_ns)) / 1e9;
  const std::vector<ApiRow> rows = api_rows(shown, opts_.display);
  const bool with_insights = opts_.tables || opts_.insights;
  std::vector<Insight> insights =
      with_insights ? find_insights(insight_input(run, now_ns), opts_.thresholds) : std::vector<Insight>{};
  if (with_insights && opts_.collectives)
    for (Insight& i : nccl_insights(pipeline_.nccl().skew())) insights.push_back(std::move(i));
  std::vector<const Allocation*> leaks;
  if (final && opts_.tables) leaks = memory_tracker.outstanding();
  if (!final) {
    ++intervals_;
    previous_ = run;
    previous_ns_ = now_ns;
    pipeline_.start_window();
  }
  auto it = std::back_inserter(out);
  auto rel_s = [&](std::uint64_t ts) { return double(ts - std::min(ts, opts_.start_ns)) / 1e9; };
  auto leak_stack = [&](const Allocation& a) {
    return stacks_ ? stacks_->frames(static_cast<pid_t>(a.pid), a.stack) : std::vector<StackFrame>{};
  };

  if (opts_.json) {
    fmt::format_to(it, "{{\"type\":\"summary\",\"final\":{},\"ts_ns\":{},\"covered_ns\":{}", final, now_ns,
                   now_ns - std::min(now_ns, from_ns));
    if (opts_.tables) {
      out.append(std::string_view(",\"apis\":["));
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const ApiRow& r = rows[i];
        fmt::format_to(it,
                       "{}{{\"name\":\"{}\",\"layer\":\"{}\",\"calls\":{},\"errors\":{},\"total_ns\":{},\"time_pct\":",
                       i ? "," : "", r.api->symbol, layer_name(r.api->layer()), r.stats.calls, r.stats.errors,
                       r.stats.total_ns);
        append_number(out, r.time_pct, 2);
        for (auto [key, v] : {std::pair<const char*, double>{"avg_ns", r.avg_ns}, {"med_ns", r.med_ns}}) {
          fmt::format_to(it, ",\"{}\":", key);
          append_number(out, v, 1);
        }
        fmt::format_to(it, ",\"min_ns\":{},\"max_ns\":{},\"stddev_ns\":", r.stats.min_ns, r.stats.max_ns);
        append_number(out, r.stddev_ns, 1);
        out.append(std::string_view(",\"p99_ns\":"));
        append_number(out, r.p99_ns, 1);
        out.push_back('}');
      }
      out.append(std::string_view("],\"kernels\":["));
      bool first = true;
      for (const auto& [name, k] : sorted_kernels(activity)) {
        fmt::format_to(it, "{}{{\"name\":", first ? "" : ",");
        first = false;
        append_json_string(out, *name);
        out.append(std::string_view(",\"short_name\":"));
        append_json_string(out, k->short_name);
        fmt::format_to(it, ",\"launches\":{},\"shapes\":[", k->launches);
        bool first_shape = true;
        for (const auto& [s, n] : sorted_shapes(*k)) {
          fmt::format_to(it, "{}{{\"grid\":[{},{},{}],\"block\":[{},{},{}],\"launches\":{}}}", first_shape ? "" : ",",
                         s[0], s[1], s[2], s[3], s[4], s[5], n);
          first_shape = false;
        }
        out.append(std::string_view("]}"));
      }
      out.append(std::string_view("],\"transfers\":["));
      first = true;
      for (int d = 0; d < kDirections; ++d) {
        const TransferStats& t = activity.transfers[d];
        if (!t.count) continue;
        fmt::format_to(it,
                       "{}{{\"direction\":\"{}\",\"count\":{},\"bytes\":{},\"sync_count\":{},\"sync_bytes\":{},"
                       "\"sync_ns\":{},\"sync_gbps\":",
                       first ? "" : ",", direction_name(static_cast<Direction>(d)), t.count, t.bytes, t.sync_count,
                       t.sync_bytes, t.sync_ns);
        first = false;
        if (t.sync_ns)
          append_number(out, double(t.sync_bytes) / double(t.sync_ns), 3);
        else
          out.append(std::string_view("null"));
        fmt::format_to(it, ",\"pageable\":{},\"pageable_bytes\":{},\"pageable_async\":{},\"tiny\":{}}}", t.pageable,
                       t.pageable_bytes, t.pageable_async, t.tiny);
      }
      out.append(std::string_view("],\"memory\":["));
      first = true;
      for (const auto& [key, m] : memory_tracker.devices()) {
        fmt::format_to(it,
                       "{}{{\"pid\":{},\"device\":{},\"live_bytes\":{},\"peak_bytes\":{},\"peak_ts_ns\":{},"
                       "\"managed_live_bytes\":{},\"managed_peak_bytes\":{},\"allocs\":{},\"frees\":{}}}",
                       first ? "" : ",", key.first, key.second, m.live_bytes, m.peak_bytes, m.peak_ts_ns,
                       m.managed_live_bytes, m.managed_peak_bytes, m.allocs, m.frees);
        first = false;
      }
      out.push_back(']');
      if (final) {
        out.append(std::string_view(",\"leaks\":["));
        for (std::size_t i = 0; i < leaks.size(); ++i) {
          const Allocation& a = *leaks[i];
          fmt::format_to(it,
                         "{}{{\"pid\":{},\"device\":{},\"ptr\":\"{:#x}\",\"bytes\":{},\"managed\":{},\"api\":\"{}\","
                         "\"ts_ns\":{},\"age_ns\":{},\"caller\":\"{:#x}\"",
                         i ? "," : "", a.pid, a.device, a.ptr, a.bytes, a.managed, a.api->symbol, a.ts_ns,
                         now_ns - std::min(now_ns, a.ts_ns), a.caller);
          if (!a.stack.empty()) {
            out.append(std::string_view(",\"stack\":"));
            append_stack_json(out, leak_stack(a));
          }
          out.push_back('}');
        }
        out.push_back(']');
        if (const MemoryTracker::Untracked& u = memory_tracker.untracked(); u.allocations)
          fmt::format_to(it, ",\"leaks_not_listed\":{{\"count\":{},\"bytes\":{}}}", u.allocations, u.bytes);
        if (const std::uint64_t pairs = memory_tracker.untracked().churn_pairs)
          fmt::format_to(it, ",\"churn_pairs_not_followed\":{}", pairs);
      }
      if (opts_.collectives) append_collectives_json(out, pipeline_.nccl());
    }
    if (with_insights) {
      out.append(std::string_view(",\"insights\":["));
      for (std::size_t i = 0; i < insights.size(); ++i) {
        fmt::format_to(it, "{}{{\"rule\":\"{}\",\"message\":", i ? "," : "", insights[i].rule);
        append_json_string(out, insights[i].message);
        out.append(std::string_view(",\"numbers\":{"));
        for (std::size_t k = 0; k < insights[i].numbers.size(); ++k) {
          fmt::format_to(it, "{}\"{}\":", k ? "," : "", insights[i].numbers[k].first);
          append_number(out, insights[i].numbers[k].second, 3);
        }
        out.append(std::string_view("}}"));
      }
      out.push_back(']');
    }
    if (opts_.hist) {
      out.append(std::string_view(",\"histograms\":["));
      for (std::size_t i = 0; i < rows.size(); ++i) {
        if (i) out.push_back(',');
        append_histogram_json(out, rows[i]);
      }
      out.push_back(']');
    }
    if (cost) {
      out.append(std::string_view(",\"overhead\":"));
      append_cost_json(out, *cost);
    }
    out.append(std::string_view("}\n"));
    return;
  }

  if (final)
    fmt::format_to(it, "cudatrace summary: {:.3f} s traced\n", covered_s);
  else
    fmt::format_to(it, "cudatrace interval {}: {:.3f} s, up to {:.3f} s\n", intervals_, covered_s, at_s);
  if (opts_.tables) {
    Table api{{"Time (%)", "Total Time (ns)", "Num Calls", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
               "StdDev (ns)", "P99 (ns)", "Errors", "Name"},
              {false, false, false, false, false, false, false, false, false, false, true},
              {}};
    for (const ApiRow& r : rows)
      api.rows.push_back({fmt::format("{:.1f}", r.time_pct), group_digits(std::uint64_t(r.stats.total_ns)),
                          group_digits(r.stats.calls), group_tenths(r.avg_ns), group_tenths(r.med_ns),
                          group_digits(r.stats.min_ns), group_digits(r.stats.max_ns), group_tenths(r.stddev_ns),
                          group_tenths(r.p99_ns), group_digits(r.stats.errors), r.api->symbol});
    out.append(std::string_view("\nCUDA API summary:\n\n"));
    append_lines(out, api.lines());

    Table kernels{{"Launches", "Shapes", "Grid x Block (launches)", "Name"}, {false, false, true, true}, {}};
    for (const auto& [name, k] : sorted_kernels(activity)) {
      std::string shapes;
      const auto sorted = sorted_shapes(*k);
      for (std::size_t i = 0; i < sorted.size() && i < 3; ++i)
        shapes += fmt::format("{}{} ({})", i ? ", " : "", shape_text(sorted[i].first), sorted[i].second);
      if (sorted.size() > 3) shapes += fmt::format(", +{} more", sorted.size() - 3);
      kernels.rows.push_back({group_digits(k->launches), group_digits(std::uint64_t(sorted.size())),
                              shapes.empty() ? "-" : shapes, opts_.full_names ? *name : k->short_name});
    }
    append_section(out, "CUDA kernel launches", kernels);

    Table transfers{{"Direction", "Count", "Total (B)", "Avg (B)", "Sync", "Sync Time (ns)", "Sync GB/s", "Pageable",
                     "Tiny"},
                    {true, false, false, false, false, false, false, false, false},
                    {}};
    for (int d = 0; d < kDirections; ++d) {
      const TransferStats& t = activity.transfers[d];
      if (!t.count) continue;
      const bool host = d == static_cast<int>(Direction::HtoD) || d == static_cast<int>(Direction::DtoH);
      transfers.rows.push_back(
          {direction_name(static_cast<Direction>(d)), group_digits(t.count), group_digits(t.bytes),
           group_tenths(double(t.bytes) / double(t.count)), group_digits(t.sync_count), group_digits(t.sync_ns),
           t.sync_ns ? fmt::format("{:.3f}", double(t.sync_bytes) / double(t.sync_ns)) : "-",
           host ? group_digits(t.pageable) : "-", host ? group_digits(t.tiny) : "-"});
    }
    append_section(out, "CUDA transfers", transfers);

    Table memory{{"PID", "Device", "Live (B)", "Peak (B)", "Peak At (s)", "Allocs", "Frees", "Managed Live (B)",
                  "Managed Peak (B)"},
                 {false, false, false, false, false, false, false, false, false},
                 {}};
    for (const auto& [key, m] : memory_tracker.devices())
      memory.rows.push_back({std::to_string(key.first), std::to_string(key.second), group_digits(m.live_bytes),
                             group_digits(m.peak_bytes), m.peak_ts_ns ? fmt::format("{:.6f}", rel_s(m.peak_ts_ns)) : "-",
                             group_digits(m.allocs), group_digits(m.frees), group_digits(m.managed_live_bytes),
                             group_digits(m.managed_peak_bytes)});
    append_section(out, "Device memory", memory);
    if (opts_.collectives) append_collectives_text(out, pipeline_.nccl());

    if (final) {
      std::uint64_t leaked = 0;
      for (const Allocation* a : leaks) leaked += a->bytes;
      fmt::format_to(it, "\nAllocations never freed: {} ({} bytes)\n", leaks.size(), group_digits(leaked));
      if (const MemoryTracker::Untracked& u = memory_tracker.untracked(); u.allocations)
        fmt::format_to(it,
                       "  and {} older allocations ({} bytes) not listed: over {} tracked at once; if freed, the "
                       "live counts above still hold them\n",
                       group_digits(u.allocations), group_digits(u.bytes), MemoryTracker::kMaxLive);
      if (const std::uint64_t pairs = memory_tracker.untracked().churn_pairs)
        fmt::format_to(it, "  {} allocate/free pairs of call sites beyond the {} followed are not in the churn insight\n",
                       group_digits(pairs), MemoryTracker::kMaxChurnSites);
    }
    if (final && !leaks.empty()) {
      out.push_back('\n');
      Table table{{"PID", "Device", "Address", "Size (B)", "Age (s)", "Kind", "API", "Call Site"},
                  {false, false, false, false, false, true, true, true},
                  {}};
      for (const Allocation* a : leaks)
        table.rows.push_back(
            {std::to_string(a->pid), std::to_string(a->device), fmt::format("{:#x}", a->ptr), group_digits(a->bytes),
             fmt::format("{:.3f}", double(now_ns - std::min(now_ns, a->ts_ns)) / 1e9), a->managed ? "managed" : "device",
             a->api->symbol,
             stacks_ && a->caller ? frame_text(stacks_->frame(static_cast<pid_t>(a->pid), a->caller))
                                  : fmt::format("{:#x}", a->caller)});
      const std::vector<std::string> lines = table.lines();
      append_lines(out, {lines[0], lines[1]});
      for (std::size_t i = 0; i < leaks.size(); ++i) {
        append_lines(out, {lines[i + 2]});
        append_stack_text(out, leak_stack(*leaks[i]), 6);
      }
    }
  }
  if (with_insights) {
    out.append(std::string_view("\nInsights:\n\n"));
    if (insights.empty()) out.append(std::string_view(" none\n"));
    for (const Insight& i : insights) fmt::format_to(it, " - {}\n", i.message);
  }
  if (opts_.hist) {
    out.append(std::string_view("\nLatency histograms:\n"));
    for (const ApiRow& r : rows) append_histogram_text(out, r);
  }
  if (cost && !cost->processes.empty()) {
    out.append(std::string_view("\nTracing cost so far:\n\n"));
    append_cost_text(out, *cost);
  }
}

}  // namespace cudatrace
