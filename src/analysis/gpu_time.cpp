// GPU time from host events (gpu_time.h). The rules and why they hold are in
// docs/gpu-time.md; the comments here name the rule each step applies.
#include "cudatrace/analysis/gpu_time.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cudatrace/decode/transfer.h"

namespace cudatrace {
namespace {

constexpr std::uint64_t kUnknown = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t kAllWork = std::numeric_limits<std::uint64_t>::max();
constexpr std::int32_t kNotReady = 600;  // cudaErrorNotReady and CUDA_ERROR_NOT_READY
constexpr double kMiB = 1024.0 * 1024.0;
constexpr std::uint32_t kOverheadColumn = 0;

std::array<std::uint32_t, 6> launch_dims(const Call& c) {
  std::array<std::uint32_t, 6> dims{};
  int n = 0;
  for (const NamedValue& a : c.args)
    if (const auto* d = std::get_if<Dim3>(&a.value); d && n < 2) {
      dims[3 * n] = d->x;
      dims[3 * n + 1] = d->y;
      dims[3 * n + 2] = d->z;
      ++n;
    }
  return dims;
}

// Symmetric eigen-decomposition by cyclic Jacobi rotations: `a` (n x n,
// row-major) is destroyed; eigenvalues in `values`, eigenvectors in the
// columns of `vectors`. The fit has at most kMaxColumns columns.
void jacobi_eigen(std::vector<double> a, std::size_t n, std::vector<double>& values, std::vector<double>& vectors) {
  vectors.assign(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) vectors[i * n + i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, scale = 0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) (i == j ? scale : off) += a[i * n + j] * a[i * n + j];
    if (off <= 1e-30 * std::max(scale, 1e-300)) break;
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t q = p + 1; q < n; ++q) {
        const double apq = a[p * n + q];
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (std::size_t k = 0; k < n; ++k) {  // columns p, q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (std::size_t k = 0; k < n; ++k) {  // rows p, q
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
        for (std::size_t k = 0; k < n; ++k) {
          const double vkp = vectors[k * n + p], vkq = vectors[k * n + q];
          vectors[k * n + p] = c * vkp - s * vkq;
          vectors[k * n + q] = s * vkp + c * vkq;
        }
      }
  }
  values.resize(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = a[i * n + i];
}

// min |A x - y|^2 subject to x >= 0, from the normal equations G = A^T A,
// b = A^T y: cyclic coordinate descent, which converges for this convex problem.
std::vector<double> nonnegative_least_squares(const std::vector<double>& g, const std::vector<double>& b, std::size_t n) {
  std::vector<double> x(n, 0.0);
  for (int sweep = 0; sweep < 20000; ++sweep) {
    double largest_step = 0, largest_x = 0;
    for (std::size_t j = 0; j < n; ++j) {
      if (g[j * n + j] <= 0) continue;
      double gradient = -b[j];
      for (std::size_t k = 0; k < n; ++k) gradient += g[j * n + k] * x[k];
      const double next = std::max(0.0, x[j] - gradient / g[j * n + j]);
      largest_step = std::max(largest_step, std::abs(next - x[j]));
      x[j] = next;
      largest_x = std::max(largest_x, next);
    }
    if (largest_step <= 1e-12 * std::max(largest_x, 1e-9)) break;
  }
  return x;
}

}  // namespace

GpuTimeTracker::GpuTimeTracker(GpuTimeOptions opts)
    : opts_(opts), column_names_{"per-window overhead"}, column_kernels_(1), column_counts_{0} {}

GpuTimeTracker::Stream* GpuTimeTracker::stream_of(Process& p, const Call& c) {
  const NamedValue* arg = role_arg(c, Role::Stream);
  // No stream argument (cudaMemcpy, cudaMemset): the default stream.
  const std::string id = arg && !arg->id.empty() ? std::string(arg->id) : std::string("default");
  auto it = p.lanes.find({id, id == "per-thread" ? c.tid : 0});
  if (it == p.lanes.end()) return nullptr;
  return &p.streams[it->second];
}

std::uint32_t GpuTimeTracker::column_of(const KernelShape& k) {
  if (auto it = kernel_columns_.find(k); it != kernel_columns_.end()) return it->second;
  if (column_names_.size() >= kMaxColumns) return kMaxColumns;
  const auto column = static_cast<std::uint32_t>(column_names_.size());
  const auto& d = k.dims;
  column_names_.push_back(d == std::array<std::uint32_t, 6>{}
                              ? k.short_name
                              : fmt::format("{} <<<({},{},{}),({},{},{})>>>", k.short_name, d[0], d[1], d[2], d[3],
                                            d[4], d[5]));
  column_kernels_.push_back(k);
  column_counts_.push_back(0);
  kernel_columns_.emplace(k, column);
  return column;
}

std::uint32_t GpuTimeTracker::transfer_column(Direction d) {
  std::uint32_t& slot = transfer_columns_[static_cast<int>(d)];
  if (slot) return slot - 1;
  if (column_names_.size() >= kMaxColumns) return kMaxColumns;
  slot = static_cast<std::uint32_t>(column_names_.size()) + 1;
  column_names_.push_back(fmt::format("{} per MiB", direction_name(d)));
  column_kernels_.emplace_back();
  column_counts_.push_back(0);
  return slot - 1;
}

void GpuTimeTracker::note_thread(Process& p, const Call& c) {
  // An enqueue recorded at entry returned before its thread's next call at
  // its depth or above entered: that call bounds when the work was submitted.
  for (auto it = p.awaiting_submit.begin(); it != p.awaiting_submit.end();) {
    auto s = p.streams.find(*it);
    if (s == p.streams.end() || s->second.last_submit_by_ns != kUnknown) {
      it = p.awaiting_submit.erase(it);
    } else if (s->second.last_enqueue_tid == c.tid && c.ts_ns > s->second.last_enqueue_ns &&
               c.depth <= s->second.last_enqueue_depth) {
      s->second.last_submit_by_ns = c.ts_ns;
      it = p.awaiting_submit.erase(it);
    } else {
      ++it;
    }
  }
  if (!c.counted() || c.unfinished) return;
  Thread& t = p.threads[c.tid];
  if (!t.first_ns) t.first_ns = c.ts_ns;
  t.last_ns = std::max(t.last_ns, c.end_ns());
}

void GpuTimeTracker::enqueue(Process& p, const Call& c, const StreamActivity::Queued& q) {
  Stream& s = p.streams[q.lane];
  if (s.id.empty()) {
    s.lane = q.lane;
    s.id = std::string(q.stream);
    p.lanes[{s.id, s.id == "per-thread" ? c.tid : 0}] = q.lane;
  }
  if (s.sealed || s.pending.empty()) {
    if (s.pending.size() >= kMaxSegments) {
      // The oldest two merge: an event recorded between them can no longer close either alone.
      for (auto& [column, n] : s.pending[0].columns) s.pending[1].columns[column] += n;
      Segment& into = s.pending[1];
      const Segment& from = s.pending[0];
      into.first_launch_ns = from.first_launch_ns;
      into.kernels += from.kernels;
      into.transfers += from.transfers;
      into.host_functions += from.host_functions;
      into.unfittable |= from.unfittable;
      into.waits_on_other |= from.waits_on_other;
      into.merged = true;
      s.pending.erase(s.pending.begin());
    }
    s.pending.emplace_back();
    s.pending.back().first_launch_ns = c.ts_ns;
    s.pending.back().waits_on_other = s.next_waits;
    s.next_waits = false;
    s.sealed = false;
  }
  Segment& seg = s.pending.back();
  seg.last_seq = ++s.seq;
  std::uint32_t column = kMaxColumns;
  double amount = 1;
  if (q.effect == Effect::Launch) {
    ++seg.kernels;
    const std::string_view name = c.kernel.empty() ? std::string_view("graph") : c.kernel;
    const std::string_view short_name = c.kernel.empty() ? std::string_view("graph") : c.kernel_short;
    column = column_of({std::string(name), std::string(short_name), launch_dims(c)});
  } else if (q.effect == Effect::Copy || q.effect == Effect::Memset) {
    ++seg.transfers;
    column = transfer_column(q.effect == Effect::Memset ? Direction::Memset : q.direction);
    amount = double(q.bytes) / kMiB;
  } else {
    ++seg.host_functions;
  }
  if (column < kMaxColumns)
    seg.columns[column] += amount;
  else if (q.effect != Effect::HostFunc)
    seg.unfittable = true;
  const bool returned = !c.unfinished && c.dur_ns;
  s.last_submit_by_ns = returned ? c.end_ns() : kUnknown;
  if (!returned) p.awaiting_submit.insert(s.lane);
  s.last_enqueue_tid = c.tid;
  s.last_enqueue_ns = c.ts_ns;
  s.last_enqueue_depth = c.depth;
}

void GpuTimeTracker::close(Process& p, Stream& s, std::uint64_t seq, const Call& c, bool blocked) {
  std::size_t n = 0;
  while (n < s.pending.size() && s.pending[n].last_seq <= seq) ++n;
  if (!n) return;
  const bool whole_queue = n == s.pending.size();
  GpuWindow w;
  w.pid = c.pid;
  w.lane = s.lane;
  w.stream = s.id;
  w.first_launch_ns = s.pending[0].first_launch_ns;
  w.close_entry_ns = c.ts_ns;
  w.close_end_ns = c.end_ns();
  w.bound = blocked ? GpuWindow::Bound::Gpu : GpuWindow::Bound::Host;
  std::map<std::uint32_t, double> columns;
  bool unfittable = false, waits_on_other = false, merged = false;
  for (std::size_t i = 0; i < n; ++i) {
    const Segment& seg = s.pending[i];
    for (const auto& [column, amount] : seg.columns) columns[column] += amount;
    w.kernels += seg.kernels;
    w.transfers += seg.transfers;
    w.host_functions += seg.host_functions;
    unfittable |= seg.unfittable;
    waits_on_other |= seg.waits_on_other;
    merged |= seg.merged;
  }
  // Upper bound: in stream order, every piece of the window ran between the
  // first enqueue's entry and the closing call's return.
  w.upper_ns = w.close_end_ns - std::min(w.close_end_ns, w.first_launch_ns);

  // Lower bound: the stream certainly held work from the last submission
  // (or the previous close) to the last moment the work was seen outstanding,
  // and, running alone, the GPU was running it (docs/gpu-time.md).
  const std::uint64_t outstanding_at = std::max(blocked ? c.ts_ns : 0, whole_queue ? s.outstanding_at_ns : 0);
  const std::uint64_t held_from = std::max(s.last_submit_by_ns, s.settled_ns);
  bool alone = true;
  for (const auto& [lane, other] : p.streams)
    if (lane != s.lane && (!other.pending.empty() || other.settled_ns > held_from)) alone = false;
  if (!outstanding_at)
    w.lower_bound_note = "never seen outstanding";
  else if (!whole_queue)
    w.lower_bound_note = "closed at an event: its last submission is not known";
  else if (s.last_submit_by_ns == kUnknown)
    w.lower_bound_note = "last submission time unknown";
  else if (w.host_functions)
    w.lower_bound_note = "holds host functions";
  else if (waits_on_other)
    w.lower_bound_note = "waits for another stream";
  else if (!alone)
    w.lower_bound_note = "other streams had work";
  else
    w.lower_ns = std::min(w.upper_ns, outstanding_at - std::min(outstanding_at, held_from + opts_.launch_latency_ns));

  // The fit: a blocked window of one stream running alone, whose span from
  // its first enqueue (or the previous close) to the return is its GPU time
  // plus a per-window constant.
  const bool fits = blocked && alone && !unfittable && !waits_on_other && !merged && !w.host_functions &&
                    !columns.empty();
  if (fits) {
    const std::uint64_t from = std::max(w.first_launch_ns, s.settled_ns);
    add_row(columns, double(w.close_end_ns - std::min(w.close_end_ns, from)));
    ++totals_.fitted_windows;
  } else if (blocked && !columns.empty()) {
    ++totals_.unfitted_windows;
  }
  if (!fit_.empty() && !unfittable) {
    double sum = 0;
    bool known = true;
    for (const auto& [column, amount] : columns) {
      const std::string& name = column_names_[column];  // a structured binding cannot be captured (C++17)
      auto e = std::find_if(fit_.begin(), fit_.end(), [&](const GpuTimeEstimate& x) { return x.column == name; });
      if (e == fit_.end() || !e->separable) known = false;
      else sum += amount * e->estimate_ns;
    }
    if (known && !w.host_functions)
      w.estimate_ns = std::clamp<std::uint64_t>(static_cast<std::uint64_t>(sum), w.lower_ns, w.upper_ns);
  }

  ++totals_.windows;
  ++(blocked ? totals_.gpu_bound_windows : totals_.host_bound_windows);
  totals_.lower_ns += w.lower_ns;
  totals_.upper_ns += w.upper_ns;
  s.pending.erase(s.pending.begin(), s.pending.begin() + static_cast<std::ptrdiff_t>(n));
  s.settled_ns = std::max(s.settled_ns, w.close_end_ns);
  if (whole_queue) {
    s.outstanding_at_ns = 0;
    s.sealed = true;
  }
  closed_.push_back(std::move(w));
}

void GpuTimeTracker::add_row(const std::map<std::uint32_t, double>& columns, double y_ns) {
  if (gram_.empty()) {
    gram_.assign(kMaxColumns * kMaxColumns, 0.0);
    rhs_.assign(kMaxColumns, 0.0);
  }
  const double y = y_ns / 1e3;  // microseconds: better conditioned sums
  std::vector<std::pair<std::uint32_t, double>> row(columns.begin(), columns.end());
  row.emplace(row.begin(), kOverheadColumn, 1.0);
  for (const auto& [i, ai] : row) {
    rhs_[i] += ai * y;
    column_counts_[i] += i == kOverheadColumn ? 1 : static_cast<std::uint64_t>(std::llround(std::ceil(ai)));
    for (const auto& [j, aj] : row) gram_[i * kMaxColumns + j] += ai * aj;
  }
  yy_ += y * y;
  ++rows_;
}

void GpuTimeTracker::refit() const {
  fitted_rows_ = rows_;
  fit_.clear();
  fit_overhead_ = false;
  if (!rows_) return;
  std::vector<std::uint32_t> used;
  for (std::uint32_t j = 0; j < column_names_.size(); ++j)
    if (gram_[j * kMaxColumns + j] > 0) used.push_back(j);
  // A per-window constant the windows cannot tell from the kernels (every
  // window alike) is left out: the kernels' estimates then include it.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::size_t n = used.size();
    std::vector<double> g(n * n), b(n), norm(n);
    for (std::size_t i = 0; i < n; ++i) norm[i] = std::sqrt(gram_[used[i] * kMaxColumns + used[i]]);
    for (std::size_t i = 0; i < n; ++i) {
      b[i] = rhs_[used[i]];
      for (std::size_t j = 0; j < n; ++j) g[i * n + j] = gram_[used[i] * kMaxColumns + used[j]];
    }
    std::vector<double> scaled(n * n), values, vectors;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) scaled[i * n + j] = g[i * n + j] / (norm[i] * norm[j]);
    jacobi_eigen(scaled, n, values, vectors);
    const double largest = *std::max_element(values.begin(), values.end());
    std::vector<bool> null(n);
    std::size_t rank = 0;
    for (std::size_t k = 0; k < n; ++k) rank += !(null[k] = values[k] <= 1e-9 * largest);
    std::vector<bool> separable(n, true);
    std::vector<double> inverse_diagonal(n, 0.0);  // of the pseudo-inverse of g
    for (std::size_t i = 0; i < n; ++i) {
      double in_null_space = 0;
      for (std::size_t k = 0; k < n; ++k) {
        const double v = vectors[i * n + k];
        if (null[k])
          in_null_space += v * v;
        else
          inverse_diagonal[i] += v * v / values[k];
      }
      separable[i] = in_null_space < 1e-6;
      inverse_diagonal[i] /= norm[i] * norm[i];
    }
    if (attempt == 0 && used[0] == kOverheadColumn && !separable[0]) {
      used.erase(used.begin());
      continue;
    }
    const std::vector<double> x = nonnegative_least_squares(g, b, n);
    double residual = yy_;
    for (std::size_t i = 0; i < n; ++i) {
      residual -= 2 * x[i] * b[i];
      for (std::size_t j = 0; j < n; ++j) residual += x[i] * g[i * n + j] * x[j];
    }
    const bool spare_rows = rows_ > rank;
    const double variance = spare_rows ? std::max(0.0, residual) / double(rows_ - rank) : 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t column = used[i];
      if (column == kOverheadColumn) {
        fit_overhead_ = separable[i];
        continue;
      }
      GpuTimeEstimate e;
      e.column = column_names_[column];
      e.kernel = !column_kernels_[column].name.empty();
      e.name = e.kernel ? column_kernels_[column].name : e.column;
      e.dims = column_kernels_[column].dims;
      e.launches = column_counts_[column];
      e.separable = separable[i] && spare_rows;
      e.estimate_ns = x[i] * 1e3;
      e.stderr_ns = std::sqrt(variance * inverse_diagonal[i]) * 1e3;
      fit_.push_back(std::move(e));
    }
    break;
  }
  std::stable_sort(fit_.begin(), fit_.end(), [](const GpuTimeEstimate& a, const GpuTimeEstimate& b) {
    if (a.kernel != b.kernel) return a.kernel;
    return a.estimate_ns * double(a.launches) > b.estimate_ns * double(b.launches);
  });
}

void GpuTimeTracker::account_wait(const Call& c, bool blocked, bool kernels, bool transfers) {
  if (!blocked)
    totals_.sync_ns += c.dur_ns;
  else if (kernels)
    totals_.gpu_wait_ns += c.dur_ns;
  else if (transfers || c.api->effect() == Effect::Copy)
    totals_.transfer_wait_ns += c.dur_ns;
  else
    totals_.sync_ns += c.dur_ns;  // blocked, but for no work the trace shows
}

const std::vector<GpuWindow>& GpuTimeTracker::on_call(const Call& c, const StreamActivity& activity) {
  closed_.clear();
  Process& p = procs_[c.pid];
  note_thread(p, c);
  if (c.unfinished || !c.outermost()) return closed_;
  const Effect effect = c.api->effect();
  if (effect == Effect::SetDevice && c.counted()) {
    const auto device = role_value(c, Role::Device);
    if (device && p.device && *p.device != *device) p.device_switched = true;
    if (device) p.device = device;
  } else if (c.counted() && (c.api->symbol.rfind("cuCtxSetCurrent", 0) == 0 || c.api->symbol.rfind("cuCtxPushCurrent", 0) == 0)) {
    const auto context = role_value(c, Role::Object);
    if (context && p.context && *p.context != *context) p.device_switched = true;
    if (context) p.context = context;
  }
  const bool not_ready = c.counted() && c.status() == kNotReady;
  if (not_ready && (effect == Effect::StreamQuery || effect == Effect::EventQuery)) {
    // The work was not done when the query ran.
    Stream* s = nullptr;
    if (effect == Effect::StreamQuery) {
      s = stream_of(p, c);
    } else if (const NamedValue* e = role_arg(c, Role::Event); e && !e->id.empty()) {
      if (auto it = p.events.find(std::string(e->id)); it != p.events.end() && p.streams.count(it->second.lane))
        s = &p.streams[it->second.lane];
    }
    if (s && !s->pending.empty()) s->outstanding_at_ns = std::max(s->outstanding_at_ns, c.ts_ns);
    return closed_;
  }
  if (!c.counted() || !c.succeeded()) return closed_;
  if (activity.queued) {
    // A synchronous copy starts a piece of its own: it may close the work before it and not itself.
    if (effect == Effect::Copy && !role_arg(c, Role::Stream))
      if (auto s = p.streams.find(activity.queued->lane); s != p.streams.end()) s->second.sealed = true;
    enqueue(p, c, *activity.queued);
  }
  const bool blocked = c.dur_ns >= opts_.immediate_ns;
  switch (effect) {
    case Effect::Copy: {
      if (role_arg(c, Role::Stream)) break;
      // A synchronous copy: to the host, it returns once it and the work
      // before it are done; from the host, once the work before it is done
      // (a pageable source is staged, not yet copied); others need not wait.
      Stream* s = activity.queued ? &p.streams[activity.queued->lane] : nullptr;
      const Direction d = activity.queued ? activity.queued->direction : Direction::Default;
      if (!s || (d != Direction::DtoH && d != Direction::HtoD)) break;
      if (d == Direction::DtoH)
        close(p, *s, kAllWork, c, blocked);
      else if (s->seq > 1)
        close(p, *s, s->seq - 1, c, blocked);
      account_wait(c, blocked, false, true);  // a blocking copy is transfer time, whatever it waited for first
      break;
    }
    case Effect::StreamSync:
    case Effect::StreamQuery:
      if (Stream* s = stream_of(p, c)) close(p, *s, kAllWork, c, blocked && effect == Effect::StreamSync);
      break;
    case Effect::DeviceSync:
      // A device synchronisation covers the current device only: with more than one in use, nothing.
      if (!p.device_switched)
        for (auto& [lane, s] : p.streams) close(p, s, kAllWork, c, blocked);
      break;
    case Effect::EventRecord:
      if (const NamedValue* e = role_arg(c, Role::Event); e && !e->id.empty()) {
        if (Stream* s = stream_of(p, c)) {
          p.events[std::string(e->id)] = {s->lane, s->seq};
          s->sealed = true;
        } else {
          p.events.erase(std::string(e->id));  // recorded on a stream with no work seen: nothing to wait for
        }
      }
      break;
    case Effect::EventSync:
    case Effect::EventQuery:
      if (const NamedValue* e = role_arg(c, Role::Event); e && !e->id.empty())
        if (auto it = p.events.find(std::string(e->id)); it != p.events.end() && p.streams.count(it->second.lane))
          close(p, p.streams[it->second.lane], it->second.seq, c, blocked && effect == Effect::EventSync);
      break;
    case Effect::StreamWaitEvent:
      if (Stream* s = stream_of(p, c)) {
        s->next_waits = true;
        s->sealed = true;
      }
      break;
    default:
      break;
  }
  if (effect == Effect::StreamSync || effect == Effect::EventSync || effect == Effect::DeviceSync) {
    bool kernels = false, transfers = false;
    for (const GpuWindow& w : closed_) {
      kernels |= w.kernels > 0;
      transfers |= w.transfers > 0;
    }
    account_wait(c, blocked, kernels, transfers);
  }
  if (rows_ >= 2 * fitted_rows_ || rows_ >= fitted_rows_ + 256) refit();
  return closed_;
}

GpuTimeReport GpuTimeTracker::report() const {
  if (rows_ != fitted_rows_) refit();
  GpuTimeReport r = totals_;
  r.estimates = fit_;
  r.overhead_fitted = fit_overhead_;
  for (const auto& [pid, p] : procs_)
    for (const auto& [tid, t] : p.threads) r.thread_ns += t.last_ns - std::min(t.last_ns, t.first_ns);
  return r;
}

void GpuTimeTracker::forget_process(std::uint32_t pid) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;
  for (const auto& [tid, t] : it->second.threads) totals_.thread_ns += t.last_ns - std::min(t.last_ns, t.first_ns);
  procs_.erase(it);
}

std::vector<Insight> gpu_time_insights(const GpuTimeReport& r) {
  std::vector<Insight> out;
  if (!r.thread_ns || !r.windows) return out;
  const double total = double(r.thread_ns);
  const std::pair<const char*, double> shares[] = {
      {"gpu-bound", double(r.gpu_wait_ns) / total},
      {"transfer-bound", double(r.transfer_wait_ns) / total},
      {"sync-bound", double(r.sync_ns) / total},
      {"host-bound", double(r.host_ns()) / total},
  };
  const auto top = std::max_element(std::begin(shares), std::end(shares),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
  static constexpr double kDominant = 0.5;
  if (top->second < kDominant) return out;
  const std::string rule = top->first;
  std::string why;
  if (rule == "gpu-bound")
    why = "threads spent that share blocked in synchronisations waiting for kernels: faster kernels or more "
          "overlap shorten the run";
  else if (rule == "transfer-bound")
    why = "threads spent that share blocked on copies: fewer, larger, asynchronous copies from page-locked memory help";
  else if (rule == "sync-bound")
    why = "threads spent that share in synchronisations that found nothing to wait for: fewer synchronisations help";
  else
    why = "synchronisations mostly found the GPU done: the GPU waited for the host, so host work is the bottleneck";
  out.push_back({rule,
                 fmt::format("{}: {:.0f}% of {:.3f} s of thread time (host events only, docs/gpu-time.md): {}", rule,
                             100 * top->second, total / 1e9, why),
                 {{"share", top->second}, {"thread_s", total / 1e9}}});
  return out;
}

}  // namespace cudatrace
