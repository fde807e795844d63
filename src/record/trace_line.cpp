// One line of a --json trace rebuilt into the ring-buffer record it was
// written from (cli/trace_line.h).
#include "cudatrace/record/trace_line.h"

#include <nlohmann/json.hpp>

#include <array>
#include <charconv>
#include <cstring>
#include <optional>

#include "cudatrace/decode/api_table.h"
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
  if (!v.is_string()) bad(what + " is not a hex string \"0x...\"");
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() < 3 || s.size() > 18 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
    bad(what + " is not a hex string \"0x...\"");
  std::uint64_t n = 0;
  for (std::size_t i = 2; i < s.size(); ++i) {
    const char c = s[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) bad(what + " is not a hex string \"0x...\"");
    n = n << 4 | std::uint64_t(d);
  }
  return n;
}

// A stream argument: a handle or one of special_stream_name()'s names.
std::uint64_t stream_of(const Json& v, const std::string& what) {
  if (v.is_string())
    for (std::uint64_t h = 0; h < 3; ++h)
      if (v.get_ref<const std::string&>() == special_stream_name(h)) return h;
  return hex_of(v, what);
}

std::array<std::uint32_t, 3> dim3_of(const Json& v, const std::string& what) {
  if (!v.is_array() || v.size() != 3) bad(what + " is not [x,y,z]");
  std::array<std::uint32_t, 3> d{};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::uint64_t x = unsigned_of(v[i], what);
    if (x > 0xffffffffu) bad(what + " is out of range");
    d[i] = static_cast<std::uint32_t>(x);
  }
  return d;
}

void put_u32(std::uint8_t* p, std::uint32_t v) { std::memcpy(p, &v, sizeof v); }
void put_u64(std::uint8_t* p, std::uint64_t v) { std::memcpy(p, &v, sizeof v); }

void put_u64_payload(std::vector<std::uint8_t>& payload, std::uint64_t v) {
  payload.assign(8, 0);
  put_u64(payload.data(), v);
}

// An NCCL enum argument: a name of name_of's, or the integer of an unnamed value.
std::uint64_t nccl_enum_of(const Json& v, const char* (*name_of)(std::uint64_t), const std::string& what) {
  if (!v.is_string()) return static_cast<std::uint32_t>(signed_of(v, what));
  for (std::uint64_t k = 0; name_of(k); ++k)
    if (v.get_ref<const std::string&>() == name_of(k)) return k;
  bad(what + ": unknown name \"" + v.get_ref<const std::string&>() + "\"");
}

// An enum of the toolkit's headers, written by name or, when unnamed, as its number.
std::uint64_t header_enum_of(const Json& v, const EnumType* e, const std::string& what) {
  if (!v.is_string()) return static_cast<std::uint32_t>(signed_of(v, what));
  for (std::size_t k = 0; e && k < e->count; ++k)
    if (v.get_ref<const std::string&>() == e->values[k].name) return static_cast<std::uint32_t>(e->values[k].value);
  bad(what + ": unknown name \"" + v.get_ref<const std::string&>() + "\"");
}

// The decimal integer `text`, all of it.
std::int64_t integer_text_of(std::string_view text, const std::string& what) {
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size()) bad(what + " is not \"op#N\"");
  return n;
}

// The bytes of a CUlaunchConfig / cudaLaunchConfig_t and its cluster
// attribute, from the names decode_launch_config gave them (decode.cpp).
std::vector<std::uint8_t> launch_config_payload(Layer layer, const Json& args, const std::string& api) {
  if (args.contains("config")) return {};  // the config could not be read at the time
  const bool runtime = layer == Layer::Runtime;
  std::vector<std::uint8_t> p(CT_LAUNCH_CONFIG_SIZE, 0);
  const auto grid = dim3_of(field(args, "grid"), api + " grid");
  const auto block = dim3_of(field(args, "block"), api + " block");
  for (int i = 0; i < 3; ++i) {
    put_u32(&p[4 * i], grid[i]);
    put_u32(&p[12 + 4 * i], block[i]);
  }
  const std::uint64_t smem = unsigned_of(field(args, runtime ? "sharedMem" : "sharedMemBytes"), api + " shared memory");
  if (runtime)
    put_u64(&p[24], smem);
  else
    put_u32(&p[24], static_cast<std::uint32_t>(smem));
  put_u64(&p[32], stream_of(field(args, runtime ? "stream" : "hStream"), api + " stream"));
  if (const auto it = args.find("clusterDim"); it != args.end()) {
    constexpr std::uint32_t kClusterDimension = 4;
    const auto dims = dim3_of(*it, api + " clusterDim");
    std::vector<std::uint8_t> attr(CT_LAUNCH_ATTR_SIZE, 0);
    put_u32(&attr[0], kClusterDimension);
    for (int i = 0; i < 3; ++i) put_u32(&attr[8 + 4 * i], dims[i]);
    p.insert(p.end(), attr.begin(), attr.end());
  }
  return p;
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
      // "lost" is the sum of the details, but a line that says nonsense is no end line.
      end_calls_ = unsigned_of(field(j, "calls"), "\"calls\"");
      unsigned_of(field(j, "lost"), "\"lost\"");
      end_unfinished_ = unsigned_of(field(j, "unfinished"), "\"unfinished\"");
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
      if (const auto it = j.find("host_ptr"); it != j.end()) hex_of(*it, "\"host_ptr\"");
      string_of(field(j, "message"), "\"message\"");
      const std::uint64_t pid = unsigned_of(field(j, "pid"), "\"pid\"");
      if (pid > 0xffffffffu) bad("pid out of range");
      warning_.pid = static_cast<std::uint32_t>(pid);
      warning_.caller = hex_of(field(j, "caller"), "\"caller\"");
      warning_.location = string_of(field(j, "location"), "\"location\"");
      const auto code = j.find("gpu_code");
      warning_.gpu_code = code != j.end() ? string_of(*code, "\"gpu_code\"") : std::string();

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
    // Written by cudatrace 0.2, which recorded asynchronous operations at
    // entry: their status is unknown, and a report would count them as
    // successes.
    if (j.find("entry_only") != j.end())
      bad("a call recorded at entry only, with no status (a trace from cudatrace 0.2): record it again");
    if (!unfinished) {
      rec.dur_ns = unsigned_of(field(j, "dur_ns"), "\"dur_ns\"");
      if (api->spec->returns == Returns::Status) rec.ret = signed_of(field(j, "ret"), "\"ret\"");
    }

    const Json& args = field(j, "args");
    if (!args.is_object()) bad("\"args\" is not an object");
    std::vector<std::uint8_t> payload;
    int out_no = 0;
    kernel_handle_ = 0;
    for (std::size_t i = 0; i < api->spec->args.size(); ++i) {
      const ArgSpec& spec = api->spec->args[i];
      const int slot = api->slots[i];
      if (slot == kNotCaptured) continue;  // written as null: nothing to read back
      const std::string what = api_name + " argument " + spec.name;
      if (spec.type == ArgType::LaunchConfig) {
        payload = launch_config_payload(api->layer(), args, api_name);
        continue;
      }
      const Json& v = field(args, spec.name);
      if (is_out(spec.type)) {
        const int o = out_no++;
        if (o >= CT_MAX_OUTS) bad(what + ": too many out-parameters");
        if (v.is_null()) {
          rec.flags |= o ? CT_FLAG_OUT1_FAULT : CT_FLAG_OUT0_FAULT;
          continue;
        }
        switch (spec.type) {
          case ArgType::OutSize:
            rec.outs[o] = unsigned_of(v, what);
            break;
          case ArgType::OutInt:
            rec.outs[o] = static_cast<std::uint32_t>(signed_of(v, what));
            break;
          case ArgType::OutUInt:
            rec.outs[o] = unsigned_of(v, what);
            break;
          case ArgType::OutEnum:
            rec.outs[o] = header_enum_of(v, spec.enum_type, what);
            break;
          case ArgType::OutFloat: {
            if (!v.is_number()) bad(what + " is not a number");
            const float f = v.get<float>();
            std::uint32_t bits;
            std::memcpy(&bits, &f, sizeof bits);
            rec.outs[o] = bits;
            break;
          }
          default:
            rec.outs[o] = hex_of(v, what);
        }
        continue;
      }
      __u64& raw = rec.args[slot];
      switch (spec.type) {
        case ArgType::Size:
        case ArgType::UInt:
          raw = unsigned_of(v, what);
          break;
        case ArgType::Int:
          raw = static_cast<std::uint64_t>(signed_of(v, what));
          break;
        case ArgType::MemcpyKind: {
          if (v.is_string()) {
            raw = ~std::uint64_t(0);
            for (std::uint64_t k = 0; memcpy_kind_name(k); ++k)
              if (v.get_ref<const std::string&>() == memcpy_kind_name(k)) raw = k;
            if (raw == ~std::uint64_t(0)) bad(what + ": unknown cudaMemcpyKind");
          } else {
            raw = static_cast<std::uint32_t>(signed_of(v, what));
          }
          break;
        }
        case ArgType::Stream:
          raw = stream_of(v, what);
          break;
        case ArgType::Dim3: {
          const auto d = dim3_of(v, what);
          raw = d[0] | std::uint64_t(d[1]) << 32;
          rec.args[slot + 1] = d[2];
          break;
        }
        case ArgType::Dim3Split: {
          const auto d = dim3_of(v, what);
          for (int k = 0; k < 3; ++k) rec.args[slot + k] = d[k];
          break;
        }
        case ArgType::String:
          if (v.is_null()) {
            rec.flags |= CT_FLAG_PAYLOAD_FAULT;
          } else {
            const std::string& s = string_of(v, what);
            payload.assign(s.begin(), s.begin() + std::min<std::size_t>(s.size(), CT_MAX_PAYLOAD - 1));
            payload.push_back(0);
          }
          break;
        case ArgType::Enum:
          raw = header_enum_of(v, spec.enum_type, what);
          break;
        case ArgType::NcclDataType:
          raw = nccl_enum_of(v, nccl_datatype_name, what);
          break;
        case ArgType::NcclRedOp:  // user-defined ops are written "op#N"
          if (v.is_string() && v.get_ref<const std::string&>().rfind("op#", 0) == 0)
            raw = static_cast<std::uint32_t>(integer_text_of(v.get_ref<const std::string&>().substr(3), what));
          else
            raw = nccl_enum_of(v, nccl_redop_name, what);
          break;
        case ArgType::NcclUniqueId:
        case ArgType::NcclUniqueIdPtr:
          // The trace keeps the communicator id, not the 128 bytes: the record carries the id (nccl.h).
          if (v.is_null()) {
            rec.flags |= CT_FLAG_PAYLOAD_FAULT;
          } else {
            const std::string& id = string_of(v, what);
            if (id.size() != 16 || id.find_first_not_of("0123456789abcdef") != std::string::npos)
              bad(what + " is not a communicator id (16 hex digits)");
            std::uint64_t n = 0;
            std::from_chars(id.data(), id.data() + id.size(), n, 16);
            put_u64_payload(payload, n);
          }
          break;
        case ArgType::NcclCommArray:  // the first communicator (docs/json.md)
          if (v.is_null())
            rec.flags |= CT_FLAG_PAYLOAD_FAULT;
          else
            put_u64_payload(payload, hex_of(v, what));
          break;
        case ArgType::KernelNodeParams:  // the kernel, as the params' first word
          if (v.is_null()) {
            rec.flags |= CT_FLAG_PAYLOAD_FAULT;
          } else {
            kernel_handle_ = hex_of(v, what);
            put_u64_payload(payload, kernel_handle_);
          }
          break;
        case ArgType::Flags:
        case ArgType::Ptr:
        case ArgType::Event:
        case ArgType::Handle:
        case ArgType::Func:
          raw = hex_of(v, what);
          if (spec.type == ArgType::Func) kernel_handle_ = raw;
          break;
        case ArgType::LaunchConfig:  // the payload, read above
        case ArgType::OutPtr:        // out-parameters, read above
        case ArgType::OutSize:
        case ArgType::OutInt:
        case ArgType::OutFloat:
        case ArgType::OutStream:
        case ArgType::OutEvent:
        case ArgType::OutHandle:
        case ArgType::OutFunc:
        case ArgType::OutUInt:
        case ArgType::OutEnum:
        case ArgType::Float:   // never captured: skipped above
        case ArgType::Struct:
          break;
      }
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
    for (std::size_t i = 0; i < stack_.size(); ++i) put_u64(bytes + stack_at + 8 * i, stack_[i].addr);
    return true;
  } catch (const BadLine& e) {
    error = e.what;
  } catch (const Json::exception& e) {
    error = std::string("unexpected value: ") + e.what();
  }
  return false;
}

}  // namespace cudatrace
