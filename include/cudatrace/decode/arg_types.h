// What cudatrace knows of each argument type (ArgType, api_table.h), in one
// table (src/decode/arg_types.cpp): how the ABI passes it and the BPF side
// captures it, how it is decoded into values, how the text and JSON writers
// show those values, how `cudatrace report` reads them back from a --json
// trace, and how --list-apis names it. The API table, the decoder, the trace
// reader, the docs and the analyses look a type up here: adding a type is
// its ArgType, its row, and a golden line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cudatrace/decode/decode.h"
#include "cudatrace/bpf_abi.h"

namespace cudatrace {

// How the x86-64 System V ABI passes an argument, and so where the BPF side finds it.
enum class Passing : std::uint8_t {
  Integers,     // `slots` integer arguments, each in the next register or stack word
  IntegerPair,  // a struct of two integer eightbytes (dim3): both in registers, or both on the stack
  Xmm,          // a float or double: in an xmm register, which the BPF side does not save
  ByValue,      // a struct by value (ArgSpec::words): in registers or memory, not saved
  InMemory,     // a struct by value that the BPF side reads: on the stack, its address in slot CT_REG_ARGS
};

// What an argument's value is the handle of, for the analyses: the stream
// model names streams and events (s1, e2); a kernel's handle is shown as the
// kernel's name once known.
enum class HandleOf : std::uint8_t { Nothing, Stream, Event, Kernel };

// One captured argument of a record being decoded (decode_call).
struct ArgDecoding {
  const ct_call& rec;
  const Api& api;
  const ArgSpec& spec;
  int slot;                  // its first argument slot
  std::uint64_t raw;         // an input: its first slot; an out-parameter: the word read through it at return
  std::string_view payload;  // the bytes read at return (strings, launch configs, NCCL ids, ...)
  const StringReader* read_string;
  Call& call;
  bool names_kernel = false;  // the call's kernel (call.kernel_handle) is to be named

  // Appends one value of the argument (of `type`: a launch config's expansion has its own).
  template <typename V>
  void put(V&& v) {
    put(spec.name, std::forward<V>(v), spec.type);
  }
  template <typename V>
  void put(std::string_view name, V&& v, ArgType type) {
    // Built where it stays: a temporary copied in was read back before its
    // stores had landed, a stall that cost more than the decoding.
    NamedValue& a = call.args.emplace_back();
    a.name = name;
    a.value = std::forward<V>(v);
    a.type = type;
  }
  bool payload_fault() const { return rec.flags & CT_FLAG_PAYLOAD_FAULT; }
};

// A --json line's "args", each as the writer wrote its value (append_json_value):
// null, an integer, a double, a string or [x,y,z]; nullopt for a field in none of
// those forms (record/trace_line.cpp).
using JsonArgs = std::vector<std::pair<std::string_view, std::optional<Value>>>;

// One argument of a --json line being put back into the record it was decoded from.
struct ArgReading {
  const Api& api;
  const ArgSpec& spec;
  const JsonArgs& args;
  ct_call& rec;  // slots past the first (dim3), flags, ...
  int slot;
  std::vector<std::uint8_t>& payload;
  std::uint64_t& kernel_handle;  // a kernel argument's handle (TraceLine::kernel_handle)
  std::uint64_t word = 0;        // what goes in its first slot, or in its out-parameter's word
  std::string error;             // why it could not be read

  // The field `name` (the argument's own when empty): false, with `error` set,
  // when the line has none; `v` is nullptr when it is none of the forms above.
  bool field(const Value*& v, std::string_view name = {});
  // false, with `error` set to "<api> argument <name><why>".
  bool fail(std::string_view why);
};

struct ArgTypeFacts {
  ArgType type;
  const char* doc;  // how --list-apis and docs/apis.md name it
  // ---- Capture
  Passing passing;
  std::uint8_t slots;          // argument slots it takes (Integers, IntegerPair)
  std::uint8_t out_bytes;      // an out-parameter: the bytes the return probe reads through it; 0: an input
  std::uint8_t payload;        // CT_PAYLOAD_*: what the return probe reads through it into the payload
  std::uint8_t payload_words;  // CT_PAYLOAD_BYTES: how many 8-byte words, where the ArgSpec gives no other size
  HandleOf handle_of;
  // ---- Values: the decoded ones are what the text and JSON writers show
  // (format.h, json.h); `read` is their inverse from the JSON form.
  void (*decode)(ArgDecoding&);
  bool (*read)(ArgReading&);  // false: the line's value is not one this type writes (ArgReading::error)
};

const ArgTypeFacts& arg_facts(ArgType t);

// A hex value as the writers write it: "0x" and 1 to 16 hex digits; nullopt for any other text.
std::optional<std::uint64_t> hex_text_value(std::string_view s);

}  // namespace cudatrace
