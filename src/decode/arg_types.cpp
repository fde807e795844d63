// The table of argument types (arg_types.h): for each ArgType, how it is
// passed and captured, decoded, and read back from a --json trace.
#include "cudatrace/decode/arg_types.h"

#include <charconv>
#include <cstring>
#include <iterator>


namespace cudatrace {
namespace {

using A = ArgType;

std::uint64_t read_u64(const char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
std::uint32_t read_u32(const char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void put_u32(std::uint8_t* p, std::uint32_t v) { std::memcpy(p, &v, sizeof v); }
void put_u64(std::uint8_t* p, std::uint64_t v) { std::memcpy(p, &v, sizeof v); }

// ---- Reading a value back from the form the JSON writer gave it -------------

bool unsigned_value(const Value* v, std::uint64_t& out) {
  if (const auto* u = v ? std::get_if<std::uint64_t>(v) : nullptr) {
    out = *u;
    return true;
  }
  const auto* i = v ? std::get_if<std::int64_t>(v) : nullptr;
  if (!i || *i < 0) return false;
  out = static_cast<std::uint64_t>(*i);
  return true;
}

bool signed_value(const Value* v, std::int64_t& out) {
  if (const auto* u = v ? std::get_if<std::uint64_t>(v) : nullptr) {
    out = static_cast<std::int64_t>(*u);
    return true;
  }
  const auto* i = v ? std::get_if<std::int64_t>(v) : nullptr;
  if (i) out = *i;
  return i;
}

const std::string_view* text(const Value* v) { return v ? std::get_if<std::string_view>(v) : nullptr; }
bool is_null(const Value* v) { return v && std::holds_alternative<std::monostate>(*v); }

bool hex_value(const Value* v, std::uint64_t& out) {
  const std::string_view* s = text(v);
  const auto n = s ? hex_text_value(*s) : std::nullopt;
  if (n) out = *n;
  return n.has_value();
}

bool read_hex(ArgReading& r, std::uint64_t& out) {
  const Value* v;
  if (!r.field(v)) return false;
  return hex_value(v, out) || r.fail(" is not a hex string \"0x...\"");
}

// A value named by `name_of` (memcpy_kind_name, an enum's names, ...): its name, or the integer of an unnamed value.
template <typename NameOf>
bool read_named(ArgReading& r, NameOf name_of, std::string_view unknown) {
  const Value* v;
  if (!r.field(v)) return false;
  if (const std::string_view* name = text(v)) {
    if (const auto value = name_of(*name)) {
      r.word = static_cast<std::uint32_t>(*value);
      return true;
    }
    return r.fail(std::string(unknown.empty() ? ": unknown name \"" + std::string(*name) + "\"" : unknown));
  }
  std::int64_t n;
  if (!signed_value(v, n)) return r.fail(" is not an integer");
  r.word = static_cast<std::uint32_t>(n);
  return true;
}

// The value of the name `table_name(k)` gives, for k counting from 0 while it gives one.
std::optional<std::int64_t> index_named(const char* (*table_name)(std::uint64_t), std::string_view name) {
  for (std::uint64_t k = 0; table_name(k); ++k)
    if (name == table_name(k)) return static_cast<std::int64_t>(k);
  return std::nullopt;
}

// A payload a null value says could not be read (CT_FLAG_PAYLOAD_FAULT), else `fill`'s.
template <typename Fill>
bool read_payload(ArgReading& r, Fill fill) {
  const Value* v;
  if (!r.field(v)) return false;
  if (is_null(v)) {
    r.rec.flags |= CT_FLAG_PAYLOAD_FAULT;
    return true;
  }
  return fill(v);
}

void payload_u64(ArgReading& r, std::uint64_t v) {
  r.payload.assign(8, 0);
  put_u64(r.payload.data(), v);
}

// ---- Decoding and reading back, type by type --------------------------------

void as_unsigned(ArgDecoding& d) { d.put(d.raw); }
bool read_unsigned(ArgReading& r) {
  const Value* v;
  if (!r.field(v)) return false;
  return unsigned_value(v, r.word) || r.fail(" is not a non-negative integer");
}

void as_u32(ArgDecoding& d) { d.put(std::uint64_t(static_cast<std::uint32_t>(d.raw))); }

void as_i32(ArgDecoding& d) { d.put(std::int64_t(static_cast<std::int32_t>(d.raw))); }
bool read_signed(ArgReading& r) {  // an input: the register's 64 bits
  const Value* v;
  std::int64_t n;
  if (!r.field(v)) return false;
  if (!signed_value(v, n)) return r.fail(" is not an integer");
  r.word = static_cast<std::uint64_t>(n);
  return true;
}
bool read_signed32(ArgReading& r) {  // an out-parameter: the 4 bytes read
  if (!read_signed(r)) return false;
  r.word = static_cast<std::uint32_t>(r.word);
  return true;
}

void as_hex(ArgDecoding& d) { d.put(Hex{d.raw}); }
void as_hex32(ArgDecoding& d) { d.put(Hex{static_cast<std::uint32_t>(d.raw)}); }
bool read_hex(ArgReading& r) { return read_hex(r, r.word); }

void as_memcpy_kind(ArgDecoding& d) {
  d.put(Named{memcpy_kind_name(static_cast<std::uint32_t>(d.raw)), static_cast<std::int32_t>(d.raw)});
}
bool read_memcpy_kind(ArgReading& r) {
  return read_named(r, [](std::string_view name) { return index_named(memcpy_kind_name, name); },
                    ": unknown cudaMemcpyKind");
}

// An enum argument (its 32 bits) by the name the toolkit's header gives its value.
void as_enum(ArgDecoding& d) {
  const auto v = static_cast<std::int32_t>(d.raw);
  d.put(Named{d.spec.enum_type ? enum_value_name(*d.spec.enum_type, v) : nullptr, v});
}
bool read_enum(ArgReading& r) {
  const EnumType* e = r.spec.enum_type;
  return read_named(r, [e](std::string_view name) -> std::optional<std::int64_t> {
    for (std::size_t k = 0; e && k < e->count; ++k)
      if (name == e->values[k].name) return e->values[k].value;
    return std::nullopt;
  }, {});
}

Value stream_value(std::uint64_t handle) {
  if (const char* name = special_stream_name(handle)) return Named{name, static_cast<std::int64_t>(handle)};
  return Hex{handle};
}
void as_stream(ArgDecoding& d) { d.put(stream_value(d.raw)); }
// A handle, or one of special_stream_name()'s names.
bool read_stream(ArgReading& r, std::string_view name, std::uint64_t& out) {
  const Value* v;
  if (!r.field(v, name)) return false;
  if (const std::string_view* s = text(v))
    for (std::uint64_t h = 0; h < 3; ++h)
      if (*s == special_stream_name(h)) {
        out = h;
        return true;
      }
  return hex_value(v, out);
}
bool read_stream(ArgReading& r) {
  return read_stream(r, {}, r.word) || (r.error.empty() && r.fail(" is not a hex string \"0x...\""));
}

// A kernel: a host stub, cudaKernel_t, CUfunction or CUkernel. A launch's is named.
void as_kernel(ArgDecoding& d) {
  d.names_kernel |= d.api.group() == Group::Launch;
  d.call.kernel_handle = d.raw;
  d.put(Hex{d.raw});
}
bool read_kernel(ArgReading& r) {
  if (!read_hex(r, r.word)) return false;
  r.kernel_handle = r.word;
  return true;
}

bool dim3_value(ArgReading& r, std::string_view name, std::string_view what, Dim3& out) {
  const Value* v;
  if (!r.field(v, name)) return false;
  if (const Dim3* d = v ? std::get_if<Dim3>(v) : nullptr) {
    out = *d;
    return true;
  }
  r.error = std::string(what) + " is not [x,y,z]";
  return false;
}
bool dim3_value(ArgReading& r, Dim3& out) {
  return dim3_value(r, r.spec.name, r.api.symbol + " argument " + r.spec.name, out);
}

// dim3 by value: x | y << 32 in the first slot, z in the second.
void as_dim3(ArgDecoding& d) {
  d.put(Dim3{static_cast<std::uint32_t>(d.raw), static_cast<std::uint32_t>(d.raw >> 32),
             static_cast<std::uint32_t>(d.rec.args[d.slot + 1])});
}
bool read_dim3(ArgReading& r) {
  Dim3 d;
  if (!dim3_value(r, d)) return false;
  r.word = d.x | std::uint64_t(d.y) << 32;
  r.rec.args[r.slot + 1] = d.z;
  return true;
}

// Three unsigned arguments x, y, z (the driver's launches).
void as_dim3_split(ArgDecoding& d) {
  d.put(Dim3{static_cast<std::uint32_t>(d.raw), static_cast<std::uint32_t>(d.rec.args[d.slot + 1]),
             static_cast<std::uint32_t>(d.rec.args[d.slot + 2])});
}
bool read_dim3_split(ArgReading& r) {
  Dim3 d;
  if (!dim3_value(r, d)) return false;
  r.word = d.x;
  r.rec.args[r.slot + 1] = d.y;
  r.rec.args[r.slot + 2] = d.z;
  return true;
}

void as_string(ArgDecoding& d) {
  if (d.payload_fault() || d.payload.empty()) {
    // Typically a string in a page the process has not touched yet.
    if (d.raw && d.read_string && (*d.read_string)(d.rec.pid, d.raw, d.call.string_storage))
      d.put(std::string_view(d.call.string_storage));
    else
      d.put(std::monostate{});
  } else {
    d.put(d.payload.substr(0, strnlen(d.payload.data(), d.payload.size())));
  }
}
bool read_string(ArgReading& r) {
  return read_payload(r, [&r](const Value* v) {
    const std::string_view* s = text(v);
    if (!s) return r.fail(" is not a string");
    const std::string_view kept = s->substr(0, CT_MAX_PAYLOAD - 1);
    r.payload.assign(kept.begin(), kept.end());
    r.payload.push_back(0);
    return true;
  });
}

// CUlaunchConfig / cudaLaunchConfig_t, expanded into the values below. Layouts
// (both 56 bytes): runtime {dim3 grid; dim3 block; size_t smem; stream; attrs; n},
// driver {u32 gx,gy,gz,bx,by,bz,smem; pad; stream; attrs; n}; attributes
// {u32 id; pad; 64-byte value}, cluster dimension being id 4 in both APIs.
constexpr std::string_view kConfig = "config", kGrid = "grid", kBlock = "block", kClusterDim = "clusterDim";
constexpr std::uint32_t kClusterDimension = 4;
std::string_view shared_mem_name(Layer l) { return l == Layer::Runtime ? "sharedMem" : "sharedMemBytes"; }
std::string_view stream_name(Layer l) { return l == Layer::Runtime ? "stream" : "hStream"; }

void as_launch_config(ArgDecoding& d) {
  // A fault reading the attributes still leaves the config itself (the payload's length says what arrived).
  const std::string_view p = d.payload;
  if (p.size() < CT_LAUNCH_CONFIG_SIZE) {
    d.put(kConfig, std::monostate{}, A::LaunchConfig);
    return;
  }
  const Layer layer = d.api.layer();
  d.put(kGrid, Dim3{read_u32(&p[0]), read_u32(&p[4]), read_u32(&p[8])}, A::Dim3);
  d.put(kBlock, Dim3{read_u32(&p[12]), read_u32(&p[16]), read_u32(&p[20])}, A::Dim3);
  d.put(shared_mem_name(layer), layer == Layer::Runtime ? read_u64(&p[24]) : read_u32(&p[24]), A::Size);
  d.put(stream_name(layer), stream_value(read_u64(&p[32])), A::Stream);
  for (std::size_t at = CT_LAUNCH_CONFIG_SIZE; at + CT_LAUNCH_ATTR_SIZE <= p.size(); at += CT_LAUNCH_ATTR_SIZE)
    if (read_u32(&p[at]) == kClusterDimension)
      d.put(kClusterDim, Dim3{read_u32(&p[at + 8]), read_u32(&p[at + 12]), read_u32(&p[at + 16])}, A::Dim3);
}
bool read_launch_config(ArgReading& r) {
  for (const auto& [name, value] : r.args)
    if (name == kConfig) return true;  // the config could not be read at the time: no payload
  const Layer layer = r.api.layer();
  const std::string api = r.api.symbol;
  Dim3 grid, block;
  std::uint64_t smem, stream;
  const Value* v;
  if (!dim3_value(r, kGrid, api + " grid", grid) || !dim3_value(r, kBlock, api + " block", block) ||
      !r.field(v, shared_mem_name(layer)))
    return false;
  if (!unsigned_value(v, smem)) {
    r.error = api + " shared memory is not a non-negative integer";
    return false;
  }
  if (!read_stream(r, stream_name(layer), stream)) {
    if (r.error.empty()) r.error = api + " stream is not a hex string \"0x...\"";
    return false;
  }
  std::vector<std::uint8_t>& p = r.payload;
  p.assign(CT_LAUNCH_CONFIG_SIZE, 0);
  const std::uint32_t dims[6] = {grid.x, grid.y, grid.z, block.x, block.y, block.z};
  for (int i = 0; i < 6; ++i) put_u32(&p[4 * i], dims[i]);
  if (layer == Layer::Runtime)
    put_u64(&p[24], smem);
  else
    put_u32(&p[24], static_cast<std::uint32_t>(smem));
  put_u64(&p[32], stream);
  for (const auto& [name, value] : r.args) {
    if (name != kClusterDim) continue;
    Dim3 cluster;
    if (!dim3_value(r, kClusterDim, api + " clusterDim", cluster)) return false;
    const std::size_t at = p.size();
    p.resize(at + CT_LAUNCH_ATTR_SIZE, 0);
    put_u32(&p[at], kClusterDimension);
    put_u32(&p[at + 8], cluster.x);
    put_u32(&p[at + 12], cluster.y);
    put_u32(&p[at + 16], cluster.z);
  }
  return true;
}

void as_nccl_datatype(ArgDecoding& d) {
  d.put(Named{nccl_datatype_name(d.raw & 0xffffffff), static_cast<std::int32_t>(d.raw)});
}
bool read_nccl_datatype(ArgReading& r) {
  return read_named(r, [](std::string_view name) { return index_named(nccl_datatype_name, name); }, {});
}

// Built-in reduction ops by name; user ops (ncclRedOpCreatePreMulSum) as op#N.
constexpr std::string_view kUserOp = "op#";
void as_nccl_redop(ArgDecoding& d) {
  if (const char* name = nccl_redop_name(d.raw & 0xffffffff)) {
    d.put(Named{name, static_cast<std::int32_t>(d.raw)});
  } else {
    d.call.string_storage = std::string(kUserOp) + std::to_string(static_cast<std::int32_t>(d.raw));
    d.put(std::string_view(d.call.string_storage));
  }
}
bool read_nccl_redop(ArgReading& r) {
  const Value* v;
  if (!r.field(v)) return false;
  const std::string_view* s = text(v);
  if (!s || s->substr(0, kUserOp.size()) != kUserOp)
    return read_named(r, [](std::string_view name) { return index_named(nccl_redop_name, name); }, {});
  std::int32_t op = 0;
  const auto [end, ec] = std::from_chars(s->data() + kUserOp.size(), s->data() + s->size(), op);
  if (ec != std::errc() || end != s->data() + s->size()) return r.fail(" is not \"op#N\"");
  r.word = static_cast<std::uint32_t>(op);
  return true;
}

// Shown as the communicator id it hashes to (nccl.h); one read through a
// pointer only once the call succeeded (ncclGetUniqueId's is an out-param).
void as_nccl_unique_id(ArgDecoding& d) {
  const bool written = d.spec.type == A::NcclUniqueId || (!d.call.unfinished && !d.call.failed());
  const auto id = nccl_unique_id_hash(reinterpret_cast<const std::uint8_t*>(d.payload.data()), d.payload.size());
  if (!written || d.payload_fault() || !id) {
    d.put(std::monostate{});
  } else {
    d.call.string_storage = nccl_id_text(*id);
    d.put(std::string_view(d.call.string_storage));
  }
}
// The trace keeps the communicator id, not the 128 bytes: the record carries the id (nccl_unique_id_hash).
bool read_nccl_unique_id(ArgReading& r) {
  return read_payload(r, [&r](const Value* v) {
    const std::string_view* id = text(v);
    if (!id) return r.fail(" is not a string");
    std::uint64_t n = 0;
    if (id->size() != 16 || id->find_first_not_of("0123456789abcdef") != std::string_view::npos)
      return r.fail(" is not a communicator id (16 hex digits)");
    std::from_chars(id->data(), id->data() + id->size(), n, 16);
    payload_u64(r, n);
    return true;
  });
}

// ncclCommInitAll's communicators: the first is shown; the model (nccl.cpp) reads the others from the payload.
void as_nccl_comm_array(ArgDecoding& d) {
  if (!d.call.unfinished && d.rec.ret == 0 && !d.payload_fault() && d.payload.size() >= 8)
    d.put(Hex{read_u64(d.payload.data())});
  else
    d.put(std::monostate{});
}
bool read_nccl_comm_array(ArgReading& r) {
  return read_payload(r, [&r](const Value*) {
    std::uint64_t comm;
    if (!read_hex(r, comm)) return false;
    payload_u64(r, comm);
    return true;
  });
}

// The kernel a graph node runs: func, or the driver v2 struct's kern when func is null. It names the call's kernel.
void as_kernel_node_params(ArgDecoding& d) {
  const bool read = !d.payload_fault() && d.payload.size() >= 8;
  std::uint64_t kernel = read ? read_u64(d.payload.data()) : 0;
  if (read && !kernel && d.payload.size() >= kKernelNodeKernOffset + 8)
    kernel = read_u64(&d.payload[kKernelNodeKernOffset]);
  if (!kernel) {
    d.put(std::monostate{});
    return;
  }
  d.names_kernel = true;
  d.call.kernel_handle = kernel;
  d.put(Hex{kernel});
}
bool read_kernel_node_params(ArgReading& r) {  // the kernel, as the params' first word
  return read_payload(r, [&r](const Value*) {
    if (!read_hex(r, r.kernel_handle)) return false;
    payload_u64(r, r.kernel_handle);
    return true;
  });
}

void as_float_bits(ArgDecoding& d) {
  float f;
  const auto bits = static_cast<std::uint32_t>(d.raw);
  std::memcpy(&f, &bits, sizeof f);
  d.put(double(f));
}
bool read_float_bits(ArgReading& r) {
  const Value* v;
  if (!r.field(v)) return false;
  float f;
  if (const auto* x = v ? std::get_if<double>(v) : nullptr)
    f = static_cast<float>(*x);
  else if (std::int64_t n; signed_value(v, n))
    f = static_cast<float>(n);
  else
    return r.fail(" is not a number");
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  r.word = bits;
  return true;
}

using P = Passing;
using H = HandleOf;
constexpr std::uint8_t kNoPayload = CT_PAYLOAD_NONE, kBytes = CT_PAYLOAD_BYTES;

// clang-format off
// type, doc, passing, slots, out bytes, payload, payload words, handle of, decode, read back.
// Float and Struct are never captured: nothing to decode or read.
constexpr ArgTypeFacts kFacts[] = {
  {A::Size, "size", P::Integers, 1, 0, kNoPayload, 0, H::Nothing, as_unsigned, read_unsigned},
  {A::Int, "int", P::Integers, 1, 0, kNoPayload, 0, H::Nothing, as_i32, read_signed},
  {A::UInt, "uint", P::Integers, 1, 0, kNoPayload, 0, H::Nothing, as_u32, read_unsigned},
  {A::Flags, "flags", P::Integers, 1, 0, kNoPayload, 0, H::Nothing, as_hex32, read_hex},
  {A::Ptr, "ptr", P::Integers, 1, 0, kNoPayload, 0, H::Nothing, as_hex, read_hex},
  {A::MemcpyKind, "cudaMemcpyKind", P::Integers, 1, 0, kNoPayload, 0, H::Nothing, as_memcpy_kind, read_memcpy_kind},
  {A::Stream, "stream", P::Integers, 1, 0, kNoPayload, 0, H::Stream, as_stream, read_stream},
  {A::Event, "event", P::Integers, 1, 0, kNoPayload, 0, H::Event, as_hex, read_hex},
  {A::Handle, "handle", P::Integers, 1, 0, kNoPayload, 0, H::Nothing, as_hex, read_hex},
  {A::Func, "kernel", P::Integers, 1, 0, kNoPayload, 0, H::Kernel, as_kernel, read_kernel},
  {A::Dim3, "dim3", P::IntegerPair, 2, 0, kNoPayload, 0, H::Nothing, as_dim3, read_dim3},
  {A::Dim3Split, "dim3", P::Integers, 3, 0, kNoPayload, 0, H::Nothing, as_dim3_split, read_dim3_split},
  {A::String, "string", P::Integers, 1, 0, CT_PAYLOAD_STRING, 0, H::Nothing, as_string, read_string},
  {A::LaunchConfig, "launch config", P::Integers, 1, 0, CT_PAYLOAD_LAUNCH_CONFIG, 0, H::Nothing, as_launch_config,
   read_launch_config},
  {A::NcclDataType, "ncclDataType_t", P::Integers, 1, 0, kNoPayload, 0, H::Nothing, as_nccl_datatype,
   read_nccl_datatype},
  {A::NcclRedOp, "ncclRedOp_t", P::Integers, 1, 0, kNoPayload, 0, H::Nothing, as_nccl_redop, read_nccl_redop},
  {A::NcclUniqueId, "ncclUniqueId (by value)", P::InMemory, 1, 0, kBytes, kNcclUniqueIdBytes / 8, H::Nothing,
   as_nccl_unique_id, read_nccl_unique_id},
  {A::NcclUniqueIdPtr, "ncclUniqueId* (read at return)", P::Integers, 1, 0, kBytes, kNcclUniqueIdBytes / 8,
   H::Nothing, as_nccl_unique_id, read_nccl_unique_id},
  {A::NcclCommArray, "out comm array", P::Integers, 1, 0, kBytes, kNcclMaxInitAllComms, H::Nothing,
   as_nccl_comm_array, read_nccl_comm_array},
  {A::KernelNodeParams, "kernel node params (their kernel, read at return)", P::Integers, 1, 0, kBytes,
   kKernelNodeParamsBytes / 8, H::Kernel, as_kernel_node_params, read_kernel_node_params},
  {A::Enum, "enum", P::Integers, 1, 0, kNoPayload, 0, H::Nothing, as_enum, read_enum},
  {A::Float, "float", P::Xmm, 0, 0, kNoPayload, 0, H::Nothing, nullptr, nullptr},
  {A::Struct, "struct", P::ByValue, 0, 0, kNoPayload, 0, H::Nothing, nullptr, nullptr},
  {A::OutPtr, "out ptr", P::Integers, 1, 8, kNoPayload, 0, H::Nothing, as_hex, read_hex},
  {A::OutSize, "out size", P::Integers, 1, 8, kNoPayload, 0, H::Nothing, as_unsigned, read_unsigned},
  {A::OutInt, "out int", P::Integers, 1, 4, kNoPayload, 0, H::Nothing, as_i32, read_signed32},
  {A::OutFloat, "out float", P::Integers, 1, 4, kNoPayload, 0, H::Nothing, as_float_bits, read_float_bits},
  {A::OutStream, "out stream", P::Integers, 1, 8, kNoPayload, 0, H::Stream, as_hex, read_hex},
  {A::OutEvent, "out event", P::Integers, 1, 8, kNoPayload, 0, H::Event, as_hex, read_hex},
  {A::OutHandle, "out handle", P::Integers, 1, 8, kNoPayload, 0, H::Nothing, as_hex, read_hex},
  {A::OutFunc, "out kernel", P::Integers, 1, 8, kNoPayload, 0, H::Kernel, as_hex, read_hex},
  {A::OutUInt, "out uint", P::Integers, 1, 4, kNoPayload, 0, H::Nothing, as_u32, read_unsigned},
  {A::OutEnum, "out enum", P::Integers, 1, 4, kNoPayload, 0, H::Nothing, as_enum, read_enum},
};
// clang-format on

constexpr bool in_enum_order() {
  for (std::size_t i = 0; i < std::size(kFacts); ++i)
    if (kFacts[i].type != static_cast<ArgType>(i)) return false;
  return std::size(kFacts) == kArgTypeCount;
}
static_assert(in_enum_order(), "kFacts has one row per ArgType, in the enum's order");

}  // namespace

const ArgTypeFacts& arg_facts(ArgType t) { return kFacts[static_cast<std::size_t>(t)]; }

std::optional<std::uint64_t> hex_text_value(std::string_view s) {
  std::uint64_t n = 0;
  if (s.size() < 3 || s.size() > 18 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return std::nullopt;
  const auto [end, ec] = std::from_chars(s.data() + 2, s.data() + s.size(), n, 16);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return n;
}

bool is_out(ArgType t) { return arg_facts(t).out_bytes != 0; }
int slot_count(ArgType t) { return arg_facts(t).slots; }

bool ArgReading::field(const Value*& v, std::string_view name) {
  if (name.empty()) name = spec.name;
  for (const auto& [key, value] : args)
    if (key == name) {
      v = value ? &*value : nullptr;
      return true;
    }
  error = "no \"" + std::string(name) + "\" field";
  return false;
}

bool ArgReading::fail(std::string_view why) {
  error = api.symbol + " argument " + spec.name + std::string(why);
  return false;
}

}  // namespace cudatrace
