// The facet registry and what facets share to read a call line
// (decode/facet.h).
#include "cudatrace/decode/facet.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "cudatrace/decode/arg_types.h"
#include "cudatrace/options.h"

namespace cudatrace {

// Each facet file's single instance.
const Facet& span_facet();
const Facet& py_stack_facet();

const std::vector<const Facet*>& call_facets() {
  // The order the outputs have always written them in.
  static const std::vector<const Facet*> all = {&span_facet(), &stack_facet(), &py_stack_facet()};
  static_assert(kMaxFacets >= 3);
  return all;
}

Facet::Facet() {
  // Each facet is one instance, made at its first use (from any thread).
  static std::atomic<std::size_t> made{0};
  slot_ = made++;
  if (slot_ >= kMaxFacets) {
    std::fputs("cudatrace: more facets than kMaxFacets\n", stderr);
    std::abort();
  }
}

bool Facet::on(const Options& opts) const { return opts.facets[slot()]; }

std::bitset<kMaxFacets> facets_on_by_default() {
  std::bitset<kMaxFacets> on;
  for (const Facet* f : call_facets()) on[f->slot()] = !f->option().sets;
  return on;
}

void set_facet(Options& opts, const Facet& f, bool on) { opts.facets[f.slot()] = on; }

std::optional<SourceSite> source_site_of(const Call& c) {
  for (const Facet* f : call_facets())
    if (f->present(c))
      if (std::optional<SourceSite> site = f->source_site(c)) return site;
  return std::nullopt;
}

std::string source_site_key(const SourceSite& s) {
  return std::string(s.file) + ':' + std::to_string(s.line) + ' ' + std::string(s.func);
}

std::string source_site_text(const SourceSite& s) {
  if (s.unnamed) return "?";
  const std::size_t slash = s.file.rfind('/');
  std::string out(slash == std::string_view::npos ? s.file : s.file.substr(slash + 1));
  out += ':' + std::to_string(s.line) + ' ' + std::string(s.func);
  return out;
}

namespace facet_json {

using Json = nlohmann::json;

[[noreturn]] static void bad(std::string what) { throw FacetJsonError{std::move(what)}; }

std::string quoted(std::string_view name) { return "\"" + std::string(name) + "\""; }

const Json& field(const Json& obj, std::string_view key) {
  const auto it = obj.find(key);
  if (it == obj.end()) bad("no " + quoted(key) + " field");
  return *it;
}

std::uint64_t unsigned_of(const Json& v, const std::string& what) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    bad(what + " is not a non-negative integer");
  return v.get<std::uint64_t>();
}

const std::string& string_of(const Json& v, const std::string& what) {
  if (!v.is_string()) bad(what + " is not a string");
  return v.get_ref<const std::string&>();
}

std::uint64_t hex_of(const Json& v, const std::string& what) {
  const auto n = v.is_string() ? hex_text_value(v.get_ref<const std::string&>()) : std::nullopt;
  if (!n) bad(what + " is not a hex string \"0x...\"");
  return *n;
}

std::string optional_string(const Json& obj, std::string_view key, const std::string& what) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? std::string() : string_of(*it, what);
}

}  // namespace facet_json
}  // namespace cudatrace
