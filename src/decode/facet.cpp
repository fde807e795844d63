// The facet registry and what facets share to read a call line
// (decode/facet.h).
#include "cudatrace/decode/facet.h"

#include <nlohmann/json.hpp>

#include "cudatrace/decode/arg_types.h"
#include "cudatrace/options.h"

namespace cudatrace {

// Each facet file's single instance.
const Facet& span_facet();
const Facet& stack_facet();
const Facet& py_stack_facet();

const std::vector<const Facet*>& call_facets() {
  // The order the outputs have always written them in.
  static const std::vector<const Facet*> all = {&span_facet(), &stack_facet(), &py_stack_facet()};
  return all;
}

bool Facet::on(const Options& opts) const { return opts.*option().on; }

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
