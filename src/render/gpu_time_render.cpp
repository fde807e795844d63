// The --gpu-time summary section, text and JSON (render/gpu_time.h).
#include <cmath>
#include <iterator>

#include "cudatrace/render/format.h"
#include "cudatrace/render/gpu_time.h"
#include "cudatrace/render/json.h"

namespace cudatrace {
namespace {

double percent(std::uint64_t part, std::uint64_t whole) { return whole ? 100.0 * double(part) / double(whole) : 0; }

std::string microseconds(double ns) { return group_tenths(ns / 1e3); }

}  // namespace

void append_gpu_time_text(fmt::memory_buffer& out, const GpuTimeReport& r) {
  auto it = std::back_inserter(out);
  out.append(std::string_view("\nGPU time (from host events only: bounds and estimates, not measurements; "
                              "docs/gpu-time.md):\n\n"));
  fmt::format_to(it,
                 " thread time {:.3f} s: waiting for kernels {:.1f}%, for transfers {:.1f}%, in synchronisations "
                 "that did not wait {:.1f}%, host work {:.1f}%\n",
                 double(r.thread_ns) / 1e9, percent(r.gpu_wait_ns, r.thread_ns), percent(r.transfer_wait_ns, r.thread_ns),
                 percent(r.sync_ns, r.thread_ns), percent(r.host_ns(), r.thread_ns));
  fmt::format_to(it,
                 " {} synchronisation windows: {} GPU-bound (the host waited), {} host-bound (the queue had drained); "
                 "GPU time of their work between {:.3f} s and {:.3f} s\n",
                 r.windows, r.gpu_bound_windows, r.host_bound_windows, double(r.lower_ns) / 1e9,
                 double(r.upper_ns) / 1e9);
  fmt::format_to(it, " per-launch estimates from {} blocked windows ({} left out){}:\n", r.fitted_windows,
                 r.unfitted_windows, r.overhead_fitted ? ", a per-window overhead fitted apart" : "");
  Table table{{"Estimate (us)", "+/- (us)", "Count", "Work"}, {false, false, false, true}, {}};
  for (const GpuTimeEstimate& e : r.estimates) {
    if (e.separable)
      table.rows.push_back({microseconds(e.estimate_ns), microseconds(e.stderr_ns), group_digits(e.launches), e.column});
    else
      table.rows.push_back({"-", "-", group_digits(e.launches), e.column + " (not separable from the others)"});
  }
  if (table.rows.empty())
    out.append(std::string_view("  none\n"));
  else
    append_lines(out, table.lines());
}

void append_gpu_time_json(fmt::memory_buffer& out, const GpuTimeReport& r) {
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 ",\"gpu_time\":{{\"estimated\":true,\"thread_ns\":{},\"gpu_wait_ns\":{},\"transfer_wait_ns\":{},"
                 "\"sync_ns\":{},\"host_ns\":{},\"windows\":{},\"gpu_bound_windows\":{},\"host_bound_windows\":{},"
                 "\"lower_ns\":{},\"upper_ns\":{},\"fitted_windows\":{},\"unfitted_windows\":{},\"overhead_fitted\":{},"
                 "\"estimates\":[",
                 r.thread_ns, r.gpu_wait_ns, r.transfer_wait_ns, r.sync_ns, r.host_ns(), r.windows,
                 r.gpu_bound_windows, r.host_bound_windows, r.lower_ns, r.upper_ns, r.fitted_windows,
                 r.unfitted_windows, r.overhead_fitted);
  for (std::size_t i = 0; i < r.estimates.size(); ++i) {
    const GpuTimeEstimate& e = r.estimates[i];
    out.append(std::string_view(i ? ",{\"work\":" : "{\"work\":"));
    append_json_string(out, e.column);
    if (e.kernel) {
      out.append(std::string_view(",\"kernel\":"));
      append_json_string(out, e.name);
      fmt::format_to(it, ",\"grid\":[{},{},{}],\"block\":[{},{},{}]", e.dims[0], e.dims[1], e.dims[2], e.dims[3],
                     e.dims[4], e.dims[5]);
    }
    fmt::format_to(it, ",\"count\":{},\"separable\":{},\"estimate_ns\":", e.launches, e.separable);
    append_json_number(out, e.separable ? e.estimate_ns : NAN, 1);
    out.append(std::string_view(",\"stderr_ns\":"));
    append_json_number(out, e.separable ? e.stderr_ns : NAN, 1);
    out.push_back('}');
  }
  out.append(std::string_view("]}"));
}

}  // namespace cudatrace
