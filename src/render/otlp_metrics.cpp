// The node exporter's metrics as an OTLP ExportMetricsServiceRequest, made
// from the very exposition /metrics serves (render/metrics.h text()): the
// values are the scrape's by construction. docs/otlp.md maps the names.
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cudatrace/render/otlp_metrics.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb.h"

namespace cudatrace {
namespace {

namespace otlp_metrics = opentelemetry::proto::metrics::v1;
using Labels = std::vector<std::pair<std::string, std::string>>;

struct Sample {
  std::string name;
  Labels labels;
  double value = 0;
};

// `name{a="x",b="y"} value` of the text format; false for anything else.
bool parse_sample(std::string_view line, Sample& out) {
  std::size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
  out.name = std::string(line.substr(0, i));
  out.labels.clear();
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const std::size_t eq = line.find('=', i);
      if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') return false;
      std::string key(line.substr(i, eq - i)), value;
      std::size_t j = eq + 2;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] == '\\' && j + 1 < line.size()) {
          ++j;
          value += line[j] == 'n' ? '\n' : line[j];
        } else {
          value += line[j];
        }
      }
      if (j >= line.size()) return false;
      out.labels.emplace_back(std::move(key), std::move(value));
      i = j + 1;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return false;
    ++i;
  }
  while (i < line.size() && line[i] == ' ') ++i;
  const std::string value(line.substr(i, line.find(' ', i) - i));
  if (value == "+Inf") out.value = INFINITY;
  else if (value == "-Inf") out.value = -INFINITY;
  else {
    char* end = nullptr;
    out.value = std::strtod(value.c_str(), &end);
    if (end == value.c_str()) return false;
  }
  return !out.name.empty();
}

void set_attributes(google::protobuf::RepeatedPtrField<opentelemetry::proto::common::v1::KeyValue>* out,
                    const Labels& labels) {
  for (const auto& [key, value] : labels) {
    auto* kv = out->Add();
    kv->set_key(key);
    kv->mutable_value()->set_string_value(value);
  }
}

std::string_view strip_suffix(std::string_view s, std::string_view suffix) {
  if (s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix) s.remove_suffix(suffix.size());
  return s;
}

}  // namespace

std::string otlp_metric_name(std::string_view prometheus_name, std::string_view type) {
  return std::string(type == "counter" ? strip_suffix(prometheus_name, "_total") : prometheus_name);
}

bool exposition_to_otlp(std::string_view exposition, std::uint64_t start_unix_ns, std::uint64_t now_unix_ns,
                        opentelemetry::proto::metrics::v1::ScopeMetrics& out) {
  std::map<std::string, std::string> types, helps;  // by family name
  std::map<std::string, otlp_metrics::Metric*> metrics;
  // Histograms: family -> labels without le -> (le -> cumulative count), sum, count.
  struct Histogram {
    std::map<double, double> buckets;
    double sum = 0, count = 0;
  };
  std::map<std::string, std::map<Labels, Histogram>> histograms;
  const auto metric_of = [&](const std::string& family) {
    otlp_metrics::Metric*& m = metrics[family];
    if (!m) {
      m = out.add_metrics();
      m->set_name(otlp_metric_name(family, types[family]));
      m->set_description(helps[family]);
    }
    return m;
  };
  bool ok = true;
  while (!exposition.empty()) {
    const std::size_t nl = exposition.find('\n');
    const std::string_view line = exposition.substr(0, nl);
    exposition = nl == std::string_view::npos ? std::string_view() : exposition.substr(nl + 1);
    if (line.empty()) continue;
    if (line.rfind("# TYPE ", 0) == 0 || line.rfind("# HELP ", 0) == 0) {
      const std::string_view rest = line.substr(7);
      const std::size_t sp = rest.find(' ');
      if (sp == std::string_view::npos) continue;
      (line[2] == 'T' ? types : helps)[std::string(rest.substr(0, sp))] = std::string(rest.substr(sp + 1));
      continue;
    }
    if (line[0] == '#') continue;
    Sample s;
    if (!parse_sample(line, s)) {
      ok = false;
      continue;
    }
    if (types.count(s.name) && (types[s.name] == "counter" || types[s.name] == "gauge")) {
      otlp_metrics::Metric* m = metric_of(s.name);
      otlp_metrics::NumberDataPoint* p;
      if (types[s.name] == "counter") {
        auto* sum = m->mutable_sum();
        sum->set_aggregation_temporality(otlp_metrics::AGGREGATION_TEMPORALITY_CUMULATIVE);
        sum->set_is_monotonic(true);
        p = sum->add_data_points();
        p->set_start_time_unix_nano(start_unix_ns);
      } else {
        p = m->mutable_gauge()->add_data_points();
      }
      p->set_time_unix_nano(now_unix_ns);
      p->set_as_double(s.value);
      set_attributes(p->mutable_attributes(), s.labels);
      continue;
    }
    // A histogram's series: FAMILY_bucket{...,le="x"}, FAMILY_sum, FAMILY_count.
    for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
      const std::string family(strip_suffix(s.name, suffix));
      if (family == s.name || types[family] != "histogram") continue;
      Labels labels;
      double le = INFINITY;
      for (auto& kv : s.labels) {
        if (kv.first == "le") le = kv.second == "+Inf" ? INFINITY : std::strtod(kv.second.c_str(), nullptr);
        else labels.push_back(kv);
      }
      Histogram& h = histograms[family][labels];
      if (suffix == "_bucket") h.buckets[le] = s.value;
      else if (suffix == "_sum") h.sum = s.value;
      else h.count = s.value;
      metric_of(family);
      break;
    }
  }
  for (auto& [family, series] : histograms) {
    auto* hist = metrics[family]->mutable_histogram();
    hist->set_aggregation_temporality(otlp_metrics::AGGREGATION_TEMPORALITY_CUMULATIVE);
    for (const auto& [labels, h] : series) {
      auto* p = hist->add_data_points();
      p->set_start_time_unix_nano(start_unix_ns);
      p->set_time_unix_nano(now_unix_ns);
      p->set_count(std::uint64_t(h.count));
      p->set_sum(h.sum);
      double below = 0;  // the text format's buckets are cumulative, OTLP's are not
      for (const auto& [le, cumulative] : h.buckets) {
        if (!std::isinf(le)) p->add_explicit_bounds(le);
        p->add_bucket_counts(std::uint64_t(cumulative - below));
        below = cumulative;
      }
      set_attributes(p->mutable_attributes(), labels);
    }
  }
  return ok;
}

}  // namespace cudatrace
