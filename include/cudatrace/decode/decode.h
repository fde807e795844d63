// Turns raw ring-buffer records into decoded calls: typed argument values
// named as CUDA names them, return-code names, kernel names.
#pragma once

#include <any>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/bpf_abi.h"
#include "cudatrace/decode/stack_frame.h"

namespace cudatrace {

class KernelNames;
struct NvtxRange;
class FacetNames;

struct Dim3 {
  std::uint32_t x, y, z;
};
struct Hex {
  std::uint64_t v;
};
// An enum value with its CUDA name; name is nullptr when the value is unknown.
struct Named {
  const char* name;
  std::int64_t raw;
};

// Unavailable (an out-param that could not be read) is std::monostate.
using Value = std::variant<std::monostate, std::uint64_t, std::int64_t, Hex, Dim3, double, Named, std::string_view>;

struct NamedValue {
  std::string_view name;
  Value value;
  ArgType type = ArgType::Handle;  // the table type it was decoded from
  // A stream or event handle's short id ("s1", "default", "e2"), set by the
  // stream model (streams.h); empty when there is none.
  std::string_view id = {};
};

struct WaitInfo;
struct NcclInfo;
struct GraphInfo;

// A facet's value of type T in its slot (a call's decoded forms, the namers,
// a saved trace's facet lines). Asked for every record: an empty slot is
// answered before any_cast, which compares type names there.
template <class T>
const T* slot_value(const std::any& slot) {
  return slot.has_value() ? std::any_cast<T>(&slot) : nullptr;
}
template <class T>
T& slot_value_or_new(std::any& slot) {
  if (slot.has_value())
    if (T* v = std::any_cast<T>(&slot)) return *v;
  return slot.emplace<T>();
}

// The most facets a call can carry (decode/facet.h: call_facets()).
inline constexpr std::size_t kMaxFacets = 4;

// Reads a string from the traced process when the BPF side could not.
using StringReader = std::function<bool(std::uint32_t pid, std::uint64_t addr, std::string& out)>;

// One decoded call: everything downstream of decoding (analyses, outputs)
// reads this, never the ring-buffer record. Its string views (arguments,
// payload) point into the record and the decoder's tables, valid until the
// next call is decoded into it.
struct Call {
  const Api* api = nullptr;
  const Api* parent = nullptr;  // enclosing probed call, if any
  std::uint32_t pid = 0, tid = 0;
  std::uint64_t ts_ns = 0;   // entry, CLOCK_MONOTONIC
  std::uint64_t dur_ns = 0;  // 0 for unfinished calls
  std::int64_t ret = 0;      // the raw return register; status() is the code
  std::uint64_t caller = 0;  // return address: the call site; 0 when unknown
  unsigned depth = 0;        // number of enclosing probed calls
  bool unfinished = false;
  // The bytes read from user memory at return (strings, NCCL unique ids and
  // communicator arrays), and whether reading them failed.
  std::string_view payload;
  bool payload_fault = false;
  std::vector<NamedValue> args;
  // Launches only: the kernel name, demangled and as CUDA gives it, and its
  // short form (KernelNames::short_name); "?" when it cannot be known. Empty
  // for non-launch calls.
  std::string_view kernel, kernel_mangled, kernel_short;
  std::uint64_t kernel_handle = 0;
  std::string string_storage;  // a string argument read by the fallback reader
  // Synchronisations and stream waits: what the call waited for, set by the
  // stream model (streams.h) and valid until its next call; else nullptr.
  const WaitInfo* waited = nullptr;
  // Graph instantiations and launches: what the executable graph runs, set
  // by the stream model and valid until its next call; else nullptr.
  const GraphInfo* graph = nullptr;
  // Work issued to a capturing stream: it went into a graph and did not run
  // (set by the stream model).
  bool captured = false;
  // NCCL calls: communicator id, rank, sequence number, group, bytes; set by
  // the NCCL model (nccl.h) and valid until its next call; else nullptr.
  const NcclInfo* nccl = nullptr;
  // With --nvtx: the NVTX ranges open on the call's thread and the process's
  // open start/end ranges, outermost first (nvtx.h); nullptr when none is.
  const std::vector<NvtxRange>* nvtx = nullptr;
  const std::vector<NvtxRange>* nvtx_process = nullptr;
  // Each facet's decoded form (decode/facet.h), in its slot (Facet::slot): a
  // type the facet's own header declares, read through the accessor it
  // declares there. An empty slot: the facet never decoded into this call.
  std::array<std::any, kMaxFacets> facets;
  template <class T>
  T& facet(std::size_t slot) {
    return slot_value_or_new<T>(facets[slot]);
  }
  template <class T>
  const T* facet(std::size_t slot) const {
    return slot_value<T>(facets[slot]);
  }

  std::string_view comm() const { return comm_; }  // the thread's name
  std::int32_t status() const { return static_cast<std::int32_t>(ret); }
  std::uint64_t end_ns() const { return ts_ns + dur_ns; }
  bool outermost() const { return depth == 0; }
  // Returned a status, and it was an error (cudaErrorNotReady is not one).
  bool failed() const;
  // Completed with success: returned, and void or a zero status.
  bool succeeded() const;
  // Counted as an operation by the analyses: the outermost probed call of an
  // operation (cudaMalloc, not the cuMemAlloc_v2 it makes; with only the
  // driver layer traced, the driver call), completed, and not failed.
  bool counted() const { return !unfinished && outermost() && !failed(); }
  const char* ret_name() const;

 private:
  friend bool decode_call(const ct_call&, KernelNames*, Call&, const StringReader*, const FacetNames*);
  std::string_view comm_;
};

// The nth decoded argument of table type `t` (nullptr if there is none), and
// its integer value: a handle, pointer, size, int or enum (nullopt if there
// is no such argument or it could not be read).
const NamedValue* arg_of_type(const Call& c, ArgType t, int nth = 0);
std::optional<std::uint64_t> arg_value(const Call& c, ArgType t, int nth = 0);
// The argument in role `r` (api_table.h: Role), nullptr if the call has none,
// and its integer value (nullopt also when it could not be read).
const NamedValue* role_arg(const Call& c, Role r);
std::optional<std::uint64_t> role_value(const Call& c, Role r);
// The one rule for bytes: Bytes x Rows x the element size. What a copy or
// memset moves (width x height for 2D copies; elements x 2 or 4 for D16 and
// D32 memsets), what an allocation takes (pitch x height when pitched);
// record/node_stats.cpp gives the BPF side the same arguments.
std::uint64_t role_bytes(const Call& c);
// A decoded value as an integer (handles, pointers, sizes, ints, enums).
std::optional<std::uint64_t> integer_value(const Value& v);

// Name of a cudaMemcpyKind value, nullptr if unknown.
const char* memcpy_kind_name(std::uint64_t kind);
// ncclDataType_t: name and element size in bytes; nullptr / 0 when unknown.
const char* nccl_datatype_name(std::uint64_t type);
std::size_t nccl_datatype_size(std::uint64_t type);
// ncclRedOp_t: ncclSum .. ncclAvg; nullptr for user-defined ops (>= 5).
const char* nccl_redop_name(std::uint64_t op);

// 64-bit FNV-1a: the communicator id of an ncclUniqueId's bytes.
std::uint64_t nccl_fnv1a(const void* data, std::size_t len, std::uint64_t seed = 0xcbf29ce484222325ull);
// The communicator id of an ncclUniqueId payload: the 128 bytes the probe read,
// or the 8-byte id itself in a record rebuilt from a --json trace
// (record/trace_line.h), which keeps the id, not the bytes. nullopt for any
// other length.
std::optional<std::uint64_t> nccl_unique_id_hash(const std::uint8_t* payload, std::size_t len);

// A communicator id as text: 16 lower-case hex digits.
std::string nccl_id_text(std::uint64_t id);

// Special stream handles: the legacy default stream, cudaStreamLegacy,
// cudaStreamPerThread; nullptr for ordinary handles.
const char* special_stream_name(std::uint64_t handle);

// The bytes of one of a record's sections (bpf_abi.h: struct ct_section).
struct RecordSection {
  const std::uint8_t* bytes = nullptr;  // nullptr: the record has no such section
  std::size_t len = 0;
};
// A record's section of `kind` (enum ct_section_kind), found by the one walk
// that checks them all against rec.sections_len: none when the record has
// none of that kind or its sections are malformed (a header or length past
// their end, a length not a multiple of 8, a kind 0, out of range or twice).
// Reads nothing beyond the sections_len bytes after the aligned payload.
// Most records carry no section: those are answered inline.
RecordSection find_record_section(const ct_call& rec, std::uint32_t kind);
inline RecordSection record_section(const ct_call& rec, std::uint32_t kind) {
  return rec.sections_len ? find_record_section(rec, kind) : RecordSection{};
}
// Whether a record of `room` bytes after its struct ct_call holds its payload
// and its sections, and they are well formed.
bool record_fits(const ct_call& rec, std::size_t room);
// The user stack frames of a record's stack section, innermost first.
std::vector<std::uint64_t> record_stack(const ct_call& rec);

// Decodes `rec` (with `payload_len` bytes of payload after it) into `call`,
// reusing its storage; its facets (facet.h) are named by `facet_names`.
// Returns false if the record names an unknown API.
bool decode_call(const ct_call& rec, KernelNames* names, Call& call, const StringReader* read_string = nullptr,
                 const FacetNames* facet_names = nullptr);

}  // namespace cudatrace
