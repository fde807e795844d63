// The table of traced CUDA APIs. Each row is a C signature in data form; the
// probe cookies, decoders, group filters and docs/apis.md are derived from it.
// The rows of every function the toolkit's headers declare are generated at
// build time (scripts/gen-api-rows.py); what the headers cannot say (groups,
// effects, how an argument is decoded beyond its C type, the functions no
// header declares) is in src/decode/api_overrides.cpp; what each argument
// type is, in src/decode/arg_types.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cudatrace/decode/cuda_errors.h"
#include "cudatrace/bpf_abi.h"

namespace cudatrace {

enum class Group : std::uint8_t {
  Mem, Xfer, Launch, Stream, Event, Device, Module, Query, Nvtx, Coll,
  Info, Error, Graph, Occupancy, Texture, Interop, Other
};
inline constexpr int kGroupCount = 17;

const char* group_name(Group g);
// Whether -f without a list (the default) prints the group's calls, and why
// (for --list-apis and docs/apis.md). Off: module (registration; the calls
// that name kernels are traced for that anyway: names_kernels), query, info and error (getters that frameworks call
// dozens of times per launch: probing them would cost more than all the
// rest), and the groups of calls no analysis reads yet.
bool group_on_by_default(Group g);
const char* group_description(Group g);
std::optional<Group> parse_group(std::string_view name);
const char* layer_name(Layer l);

// How one argument is decoded. Out* types are out-parameters: the argument is
// a pointer whose target the return probe reads. A new type needs a row in
// src/decode/arg_types.cpp (arg_types.h: capture, decoding, reading back, docs).
enum class ArgType : std::uint8_t {
  Size,          // size_t, decimal
  Int,           // int
  UInt,          // unsigned int, decimal
  Flags,         // unsigned flags, hex
  Ptr,           // host or device pointer, hex
  MemcpyKind,    // enum cudaMemcpyKind
  Stream,        // cudaStream_t / CUstream
  Event,         // cudaEvent_t / CUevent
  Handle,        // any other opaque handle (graph, context, module, ...), hex
  Func,          // kernel: host stub, cudaKernel_t, CUfunction or CUkernel
  Dim3,          // dim3 passed by value: two registers (x | y << 32, z)
  Dim3Split,     // three unsigned arguments x, y, z (driver launches)
  String,        // const char*, read at return
  LaunchConfig,  // const CUlaunchConfig* / const cudaLaunchConfig_t*, read at return
  NcclDataType,  // ncclDataType_t
  NcclRedOp,     // ncclRedOp_t: built-in ops by name, user ops (ncclRedOpCreatePreMulSum) as op#N
  NcclUniqueId,  // ncclUniqueId passed by value: 128 bytes in the caller's stack argument area, no register
  NcclUniqueIdPtr,  // ncclUniqueId*, read at return (ncclGetUniqueId's out-param; the first of
                    // ncclCommInitRankScalable's ids)
  NcclCommArray,    // ncclComm_t* array filled by ncclCommInitAll: its first kNcclMaxInitAllComms read at return
  KernelNodeParams,  // const cudaKernelNodeParams* / const CUDA_KERNEL_NODE_PARAMS*, read at return: decoded
                     // as the kernel it names (its func; the driver v2 struct's kern when func is null)
  Enum,          // an enum of the toolkit's headers, by name (ArgSpec::enum_type)
  Float,         // float or double: passed in an xmm register, not captured
  Struct,        // a struct passed by value (ArgSpec::words): its fields are not decoded
  OutPtr,        // void** / CUdeviceptr*
  OutSize,       // size_t*
  OutInt,        // int*
  OutFloat,      // float*
  OutStream,     // cudaStream_t* / CUstream*
  OutEvent,      // cudaEvent_t* / CUevent*
  OutHandle,     // other handle*
  OutFunc,       // CUfunction* / CUkernel* / cudaKernel_t*
  OutUInt,       // unsigned int*
  OutEnum,       // enum*, by name (ArgSpec::enum_type)
};
// What each type is and does: src/decode/arg_types.cpp, a row per type in this order.
inline constexpr std::size_t kArgTypeCount = static_cast<std::size_t>(ArgType::OutEnum) + 1;  // the last one above

// sizeof(ncclUniqueId) (NCCL_UNIQUE_ID_BYTES).
inline constexpr int kNcclUniqueIdBytes = 128;
// Communicators of one ncclCommInitAll call that the model learns.
inline constexpr int kNcclMaxInitAllComms = 8;
// sizeof(cudaKernelNodeParams) == sizeof(CUDA_KERNEL_NODE_PARAMS_v1), and of
// CUDA_KERNEL_NODE_PARAMS_v2, whose CUkernel kern is at kKernelNodeKernOffset.
inline constexpr int kKernelNodeParamsBytes = 56;
inline constexpr int kKernelNodeParamsV2Bytes = 72;
inline constexpr int kKernelNodeKernOffset = 56;

bool is_out(ArgType t);
int slot_count(ArgType t);

// The names of an enum's values (generated from the toolkit's headers).
struct EnumValue {
  std::int64_t value;
  const char* name;
};
struct EnumType {
  const char* name;  // as the header spells it: CUdevice_attribute, cudaMemcpyKind
  const EnumValue* values;
  std::size_t count;
};
// The name of `value` (an int argument's 32 bits), nullptr when it has none.
const char* enum_value_name(const EnumType& e, std::int64_t value);

struct ArgSpec {
  const char* name;  // CUDA's parameter name
  ArgType type;
  const char* ctype = nullptr;            // the declared C type, where a header declares the function
  const EnumType* enum_type = nullptr;    // Enum and OutEnum
  std::uint8_t words = 0;                 // Struct: its size in 8-byte words; a payload read through a pointer
                                          // (arg_types.h): the words read, where not its type's
  std::uint8_t int_words = 0;             // Struct of up to 16 bytes: eightbytes passed in integer registers
};

// What the return register holds: a status (cudaError_t, CUresult, ncclResult_t);
// nothing; another value (cudaGetErrorString's string); or, for a struct
// returned in memory, the address the caller passed in the first integer
// register (which shifts every argument by one).
enum class Returns : std::uint8_t { Status, Void, Value, Memory };

// What a call does, for the analyses (summary, memory, streams, insights).
// The arguments an effect needs are its row's roles (Role, roles_of).
enum class Effect : std::uint8_t {
  None,
  AllocDevice,     // out-param 0: the pointer (or handle); first Size: bytes
  AllocManaged,
  AllocHost,       // page-locked host memory
  RegisterHost,    // first Ptr, first Size: a host range becomes page-locked
  UnregisterHost,  // first Ptr
  Free,            // first Ptr: device or managed memory
  FreeHost,        // first Ptr: page-locked host memory
  Copy,            // direction from the MemcpyKind argument, else from the name
  Memset,
  Launch,
  StreamCreate,  // out-param 0: the stream
  StreamDestroy,
  StreamSync,
  StreamQuery,
  StreamWaitEvent,
  EventCreate,  // out-param 0: the event
  EventRecord,
  EventSync,
  EventQuery,
  EventDestroy,
  DeviceSync,
  SetDevice,
  // NVTX ranges (docs/nvtx.md): the String argument is the message.
  NvtxPush,  // first Handle: the domain
  NvtxPop,   // first Handle: the domain
  NvtxStart, // first Size: the range id
  NvtxEnd,   // first Size: the range id
  NvtxMark,
  CommInit,     // NCCL: out-param 0 is the new communicator (nccl.h)
  CommDestroy,  // first Handle: the communicator
  Collective,   // NCCL collective or send/recv: first Handle is the communicator
  GroupStart,
  GroupEnd,
  HostFunc,      // cudaLaunchHostFunc / cuLaunchHostFunc / *StreamAddCallback: a host function queued on the first Stream
  MemInfo,       // cudaMemGetInfo / cuMemGetInfo: out-params 0 and 1 are free and total bytes
  ModuleLoad,    // out-param 0: a module or library handle, new or reused
  ModuleUnload,  // first Handle: the module or library whose kernels' handles die with it
  // Stream capture and graphs (streams.h): work issued to a capturing stream goes into a graph.
  CaptureBegin,      // first Stream starts capturing (into the first Handle, cudaStreamBeginCaptureToGraph)
  CaptureEnd,        // first Stream stops capturing; out-param 0: the graph
  GraphInstantiate,  // out-param 0: the executable graph; first Handle: the graph
  GraphExecDestroy,  // first Handle: the executable graph
  GraphDestroy,      // first Handle: the graph
  GraphCreate,       // out-param 0: a new, empty graph
  GraphAddKernel,    // first Handle: the graph; the KernelNodeParams argument: the kernel (Call::kernel)
  GraphAddNode,      // first Handle: the graph gets a node the model does not read (copy, memset, child graph, ...)
};

// What an argument means to the analyses, worked out once per row from its
// effect and its arguments' types (api_table.cpp: roles_of), so that no
// analysis finds an argument by its type and position.
enum class Role : std::uint8_t {
  Bytes,        // bytes a copy or memset moves, an allocation takes or a registration covers;
                // per row where there are Rows (a 2D copy's width, a pitched allocation's pitch)
  Rows,         // 2D copies and pitched allocations: how many rows of Bytes
  Destination,  // copies: the first pointer
  Source,       // copies: the second pointer
  Address,      // allocations: the new pointer or handle (out-param 0); registrations and frees: the pointer
                // (cuMemRelease: its handle)
  Stream,       // the stream a call names (a launch config's, for cudaLaunchKernelExC)
  Event,        // the event a call names
  Object,       // the handle a call acts on: graph, executable graph, communicator, NVTX domain, context
  Created,      // the handle a call makes: a graph, an executable graph, a communicator
  Device,       // cudaSetDevice's device
  Ranks,        // NCCL communicator creation: the number of ranks (ncclCommInitAll: of devices)
  Rank,         // NCCL communicator creation: this rank
  Color,        // ncclCommSplit: the color
  Count,        // NCCL collectives: elements
  DataType,     // NCCL collectives: the element type
  Message,      // NVTX: the message
  RangeId,      // NVTX start/end ranges: the range id
  FreeBytes,    // cudaMemGetInfo / cuMemGetInfo: out-params 0 and 1
  TotalBytes,
};
inline constexpr std::size_t kRoleCount = static_cast<std::size_t>(Role::TotalBytes) + 1;  // the last one above

// Where a role's value is among a decoded call's arguments: the nth of its
// type (Call::args; a launch config adds its stream there), and the row's
// argument it comes from (ApiSpec::args; -1 for a launch config's stream).
struct RoleArg {
  ArgType type = ArgType::Handle;
  std::int8_t nth = -1;  // -1: the row has no argument in this role
  std::int8_t index = -1;
  bool present() const { return nth >= 0; }
};
struct ArgRoles {
  RoleArg arg[kRoleCount];
  // Memsets of 16- and 32-bit elements (D16, D32 in the name): Bytes counts elements of this size.
  std::uint8_t element_bytes = 1;
  const RoleArg& operator[](Role r) const { return arg[static_cast<std::size_t>(r)]; }
  RoleArg& operator[](Role r) { return arg[static_cast<std::size_t>(r)]; }
};

// The graph calls the stream model reads (capture, instantiation,
// destruction, construction by node): traced with launches whatever -f says
// (Selection).
inline bool is_graph_model_effect(Effect e) {
  return e == Effect::CaptureBegin || e == Effect::CaptureEnd || e == Effect::GraphInstantiate ||
         e == Effect::GraphExecDestroy || e == Effect::GraphDestroy || e == Effect::GraphCreate ||
         e == Effect::GraphAddKernel || e == Effect::GraphAddNode;
}

// One row of the table.
struct ApiSpec {
  const char* name;
  Layer layer;
  Group group;
  Effect effect;
  std::vector<ArgSpec> args;
  Returns returns = Returns::Status;
  const char* prototype = nullptr;  // the header's declaration; nullptr for a function no header declares
  std::uint8_t per_thread = 0;      // kPerThreadPtsz | kPerThreadPtds: the forms the header declares
  bool core = false;                // written by hand or placed by a core rule (is_core_api)
};

// The module group's rows that kernel names come from (KernelNames::learn):
// a kernel handle registered, looked up or derived (a Func or OutFunc
// argument), a module or library loaded or unloaded. Traced with launches
// whatever -f says (Selection::kernel_names); the rest of the group (fat
// binaries, variables, launch configurations) only with -f module.
bool names_kernels(const ApiSpec& row);

// Per-thread-default-stream forms of a row: the symbol with _ptsz or _ptds.
inline constexpr std::uint8_t kPerThreadPtsz = 1;
inline constexpr std::uint8_t kPerThreadPtds = 2;

// A probed symbol: a row, or one of its _ptsz / _ptds variants.
struct Api {
  std::uint16_t id;
  std::string symbol;       // e.g. cudaMemcpyAsync_ptsz
  const ApiSpec* spec;
  // First argument slot of each spec->args[i] (bpf_abi.h: registers, then
  // stack words), or kNotCaptured: an argument the BPF side does not save
  // (in an xmm register, a struct passed by value, beyond CT_MAX_ARGS).
  std::vector<std::uint8_t> slots;
  int out_index[2] = {-1, -1};      // spec->args index of out-params 0 and 1
  int payload_index = -1;           // spec->args index of the String/LaunchConfig/NcclUniqueId* argument
  std::uint64_t cookie;             // what the BPF programs are told (bpf_abi.h)
  bool variant;                     // a _ptsz/_ptds form of spec->name
  ArgRoles roles;                   // of spec's arguments (roles_of)

  Layer layer() const { return spec->layer; }
  Group group() const { return spec->group; }
  Effect effect() const { return spec->effect; }
};

inline constexpr std::uint16_t kNoApi = CT_NO_API;
inline constexpr std::uint8_t kNotCaptured = 0xff;

// Whether an API's probes are duty-cycled under a budget (--max-overhead,
// record/budget.h): what is called at launch rate: launches, asynchronous
// memsets, the kernel lookups made per launch, and the query group (when -f
// selects it).
bool is_hot_api(const Api& a);

// The roles of a row's arguments (Api::roles has them for each probed symbol).
ArgRoles roles_of(const ApiSpec& row);

const std::vector<ApiSpec>& api_rows();
const std::vector<Api>& apis();
const Api* api_by_id(std::uint16_t id);
// The API whose row or probed function (probe_symbol) is `symbol`.
const Api* api_by_symbol(std::string_view symbol);
// The function probed for `a`: its symbol, but for the NVTX rows, probed at
// the functions of cudatrace's injection library (src/target/nvtx_inject.c)
// that NVTX's calls end in: nvtxRangePush at cudatrace_nvtx_push, ...
std::string_view probe_symbol(const Api& a);

}  // namespace cudatrace
