// JSON values for every output: string escaping that stays valid whatever
// bytes a process name or kernel name holds, and decoded argument values.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <string_view>

#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/facet.h"

namespace cudatrace {

// Appends `s` as a quoted JSON string. Control bytes are escaped; bytes that
// are not valid UTF-8 are replaced by \ufffd so every line parses.
void append_json_string(fmt::memory_buffer& out, std::string_view s);

// A decoded argument value as JSON records write it (docs/json.md).
void append_json_value(fmt::memory_buffer& out, const Value& v);

// Facets' fields (decode/facet.h) as JSON, appended to `out` inside an
// object that already has fields: each of its fields starts with a comma.
class JsonFieldWriter final : public FieldWriter {
 public:
  explicit JsonFieldWriter(fmt::memory_buffer& out) : out_(out) {}
  void key(std::string_view name) override;
  void string(std::string_view v) override;
  void number(std::uint64_t v) override;
  void hex(std::uint64_t v) override;
  void null() override;
  void begin_array() override { open('[', true); }
  void end_array() override { close(']'); }
  void begin_object() override { open('{', false); }
  void end_object() override { close('}'); }

 private:
  struct Open {
    bool array;
    bool empty;  // nothing written in it yet
  };
  void value();  // an array's elements are separated by commas
  void open(char c, bool array);
  void close(char c);
  fmt::memory_buffer& out_;
  // What is open, outermost first: the call's object (not empty), then what
  // the facet opened. A fixed array: a writer is made for each call.
  static constexpr std::size_t kMaxDepth = 8;
  std::array<Open, kMaxDepth> open_{{{false, false}}};
  std::size_t depth_ = 1;
};

}  // namespace cudatrace
