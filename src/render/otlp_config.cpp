// --otlp's settings from the command line and the standard OpenTelemetry
// exporter variables (docs/otlp.md, "Settings"). Protobuf-free: built in
// every configuration, so that a bad value is said the same way everywhere.
#include <cctype>
#include <cstdlib>

#include "cudatrace/render/otlp.h"

namespace cudatrace {
namespace {

std::string trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

std::string percent_decoded(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool has_control_byte(std::string_view s) {
  for (unsigned char ch : s)
    if (ch < 0x20 || ch == 0x7f) return true;
  return false;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> parse_otel_pairs(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    std::string key = trimmed(item.substr(0, eq));
    if (key.empty()) continue;
    out.emplace_back(std::move(key), percent_decoded(trimmed(item.substr(eq + 1))));
  }
  return out;
}

bool read_otlp_config(const std::string& endpoint, const std::function<const char*(const char*)>& env,
                      OtlpConfig& out, std::string& error) {
  const auto var = [&env](const char* name) -> std::string {
    const char* v = env(name);
    return v ? trimmed(v) : std::string();
  };
  std::string base = endpoint.empty() ? var("OTEL_EXPORTER_OTLP_ENDPOINT") : endpoint;
  if (base.empty()) base = "http://localhost:4318";
  if (base.rfind("http://", 0) != 0 && base.rfind("https://", 0) != 0) {
    error = "--otlp " + base + ": the endpoint must be an http:// or https:// URL (OTLP over HTTP, e.g. "
            "http://localhost:4318)";
    return false;
  }
  if (has_control_byte(base)) {
    error = "--otlp: the endpoint holds a control character";
    return false;
  }
  while (!base.empty() && base.back() == '/') base.pop_back();
  out.traces_url = base + "/v1/traces";
  out.metrics_url = base + "/v1/metrics";
  for (auto& [name, value] : parse_otel_pairs(var("OTEL_EXPORTER_OTLP_HEADERS"))) {
    if (has_control_byte(name) || has_control_byte(value) || name.find(':') != std::string::npos) {
      error = "OTEL_EXPORTER_OTLP_HEADERS: the header " + name + " is not a valid HTTP header";
      return false;
    }
    out.headers.push_back(name + ": " + value);
  }
  if (const std::string timeout = var("OTEL_EXPORTER_OTLP_TIMEOUT"); !timeout.empty()) {
    char* end = nullptr;
    const long long ms = std::strtoll(timeout.c_str(), &end, 10);
    if (*end != '\0' || ms <= 0 || ms > 3600 * 1000) {
      error = "OTEL_EXPORTER_OTLP_TIMEOUT=" + timeout + ": not a number of milliseconds from 1 to 3600000";
      return false;
    }
    out.timeout = std::chrono::milliseconds(ms);
  }
  const std::string compression = var("OTEL_EXPORTER_OTLP_COMPRESSION");
  if (compression == "gzip") {
    out.gzip = true;
  } else if (!compression.empty() && compression != "none") {
    error = "OTEL_EXPORTER_OTLP_COMPRESSION=" + compression + ": not gzip or none";
    return false;
  }
  out.resource = parse_otel_pairs(var("OTEL_RESOURCE_ATTRIBUTES"));
  return true;
}

}  // namespace cudatrace
