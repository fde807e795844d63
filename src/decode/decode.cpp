#include "cudatrace/decode/decode.h"

#include <fmt/format.h>

#include <cstring>

#include "cudatrace/decode/kernel_names.h"

namespace cudatrace {
namespace {

constexpr const char* kUnknownKernel = "?";

std::uint64_t read_u64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
std::uint32_t read_u32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

Value stream_value(std::uint64_t handle) {
  if (const char* name = special_stream_name(handle)) return Named{name, static_cast<std::int64_t>(handle)};
  return Hex{handle};
}

// Expands a CUlaunchConfig / cudaLaunchConfig_t payload into named values.
// Layouts (both 56 bytes): runtime {dim3 grid; dim3 block; size_t smem; stream; attrs; n}
// driver {u32 gx,gy,gz,bx,by,bz,smem; pad; stream; attrs; n}.
void decode_launch_config(Layer layer, const std::uint8_t* p, std::size_t len,
                          std::vector<NamedValue>& out) {
  if (len < CT_LAUNCH_CONFIG_SIZE) {
    out.push_back({"config", std::monostate{}, ArgType::LaunchConfig});
    return;
  }
  const Dim3 grid{read_u32(p), read_u32(p + 4), read_u32(p + 8)};
  const Dim3 block{read_u32(p + 12), read_u32(p + 16), read_u32(p + 20)};
  const std::uint64_t smem = layer == Layer::Runtime ? read_u64(p + 24) : read_u32(p + 24);
  out.push_back({"grid", grid, ArgType::Dim3});
  out.push_back({"block", block, ArgType::Dim3});
  out.push_back({layer == Layer::Runtime ? "sharedMem" : "sharedMemBytes", smem, ArgType::Size});
  out.push_back({layer == Layer::Runtime ? "stream" : "hStream", stream_value(read_u64(p + 32)), ArgType::Stream});
  // Attributes: {u32 id; pad; 64-byte value}. Cluster dimension is id 4 in both APIs.
  constexpr std::uint32_t kClusterDimension = 4;
  const std::size_t nattrs = (len - CT_LAUNCH_CONFIG_SIZE) / CT_LAUNCH_ATTR_SIZE;
  for (std::size_t i = 0; i < nattrs; ++i) {
    const std::uint8_t* a = p + CT_LAUNCH_CONFIG_SIZE + i * CT_LAUNCH_ATTR_SIZE;
    if (read_u32(a) == kClusterDimension)
      out.push_back({"clusterDim", Dim3{read_u32(a + 8), read_u32(a + 12), read_u32(a + 16)}, ArgType::Dim3});
  }
}

// An enum argument (its 32 bits) by the name the toolkit's header gives its value.
Value enum_value(const ArgSpec& spec, std::uint64_t raw) {
  const auto v = static_cast<std::int32_t>(raw);
  return Named{spec.enum_type ? enum_value_name(*spec.enum_type, v) : nullptr, v};
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

std::vector<std::uint64_t> record_stack(const ct_call& rec) {
  std::vector<std::uint64_t> out(rec.stack_len);
  const auto* base = reinterpret_cast<const std::uint8_t*>(&rec + 1) + CT_ALIGN8(rec.payload_len);
  if (!out.empty()) std::memcpy(out.data(), base, out.size() * sizeof(std::uint64_t));
  return out;
}

bool decode_call(const ct_call& rec, KernelNames* names, Call& call, const StringReader* read_string) {
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

  const auto* payload = reinterpret_cast<const std::uint8_t*>(&rec + 1);
  const std::size_t payload_len = rec.payload_len;
  call.payload = std::string_view(reinterpret_cast<const char*>(payload), payload_len);
  call.payload_fault = rec.flags & CT_FLAG_PAYLOAD_FAULT;
  call.stack_addresses = record_stack(rec);
  int out_no = 0;
  bool is_launch = false;
  bool kernel_node = false;  // names the kernel of a graph kernel node
  for (std::size_t i = 0; i < api->spec->args.size(); ++i) {
    const ArgSpec& spec = api->spec->args[i];
    const int slot = api->slots[i];
    if (slot == kNotCaptured) {  // in an xmm register, a struct by value, beyond the saved slots
      call.args.push_back({spec.name, std::monostate{}, spec.type});
      continue;
    }
    const std::uint64_t raw = rec.args[slot];
    const std::size_t first_value = call.args.size();
    if (is_out(spec.type)) {
      const int o = out_no++;
      const bool fault = rec.flags & (o ? CT_FLAG_OUT1_FAULT : CT_FLAG_OUT0_FAULT);
      // Out-params are only meaningful once the call has returned successfully (or
      // ncclInProgress: a nonblocking NCCL communicator exists while it initialises).
      const std::int32_t code = static_cast<std::int32_t>(rec.ret);
      const bool written = code == 0 || (api->layer() == Layer::Nccl && code == CT_NCCL_IN_PROGRESS);
      if (call.unfinished || fault || (api->spec->returns == Returns::Status && !written)) {
        call.args.push_back({spec.name, std::monostate{}, spec.type});
        continue;
      }
      const std::uint64_t v = rec.outs[o];
      switch (spec.type) {
        case ArgType::OutSize:
          call.args.push_back({spec.name, v});
          break;
        case ArgType::OutInt:
          call.args.push_back({spec.name, std::int64_t(static_cast<std::int32_t>(v))});
          break;
        case ArgType::OutUInt:
          call.args.push_back({spec.name, std::uint64_t(static_cast<std::uint32_t>(v))});
          break;
        case ArgType::OutEnum:
          call.args.push_back({spec.name, enum_value(spec, v)});
          break;
        case ArgType::OutFloat: {
          float f;
          const std::uint32_t bits = static_cast<std::uint32_t>(v);
          std::memcpy(&f, &bits, sizeof f);
          call.args.push_back({spec.name, double(f)});
          break;
        }
        default:
          call.args.push_back({spec.name, Hex{v}});
      }
      call.args.back().type = spec.type;
      continue;
    }
    switch (spec.type) {
      case ArgType::Size:
        call.args.push_back({spec.name, raw});
        break;
      case ArgType::UInt:
        call.args.push_back({spec.name, std::uint64_t(static_cast<std::uint32_t>(raw))});
        break;
      case ArgType::Int:
        call.args.push_back({spec.name, std::int64_t(static_cast<std::int32_t>(raw))});
        break;
      case ArgType::Flags:
        call.args.push_back({spec.name, Hex{static_cast<std::uint32_t>(raw)}});
        break;
      case ArgType::MemcpyKind:
        call.args.push_back(
            {spec.name, Named{memcpy_kind_name(static_cast<std::uint32_t>(raw)), static_cast<std::int32_t>(raw)}});
        break;
      case ArgType::Enum:
        call.args.push_back({spec.name, enum_value(spec, raw)});
        break;
      case ArgType::Stream:
        call.args.push_back({spec.name, stream_value(raw)});
        break;
      case ArgType::Func:
        is_launch = api->group() == Group::Launch;
        call.kernel_handle = raw;
        call.args.push_back({spec.name, Hex{raw}});
        break;
      case ArgType::Dim3:
        call.args.push_back({spec.name, Dim3{static_cast<std::uint32_t>(raw), static_cast<std::uint32_t>(raw >> 32),
                                             static_cast<std::uint32_t>(rec.args[slot + 1])}});
        break;
      case ArgType::Dim3Split:
        call.args.push_back({spec.name, Dim3{static_cast<std::uint32_t>(raw), static_cast<std::uint32_t>(rec.args[slot + 1]),
                                             static_cast<std::uint32_t>(rec.args[slot + 2])}});
        break;
      case ArgType::String:
        if (rec.flags & CT_FLAG_PAYLOAD_FAULT || payload_len == 0) {
          // Typically a string in a page the process has not touched yet.
          if (raw && read_string && (*read_string)(rec.pid, raw, call.string_storage))
            call.args.push_back({spec.name, std::string_view(call.string_storage)});
          else
            call.args.push_back({spec.name, std::monostate{}});
        } else {
          const char* s = reinterpret_cast<const char*>(payload);
          call.args.push_back({spec.name, std::string_view(s, strnlen(s, payload_len))});
        }
        break;
      case ArgType::LaunchConfig:
        // A fault reading the attributes still leaves the config itself (payload_len says what arrived).
        decode_launch_config(api->layer(), payload, payload_len, call.args);
        break;
      case ArgType::NcclDataType:
        call.args.push_back({spec.name, Named{nccl_datatype_name(raw & 0xffffffff), static_cast<std::int32_t>(raw)}});
        break;
      case ArgType::NcclRedOp:
        if (const char* name = nccl_redop_name(raw & 0xffffffff)) {
          call.args.push_back({spec.name, Named{name, static_cast<std::int32_t>(raw)}});
        } else {
          call.string_storage = "op#" + std::to_string(static_cast<std::int32_t>(raw));
          call.args.push_back({spec.name, std::string_view(call.string_storage)});
        }
        break;
      case ArgType::NcclUniqueId:
      case ArgType::NcclUniqueIdPtr: {
        // Shown as the communicator id it hashes to (nccl.h); one read through a pointer
        // only once the call succeeded (ncclGetUniqueId's is an out-param).
        const bool written = spec.type == ArgType::NcclUniqueId || (!call.unfinished && !call.failed());
        const auto id = nccl_unique_id_hash(payload, payload_len);
        if (!written || rec.flags & CT_FLAG_PAYLOAD_FAULT || !id) {
          call.args.push_back({spec.name, std::monostate{}});
        } else {
          call.string_storage = nccl_id_text(*id);
          call.args.push_back({spec.name, std::string_view(call.string_storage)});
        }
        break;
      }
      case ArgType::NcclCommArray: {
        // The first communicator; the model (nccl.cpp) reads the others from the payload.
        const bool ok = !call.unfinished && rec.ret == 0 && !(rec.flags & CT_FLAG_PAYLOAD_FAULT) && payload_len >= 8;
        if (ok)
          call.args.push_back({spec.name, Hex{read_u64(payload)}});
        else
          call.args.push_back({spec.name, std::monostate{}});
        break;
      }
      case ArgType::KernelNodeParams: {
        // The kernel the node runs: func, or the driver v2 struct's kern when func is null.
        const bool read = !(rec.flags & CT_FLAG_PAYLOAD_FAULT) && payload_len >= 8;
        std::uint64_t kernel = read ? read_u64(payload) : 0;
        if (read && !kernel && payload_len >= kKernelNodeKernOffset + 8) kernel = read_u64(payload + kKernelNodeKernOffset);
        if (kernel) {
          kernel_node = true;
          call.kernel_handle = kernel;
          call.args.push_back({spec.name, Hex{kernel}});
        } else {
          call.args.push_back({spec.name, std::monostate{}});
        }
        break;
      }
      default:  // Ptr, Event, Handle
        call.args.push_back({spec.name, Hex{raw}});
    }
    // A launch config's expansion carries its own types.
    if (spec.type != ArgType::LaunchConfig)
      for (std::size_t k = first_value; k < call.args.size(); ++k) call.args[k].type = spec.type;
  }
  if (is_launch || kernel_node) {
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
