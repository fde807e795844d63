#include "cudatrace/decode/api_stats.h"

#include <algorithm>
#include <cmath>

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

}  // namespace cudatrace
