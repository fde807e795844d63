// One line of a --json trace rebuilt into the ring-buffer record it was
// written from, with its facets beside it (record/trace_line.h).
#include "cudatrace/record/trace_line.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <optional>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/decode/arg_types.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/json_fields.h"

namespace cudatrace {
namespace {

using Json = nlohmann::json;
using namespace json_fields;
using namespace facet_json;  // the field readers the facets use too; each throws FacetJsonError

// What makes a line not a trace line; caught in TraceLine::parse.
[[noreturn]] void bad(std::string what) { throw FacetJsonError{std::move(what)}; }

std::int64_t signed_of(const Json& v, const std::string& what) {
  if (v.is_number_unsigned()) return static_cast<std::int64_t>(v.get<std::uint64_t>());
  if (!v.is_number_integer()) bad(what + " is not an integer");
  return v.get<std::int64_t>();
}

// lost_detail.ring_buffer_calls: the lost calls of each API, counted and
// timed in BPF (json_writer.cpp).
std::map<std::uint16_t, ct_api_stats> lost_calls(const Json& by_api) {
  const std::string where = "lost_detail." + std::string(kRingBufferCalls.name());
  if (!by_api.is_object()) bad(where + " is not an object");
  std::map<std::uint16_t, ct_api_stats> out;
  for (const auto& [symbol, value] : by_api.items()) {
    const Json& v = value;  // a lambda below uses it: a structured binding cannot be captured before C++20
    const Api* api = api_by_symbol(symbol);
    const std::string what = where + "." + symbol;
    if (!api) bad(what + ": not an API cudatrace traces");
    if (!v.is_object()) bad(what + " is not an object");
    ct_api_stats& st = out[api->id];
    const auto number = [&](const auto& f) { return unsigned_of(field(v, f.name()), what + "." + std::string(f.name())); };
    st.calls = number(kCalls);
    st.errors = number(kErrors);
    st.total_ns = number(kTotalNs);
    st.min_ns = number(kMinNs);
    st.max_ns = number(kMaxNs);
    st.sum_sq_hi = number(kSumSqHi);
    st.sum_sq_lo = number(kSumSqLo);
    const Json& hist = field(v, kHist.name());
    const std::string hist_what = what + "." + std::string(kHist.name());
    if (!hist.is_array()) bad(hist_what + " is not an array");
    std::uint64_t in_hist = 0;
    for (const Json& bucket : hist) {
      if (!bucket.is_array() || bucket.size() != 2) bad(hist_what + " holds something other than [bucket, calls]");
      const std::uint64_t b = unsigned_of(bucket[0], hist_what + " bucket"), n = unsigned_of(bucket[1], hist_what);
      if (b >= CT_HIST_BUCKETS) bad(hist_what + ": no bucket " + std::to_string(b));
      st.hist[b] += n;
      in_hist += n;
    }
    if (in_hist != st.calls || st.errors > st.calls || st.min_ns > st.max_ns)
      bad(what + " does not add up (its histogram, errors or min and max disagree with its calls)");
  }
  return out;
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

std::optional<std::uint64_t> optional_hex(const Json& obj, std::string_view key, const std::string& what) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  return hex_of(*it, what);
}

}  // namespace

bool TraceLine::parse(std::string_view line, std::string& error, FacetLines* lines) {
  FacetLines alone;
  FacetLines& facet_lines = lines ? *lines : alone;
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
    const std::string& type = string_of(field(j, kType.name()), quoted(kType.name()));
    if (type == kCall || type == kUnfinished) {
      type_ = Type::Call;
    } else if (type == kWarning) {
      type_ = Type::Warning;
    } else if (type == kEnd) {
      type_ = Type::End;
      const Json& detail = field(j, kLostDetail.name());
      const auto count = [](const Json& obj, std::string_view name, const std::string& what) {
        return unsigned_of(field(obj, name), what);
      };
      const auto lost = [&](std::string_view name) {
        return count(detail, name, std::string(kLostDetail.name()) + "." + std::string(name));
      };
      end_ = LossCounts{};
      // "lost" is the sum of the details, but a line that says nonsense is no end line.
      end_calls_ = count(j, kCalls.name(), quoted(kCalls.name()));
      count(j, kLost.name(), quoted(kLost.name()));
      end_unfinished_ = count(j, kUnfinishedCalls.name(), quoted(kUnfinishedCalls.name()));
      if (detail.contains(kOutput.name())) end_.output = lost(kOutput.name());
      end_.ring_buffer = lost(kRingBuffer.name());
      end_.thread_table = lost(kThreadTable.name());
      end_.depth_overflow = lost(kDepthOverflow.name());
      end_.control = lost(kControl.name());
      end_.unmatched = count(j, kUnmatched.name(), quoted(kUnmatched.name()));
      if (const auto calls = detail.find(kRingBufferCalls.name()); calls != detail.end())
        end_.ring_buffer_calls = lost_calls(*calls);
      return true;
    } else if (type == kSummary) {
      bad("a --summary report, not a trace of calls (record the trace with --json alone)");
    } else {
      for (const Facet* f : call_facets())
        if (f->line_type() == type) {
          type_ = Type::FacetLine;
          f->read_line(j, facet_lines);
          return true;
        }
      bad("unknown record type \"" + type + "\"");
    }

    const std::string& api_name = string_of(field(j, kApi.name()), quoted(kApi.name()));
    const Api* api = api_by_symbol(api_name);
    if (!api) bad("unknown API \"" + api_name + "\" (a trace from another cudatrace version?)");
    if (const auto it = j.find(kLayer.name());
        it != j.end() && string_of(*it, quoted(kLayer.name())) != layer_name(api->layer()))
      bad(quoted(kLayer.name()) + " is \"" + it->get<std::string>() + "\", but " + api_name + " is of the " +
          layer_name(api->layer()) + " layer");
    if (type_ == Type::Warning) {
      string_of(field(j, kKind.name()), quoted(kKind.name()));
      if (const auto it = j.find(kHostPtr.name()); it != j.end()) hex_of(*it, quoted(kHostPtr.name()));
      string_of(field(j, kMessage.name()), quoted(kMessage.name()));
      const std::uint64_t pid = unsigned_of(field(j, kPid.name()), quoted(kPid.name()));
      if (pid > 0xffffffffu) bad("pid out of range");
      warning_.pid = static_cast<std::uint32_t>(pid);
      warning_.caller = hex_of(field(j, kCaller.name()), quoted(kCaller.name()));
      warning_.location = string_of(field(j, kLocation.name()), quoted(kLocation.name()));
      const auto code = j.find(kGpuCode.name());
      warning_.gpu_code = code != j.end() ? string_of(*code, quoted(kGpuCode.name())) : std::string();
      return true;
    }

    ct_call rec{};
    rec.type = type == kCall ? CT_REC_CALL : CT_REC_UNFINISHED;
    rec.api = api->id;
    rec.parent_api = kNoApi;
    if (const auto it = j.find(kParentApi.name()); it != j.end()) {
      const Api* parent = api_by_symbol(string_of(*it, quoted(kParentApi.name())));
      if (!parent) bad("unknown API \"" + it->get<std::string>() + "\" in " + quoted(kParentApi.name()));
      rec.parent_api = parent->id;
    }
    const std::uint64_t pid = unsigned_of(field(j, kPid.name()), quoted(kPid.name())),
                        tid = unsigned_of(field(j, kTid.name()), quoted(kTid.name()));
    if (pid > 0xffffffffu || tid > 0xffffffffu) bad("pid or tid out of range");
    rec.pid = static_cast<std::uint32_t>(pid);
    rec.tid = static_cast<std::uint32_t>(tid);
    rec.ts_ns = unsigned_of(field(j, kTsNs.name()), quoted(kTsNs.name()));
    const std::uint64_t depth = unsigned_of(field(j, kDepth.name()), quoted(kDepth.name()));
    if (depth >= CT_MAX_DEPTH) bad(quoted(kDepth.name()) + " out of range");
    rec.depth = static_cast<std::uint8_t>(depth);
    const std::string& comm = string_of(field(j, kComm.name()), quoted(kComm.name()));
    // U+FFFD for each byte that was not UTF-8 can make it longer than the
    // kernel's 15 bytes: cut between characters, not inside one.
    std::size_t comm_len = std::min(comm.size(), sizeof rec.comm - 1);
    while (comm_len < comm.size() && comm_len > 0 && (static_cast<unsigned char>(comm[comm_len]) & 0xc0) == 0x80)
      --comm_len;
    std::memcpy(rec.comm, comm.data(), comm_len);
    rec.caller = optional_hex(j, kCaller.name(), quoted(kCaller.name())).value_or(0);
    const bool unfinished = rec.type == CT_REC_UNFINISHED;
    // Written by cudatrace 0.2, which recorded asynchronous operations at
    // entry: their status is unknown, and a report would count them as
    // successes.
    if (j.find(kEntryOnly.name()) != j.end())
      bad("a call recorded at entry only, with no status (a trace from cudatrace 0.2): record it again");
    if (!unfinished) {
      rec.dur_ns = unsigned_of(field(j, kDurNs.name()), quoted(kDurNs.name()));
      if (api->spec->returns == Returns::Status) rec.ret = signed_of(field(j, kRet.name()), quoted(kRet.name()));
    }

    const Json& args_json = field(j, kArgs.name());
    if (!args_json.is_object()) bad(quoted(kArgs.name()) + " is not an object");
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
    kernel_mangled_ = optional_string(j, kKernelMangled.name(), quoted(kKernelMangled.name()));
    if (kernel_mangled_ == "?") kernel_mangled_.clear();

    // The call's facets (decode/facet.h), each read by its own code.
    const FacetReading reading{rec.pid, facet_lines};
    for (const Facet* f : call_facets()) f->read_json(j, reading, facets_);
    rec.payload_len = static_cast<std::uint16_t>(payload.size());
    buf_.assign((sizeof(ct_call) + payload.size() + 7) / 8, 0);
    auto* bytes = reinterpret_cast<std::uint8_t*>(buf_.data());
    std::memcpy(bytes, &rec, sizeof rec);
    if (!payload.empty()) std::memcpy(bytes + sizeof(ct_call), payload.data(), payload.size());
    return true;
  } catch (const FacetJsonError& e) {
    error = e.what;
  } catch (const Json::exception& e) {
    error = std::string("unexpected value: ") + e.what();
  }
  return false;
}

}  // namespace cudatrace
