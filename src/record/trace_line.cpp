// One line of a --json trace rebuilt into the ring-buffer record it was
// written from (cli/trace_line.h).
#include "cudatrace/record/trace_line.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <optional>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/decode/arg_types.h"
#include "cudatrace/decode/decode.h"

namespace cudatrace {
namespace {

using Json = nlohmann::json;

// What makes a line not a trace line; caught in TraceLine::parse.
struct BadLine {
  std::string what;
};

[[noreturn]] void bad(std::string what) { throw BadLine{std::move(what)}; }

const Json& field(const Json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end()) bad(std::string("no \"") + key + "\" field");
  return *it;
}

std::uint64_t unsigned_of(const Json& v, const std::string& what) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    bad(what + " is not a non-negative integer");
  return v.get<std::uint64_t>();
}

std::int64_t signed_of(const Json& v, const std::string& what) {
  if (v.is_number_unsigned()) return static_cast<std::int64_t>(v.get<std::uint64_t>());
  if (!v.is_number_integer()) bad(what + " is not an integer");
  return v.get<std::int64_t>();
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

// An argument's value as the JSON writer wrote it (append_json_value), or
// nullopt for none of its forms.
std::optional<Value> written_value(const Json& v) {
  if (v.is_null()) return Value{};
  if (v.is_number_unsigned()) return Value{v.get<std::uint64_t>()};
  if (v.is_number_integer()) return Value{v.get<std::int64_t>()};
  if (v.is_number_float()) return Value{v.get<double>()};
  if (v.is_string()) return Value{std::string_view(v.get_ref<const std::string&>())};
  if (!v.is_array() || v.size() != 3) return std::nullopt;
  std::uint32_t d[3];
  for (std::size_t i = 0; i < 3; ++i) {
    if (!v[i].is_number_integer() || v[i].get<std::int64_t>() < 0 || v[i].get<std::uint64_t>() > 0xffffffffu)
      return std::nullopt;
    d[i] = static_cast<std::uint32_t>(v[i].get<std::uint64_t>());
  }
  return Value{Dim3{d[0], d[1], d[2]}};
}

std::optional<std::uint64_t> optional_hex(const Json& obj, const char* key, const std::string& what) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  return hex_of(*it, what);
}

std::string optional_string(const Json& obj, const char* key, const std::string& what) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? std::string() : string_of(*it, what);
}

}  // namespace

bool TraceLine::parse(std::string_view line, std::string& error) {
  Json j;
  try {
    j = Json::parse(line.begin(), line.end());
  } catch (const Json::parse_error& e) {
    error = "not JSON";
    if (e.byte >= line.size()) error += " (the line ends early: a truncated trace?)";
    return false;
  } catch (const Json::exception&) {  // a number out of range ("1e999")
    error = "not JSON";
    return false;
  }
  try {
    if (!j.is_object()) bad("not a JSON object");
    const std::string& type = string_of(field(j, "type"), "\"type\"");
    if (type == "call" || type == "unfinished") {
      type_ = Type::Call;
    } else if (type == "warning") {
      type_ = Type::Warning;
    } else if (type == "end") {
      type_ = Type::End;
      const Json& detail = field(j, "lost_detail");
      end_ = LossCounts{};
      // Counted again from the calls, but a line that says nonsense is no end line.
      unsigned_of(field(j, "calls"), "\"calls\"");
      unsigned_of(field(j, "lost"), "\"lost\"");
      unsigned_of(field(j, "unfinished"), "\"unfinished\"");
      if (const auto it = detail.find("output"); it != detail.end()) unsigned_of(*it, "lost_detail.output");
      end_.ring_buffer = unsigned_of(field(detail, "ring_buffer"), "lost_detail.ring_buffer");
      end_.thread_table = unsigned_of(field(detail, "thread_table"), "lost_detail.thread_table");
      end_.depth_overflow = unsigned_of(field(detail, "depth_overflow"), "lost_detail.depth_overflow");
      end_.control = unsigned_of(field(detail, "control"), "lost_detail.control");
      end_.unmatched = unsigned_of(field(j, "unmatched"), "\"unmatched\"");
      return true;
    } else if (type == "summary") {
      bad("a --summary report, not a trace of calls (record the trace with --json alone)");
    } else {
      bad("unknown record type \"" + type + "\"");
    }

    const std::string& api_name = string_of(field(j, "api"), "\"api\"");
    const Api* api = api_by_symbol(api_name);
    if (!api) bad("unknown API \"" + api_name + "\" (a trace from another cudatrace version?)");
    if (const auto it = j.find("layer"); it != j.end() && string_of(*it, "\"layer\"") != layer_name(api->layer()))
      bad("\"layer\" is \"" + it->get<std::string>() + "\", but " + api_name + " is of the " +
          layer_name(api->layer()) + " layer");
    if (type_ == Type::Warning) {
      string_of(field(j, "kind"), "\"kind\"");
      hex_of(field(j, "host_ptr"), "\"host_ptr\"");
      string_of(field(j, "message"), "\"message\"");
      const std::uint64_t pid = unsigned_of(field(j, "pid"), "\"pid\"");
      if (pid > 0xffffffffu) bad("pid out of range");
      warning_.pid = static_cast<std::uint32_t>(pid);
      warning_.caller = hex_of(field(j, "caller"), "\"caller\"");
      warning_.location = string_of(field(j, "location"), "\"location\"");
      return true;
    }

    ct_call rec{};
    rec.type = type == "call" ? CT_REC_CALL : CT_REC_UNFINISHED;
    rec.api = api->id;
    rec.parent_api = kNoApi;
    if (const auto it = j.find("parent_api"); it != j.end()) {
      const Api* parent = api_by_symbol(string_of(*it, "\"parent_api\""));
      if (!parent) bad("unknown API \"" + it->get<std::string>() + "\" in \"parent_api\"");
      rec.parent_api = parent->id;
    }
    const std::uint64_t pid = unsigned_of(field(j, "pid"), "\"pid\""), tid = unsigned_of(field(j, "tid"), "\"tid\"");
    if (pid > 0xffffffffu || tid > 0xffffffffu) bad("pid or tid out of range");
    rec.pid = static_cast<std::uint32_t>(pid);
    rec.tid = static_cast<std::uint32_t>(tid);
    rec.ts_ns = unsigned_of(field(j, "ts_ns"), "\"ts_ns\"");
    const std::uint64_t depth = unsigned_of(field(j, "depth"), "\"depth\"");
    if (depth >= CT_MAX_DEPTH) bad("\"depth\" out of range");
    rec.depth = static_cast<std::uint8_t>(depth);
    const std::string& comm = string_of(field(j, "comm"), "\"comm\"");
    // U+FFFD for each byte that was not UTF-8 can make it longer than the
    // kernel's 15 bytes: cut between characters, not inside one.
    std::size_t comm_len = std::min(comm.size(), sizeof rec.comm - 1);
    while (comm_len < comm.size() && comm_len > 0 && (static_cast<unsigned char>(comm[comm_len]) & 0xc0) == 0x80)
      --comm_len;
    std::memcpy(rec.comm, comm.data(), comm_len);
    rec.caller = optional_hex(j, "caller", "\"caller\"").value_or(0);
    const bool unfinished = rec.type == CT_REC_UNFINISHED;
    const Json* entry_only = j.find("entry_only") == j.end() ? nullptr : &j.at("entry_only");
    if (entry_only && (!entry_only->is_boolean() || !entry_only->get<bool>())) bad("\"entry_only\" is not true");
    if (entry_only) {
      rec.flags |= CT_FLAG_ENTRY_ONLY;  // no latency or status of its own (docs/json.md)
    } else if (!unfinished) {
      rec.dur_ns = unsigned_of(field(j, "dur_ns"), "\"dur_ns\"");
      if (api->spec->returns == Returns::Status) rec.ret = signed_of(field(j, "ret"), "\"ret\"");
    }

    const Json& args_json = field(j, "args");
    if (!args_json.is_object()) bad("\"args\" is not an object");
    JsonArgs args;
    for (const auto& [name, value] : args_json.items()) args.emplace_back(name, written_value(value));
    std::vector<std::uint8_t> payload;
    int out_no = 0;
    kernel_handle_ = 0;
    for (std::size_t i = 0; i < api->spec->args.size(); ++i) {
      const ArgSpec& spec = api->spec->args[i];
      const int slot = api->slots[i];
      if (slot == kNotCaptured) continue;  // written as null: nothing to read back
      const ArgTypeFacts& facts = arg_facts(spec.type);
      ArgReading r{*api, spec, args, rec, slot, payload, kernel_handle_};
      __u64* word = &rec.args[slot];
      if (facts.out_bytes) {
        const int o = out_no++;
        if (o >= CT_MAX_OUTS) bad(api_name + " argument " + spec.name + ": too many out-parameters");
        const Value* v;
        if (!r.field(v)) bad(r.error);
        if (v && std::holds_alternative<std::monostate>(*v)) {
          rec.flags |= o ? CT_FLAG_OUT1_FAULT : CT_FLAG_OUT0_FAULT;
          continue;
        }
        word = &rec.outs[o];
      }
      if (!facts.read(r)) bad(r.error);
      *word = r.word;
    }
    kernel_mangled_ = optional_string(j, "kernel_mangled", "\"kernel_mangled\"");
    if (kernel_mangled_ == "?") kernel_mangled_.clear();

    stack_.clear();
    if (const auto it = j.find("stack"); it != j.end()) {
      if (!it->is_array() || it->size() > CT_MAX_STACK_FRAMES) bad("\"stack\" is not an array of frames");
      for (const Json& f : *it) {
        if (!f.is_object()) bad("\"stack\" is not an array of frames");
        StackFrame frame;
        frame.addr = hex_of(field(f, "addr"), "stack \"addr\"");
        frame.function = optional_string(f, "function", "stack \"function\"");
        frame.module = optional_string(f, "module", "stack \"module\"");
        if (!frame.function.empty()) frame.function_offset = unsigned_of(field(f, "function_offset"), "stack offset");
        if (!frame.module.empty()) frame.module_offset = unsigned_of(field(f, "module_offset"), "stack offset");
        stack_.push_back(std::move(frame));
      }
    }

    rec.payload_len = static_cast<std::uint16_t>(payload.size());
    rec.stack_len = static_cast<std::uint16_t>(stack_.size());
    const std::size_t stack_at = sizeof(ct_call) + CT_ALIGN8(payload.size());
    buf_.assign((stack_at + stack_.size() * 8 + 7) / 8, 0);
    auto* bytes = reinterpret_cast<std::uint8_t*>(buf_.data());
    std::memcpy(bytes, &rec, sizeof rec);
    if (!payload.empty()) std::memcpy(bytes + sizeof(ct_call), payload.data(), payload.size());
    for (std::size_t i = 0; i < stack_.size(); ++i) std::memcpy(bytes + stack_at + 8 * i, &stack_[i].addr, 8);
    return true;
  } catch (const BadLine& e) {
    error = e.what;
  } catch (const Json::exception& e) {
    error = std::string("unexpected value: ") + e.what();
  }
  return false;
}

}  // namespace cudatrace
