#include "cudatrace/decode/decode.h"

#include <fmt/format.h>

#include <cstring>

#include "cudatrace/decode/arg_types.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/kernel_names.h"

namespace cudatrace {
namespace {

constexpr const char* kUnknownKernel = "?";

// An argument whose value is not known, built in place as ArgDecoding::put builds one.
void unavailable(Call& call, const ArgSpec& spec) {
  NamedValue& a = call.args.emplace_back();
  a.name = spec.name;
  a.type = spec.type;
}

}  // namespace

const char* memcpy_kind_name(std::uint64_t kind) {
  static const char* const kNames[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
                                       "cudaMemcpyDeviceToDevice", "cudaMemcpyDefault"};
  return kind < std::size(kNames) ? kNames[kind] : nullptr;
}

const NamedValue* arg_of_type(const Call& c, ArgType t, int nth) {
  for (const NamedValue& a : c.args)
    if (a.type == t && nth-- == 0) return &a;
  return nullptr;
}

std::optional<std::uint64_t> arg_value(const Call& c, ArgType t, int nth) {
  const NamedValue* a = arg_of_type(c, t, nth);
  return a ? integer_value(a->value) : std::nullopt;
}

const NamedValue* role_arg(const Call& c, Role r) {
  const RoleArg& a = c.api->roles[r];
  return a.present() ? arg_of_type(c, a.type, a.nth) : nullptr;
}

std::optional<std::uint64_t> role_value(const Call& c, Role r) {
  const NamedValue* a = role_arg(c, r);
  return a ? integer_value(a->value) : std::nullopt;
}

std::uint64_t role_bytes(const Call& c) {
  const std::uint64_t rows = c.api->roles[Role::Rows].present() ? role_value(c, Role::Rows).value_or(0) : 1;
  return role_value(c, Role::Bytes).value_or(0) * rows * c.api->roles.element_bytes;
}

std::optional<std::uint64_t> integer_value(const Value& v) {
  if (const auto* h = std::get_if<Hex>(&v)) return h->v;
  if (const auto* n = std::get_if<Named>(&v)) return static_cast<std::uint64_t>(n->raw);
  if (const auto* u = std::get_if<std::uint64_t>(&v)) return *u;
  if (const auto* i = std::get_if<std::int64_t>(&v)) return static_cast<std::uint64_t>(*i);
  return std::nullopt;
}

const char* special_stream_name(std::uint64_t handle) {
  switch (handle) {
    case 0:
      return "default";
    case 1:
      return "cudaStreamLegacy";
    case 2:
      return "cudaStreamPerThread";
    default:
      return nullptr;
  }
}

bool Call::failed() const {
  if (unfinished || api->spec->returns != Returns::Status) return false;
  // Not ready: a query's "not yet"; ncclInProgress: a nonblocking communicator is still working.
  return status() != 0 && status() != (api->layer() == Layer::Nccl ? CT_NCCL_IN_PROGRESS : CT_CUDA_NOT_READY);
}

bool Call::succeeded() const {
  return !unfinished && (api->spec->returns != Returns::Status || status() == 0);
}

const char* Call::ret_name() const {
  if (unfinished || api->spec->returns != Returns::Status) return nullptr;
  return cuda_error_name(api->layer(), status());
}

static_assert(sizeof(ct_span) == CT_SPAN_SIZE && CT_SPAN_HEADER == 28, "ct_span: the OTEP 4947 record header, padded");
static_assert(sizeof(ct_section) == 8, "ct_section: a section's bytes stay 8-byte aligned");

// Walks rec's sections; false when they are malformed. `found` gets the one of `kind`.
static bool walk_sections(const ct_call& rec, std::uint32_t kind, RecordSection& found) {
  const std::uint8_t* at = reinterpret_cast<const std::uint8_t*>(&rec + 1) + CT_ALIGN8(std::size_t(rec.payload_len));
  std::size_t left = rec.sections_len;
  std::uint32_t seen = 0;  // a bit per kind
  while (left) {
    ct_section h;
    if (left < sizeof h) return false;
    std::memcpy(&h, at, sizeof h);
    at += sizeof h;
    left -= sizeof h;
    if (h.kind == 0 || h.kind >= CT_SECTION_KINDS || (seen >> h.kind & 1) || h.len > left || h.len % 8) return false;
    seen |= 1u << h.kind;
    if (h.kind == kind) found = {at, h.len};
    at += h.len;
    left -= h.len;
  }
  return true;
}

RecordSection find_record_section(const ct_call& rec, std::uint32_t kind) {
  RecordSection found;
  return walk_sections(rec, kind, found) ? found : RecordSection{};
}

bool record_fits(const ct_call& rec, std::size_t room) {
  if (!rec.sections_len) return rec.payload_len <= room;  // sent without the payload's padding
  RecordSection none;
  return CT_ALIGN8(std::size_t(rec.payload_len)) + rec.sections_len <= room && walk_sections(rec, 0, none);
}

std::vector<std::uint64_t> record_stack(const ct_call& rec) {
  const RecordSection s = record_section(rec, CT_SECTION_STACK);
  std::vector<std::uint64_t> out(s.len / sizeof(std::uint64_t));
  if (!out.empty()) std::memcpy(out.data(), s.bytes, out.size() * sizeof(std::uint64_t));
  return out;
}

bool decode_call(const ct_call& rec, KernelNames* names, Call& call, const StringReader* read_string,
                 const FacetNames* facet_names) {
  const Api* api = api_by_id(rec.api);
  if (!api) return false;
  call.api = api;
  call.parent = rec.parent_api == kNoApi ? nullptr : api_by_id(rec.parent_api);
  call.pid = rec.pid;
  call.tid = rec.tid;
  call.ts_ns = rec.ts_ns;
  call.dur_ns = rec.dur_ns;
  call.ret = rec.ret;
  call.caller = rec.caller;
  call.depth = rec.depth;
  call.comm_ = std::string_view(rec.comm, strnlen(rec.comm, sizeof rec.comm));
  call.unfinished = rec.type == CT_REC_UNFINISHED;
  call.args.clear();
  call.kernel = {};
  call.kernel_mangled = {};
  call.kernel_short = {};
  call.kernel_handle = 0;
  call.waited = nullptr;
  call.nccl = nullptr;
  call.graph = nullptr;
  call.captured = false;

  call.payload = std::string_view(reinterpret_cast<const char*>(&rec + 1), rec.payload_len);
  call.payload_fault = rec.flags & CT_FLAG_PAYLOAD_FAULT;
  for (const Facet* f : call_facets()) f->decode(rec, facet_names, call);
  int out_no = 0;
  bool names_kernel = false;
  for (std::size_t i = 0; i < api->spec->args.size(); ++i) {
    const ArgSpec& spec = api->spec->args[i];
    const int slot = api->slots[i];
    if (slot == kNotCaptured) {  // in an xmm register, a struct by value, beyond the saved slots
      unavailable(call, spec);
      continue;
    }
    const ArgTypeFacts& facts = arg_facts(spec.type);
    std::uint64_t raw = rec.args[slot];
    if (facts.out_bytes) {
      const int o = out_no++;
      const bool fault = rec.flags & (o ? CT_FLAG_OUT1_FAULT : CT_FLAG_OUT0_FAULT);
      // Out-params are only meaningful once the call has returned successfully (or
      // ncclInProgress: a nonblocking NCCL communicator exists while it initialises).
      const std::int32_t code = static_cast<std::int32_t>(rec.ret);
      const bool written = code == 0 || (api->layer() == Layer::Nccl && code == CT_NCCL_IN_PROGRESS);
      if (call.unfinished || fault || (api->spec->returns == Returns::Status && !written)) {
        unavailable(call, spec);
        continue;
      }
      raw = rec.outs[o];
    }
    ArgDecoding d{rec, *api, spec, slot, raw, call.payload, read_string, call};
    facts.decode(d);
    names_kernel |= d.names_kernel;
  }
  if (names_kernel) {
    const KernelNames::Name* n = names ? names->find(rec.pid, call.kernel_handle) : nullptr;
    call.kernel = n ? std::string_view(n->demangled) : kUnknownKernel;
    call.kernel_mangled = n ? std::string_view(n->mangled) : kUnknownKernel;
    call.kernel_short = n ? std::string_view(n->short_name) : kUnknownKernel;
  }
  return true;
}

const char* nccl_datatype_name(std::uint64_t type) {
  static const char* const kNames[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",      "ncclUint32",
                                       "ncclInt64",   "ncclUint64",  "ncclFloat16",    "ncclFloat32",
                                       "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  return type < std::size(kNames) ? kNames[type] : nullptr;
}

std::size_t nccl_datatype_size(std::uint64_t type) {
  static const std::size_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return type < std::size(kSizes) ? kSizes[type] : 0;
}

const char* nccl_redop_name(std::uint64_t op) {
  static const char* const kNames[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
  return op < std::size(kNames) ? kNames[op] : nullptr;
}

std::optional<std::uint64_t> nccl_unique_id_hash(const std::uint8_t* payload, std::size_t len) {
  if (len == std::size_t(kNcclUniqueIdBytes)) return nccl_fnv1a(payload, len);
  if (len == 8) {
    std::uint64_t id;
    std::memcpy(&id, payload, sizeof id);
    return id;
  }
  return std::nullopt;
}

std::uint64_t nccl_fnv1a(const void* data, std::size_t len, std::uint64_t seed) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::uint64_t h = seed;
  for (std::size_t i = 0; i < len; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string nccl_id_text(std::uint64_t id) { return fmt::format("{:016x}", id); }

}  // namespace cudatrace
