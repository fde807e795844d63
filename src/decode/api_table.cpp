// The API table: one row per traced function (the generated rows of the
// toolkit's headers with the overrides of api_overrides.cpp applied), where
// each argument travels, and the cookie each row gives the BPF programs.
#include "cudatrace/decode/api_table.h"

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "cudatrace/decode/api_overrides.h"
#include "cudatrace/decode/arg_types.h"
#include "cudatrace/decode/header_rows.h"
#include "cudatrace/bpf_abi.h"

namespace cudatrace {
namespace {

using A = ArgType;
using E = Effect;

// The kernel, transfer and memory summaries need these calls' arguments.
bool needs_detail_record(const ApiSpec& row) {
  switch (row.effect) {
    case E::AllocDevice:
    case E::AllocManaged:
    case E::AllocHost:
    case E::RegisterHost:
    case E::UnregisterHost:
    case E::Free:
    case E::FreeHost:
    case E::Copy:
    case E::Memset:
    case E::Launch:
    case E::SetDevice:
    case E::MemInfo:
      return true;
    case E::CaptureBegin:  // what a graph launch runs: the kernel table's "In graphs"
    case E::CaptureEnd:
    case E::GraphInstantiate:
    case E::GraphExecDestroy:
    case E::GraphDestroy:
    case E::GraphCreate:
    case E::GraphAddKernel:
    case E::GraphAddNode:
      return true;
    default:
      // Kernel names; the range stacks; the NCCL model (communicator ids, sequence numbers, groups).
      return row.group == Group::Module || row.group == Group::Nvtx || row.group == Group::Coll;
  }
}

bool has_stack_struct(const Api& api) {
  return std::any_of(api.spec->args.begin(), api.spec->args.end(),
                     [](const ArgSpec& a) { return arg_facts(a.type).passing == Passing::InMemory; });
}

// How many 8-byte words a fixed-size payload reads: its type's, unless the row says (reading past a struct could fault).
unsigned payload_words(const ArgSpec& a) { return a.words ? a.words : arg_facts(a.type).payload_words; }

std::uint64_t make_cookie(const Api& api) {
  std::uint64_t c = api.id;
  int used_slots = 0;
  for (std::size_t i = 0; i < api.spec->args.size(); ++i)
    if (api.slots[i] != kNotCaptured)
      used_slots = std::max(used_slots, api.slots[i] + slot_count(api.spec->args[i].type));
  // A by-value ncclUniqueId takes slot CT_REG_ARGS for its address, not a stack word.
  const int stack_words = std::max(0, used_slots - CT_REG_ARGS - (has_stack_struct(api) ? 1 : 0));
  c |= std::uint64_t(stack_words) << 16;
  for (int o = 0; o < 2; ++o) {
    if (api.out_index[o] < 0) continue;
    const ArgSpec& a = api.spec->args[api.out_index[o]];
    c |= std::uint64_t(api.slots[api.out_index[o]] + 1) << (20 + 8 * o);
    c |= std::uint64_t(arg_facts(a.type).out_bytes) << (24 + 8 * o);
  }
  if (api.spec->returns != Returns::Status) c |= CT_COOKIE_VOID;
  if (api.layer() == Layer::Nccl) c |= CT_COOKIE_NCCL_STATUS;
  // The driver calls a runtime call makes are part of its record (bpf_abi.h, bits 14 and 60).
  if (api.layer() == Layer::Runtime) c |= CT_COOKIE_RUNTIME;
  if (api.layer() == Layer::Driver) c |= CT_COOKIE_DRIVER;
  if (has_stack_struct(api)) c |= CT_COOKIE_STACK_ADDR;
  if (needs_detail_record(*api.spec)) c |= CT_COOKIE_DETAIL;
  if (api.group() == Group::Nvtx) c |= CT_COOKIE_ALWAYS;
  if (api.payload_index >= 0) {
    const ArgSpec& a = api.spec->args[api.payload_index];
    c |= std::uint64_t(api.slots[api.payload_index] + 1) << 36;
    const std::uint8_t kind = arg_facts(a.type).payload;
    c |= std::uint64_t(kind) << 40;
    if (kind == CT_PAYLOAD_BYTES) c |= std::uint64_t(payload_words(a)) << CT_COOKIE_PAYLOAD_WORDS_SHIFT;
  }
  return c;
}

// Where the x86-64 System V ABI passes a function's arguments: integer ones
// in the six integer registers (slots 0..5), then in stack words (slots 6..);
// float and double in the eight xmm registers; a struct of up to 16 bytes in
// registers when there are enough left for all of it, else, like any larger
// struct, in memory on the stack. A struct returned in memory takes the first
// integer register for its address.
class ArgumentPlaces {
 public:
  static constexpr int kInXmm = -1;
  explicit ArgumentPlaces(Returns returns) : reg_(returns == Returns::Memory ? 1 : 0) {}

  // The first slot of an argument of `ints` integer and `sses` floating-point
  // eightbytes (kInXmm when it has no integer one), or of its `words` in memory.
  int place(int ints, int sses, int words) {
    if (reg_ + ints <= CT_REG_ARGS && sse_ + sses <= kSseRegisters) {
      const int slot = ints ? reg_ : kInXmm;
      reg_ += ints;
      sse_ += sses;
      return slot;
    }
    return in_memory(words);
  }
  int in_memory(int words) {
    const int slot = CT_REG_ARGS + stack_;
    stack_ += words;
    return slot;
  }

 private:
  static constexpr int kSseRegisters = 8;
  int reg_ = 0, sse_ = 0, stack_ = 0;
};

// The slot of argument `a`, or kNotCaptured where the BPF programs do not
// save it: in an xmm register, a struct by value, beyond CT_MAX_ARGS.
int place_argument(ArgumentPlaces& places, const ArgSpec& a) {
  const ArgTypeFacts& facts = arg_facts(a.type);
  int slot = 0;
  switch (facts.passing) {
    case Passing::Xmm:
      places.place(0, 1, 1);
      return kNotCaptured;
    case Passing::ByValue:
      if (a.words <= 2)
        places.place(a.int_words, a.words - a.int_words, a.words);
      else
        places.in_memory(a.words);
      return kNotCaptured;
    case Passing::InMemory:  // its address goes in slot CT_REG_ARGS (make_api)
      places.in_memory(payload_words(a));
      return CT_REG_ARGS;
    case Passing::IntegerPair:
      slot = places.place(2, 0, 2);
      break;
    case Passing::Integers:
      slot = places.place(1, 0, 1);
      for (int k = 1; k < facts.slots; ++k) places.place(1, 0, 1);
      break;
  }
  return slot + facts.slots <= CT_MAX_ARGS ? slot : kNotCaptured;
}

// The nth argument of type `t` in `row`, or none.
RoleArg nth_of_type(const ApiSpec& row, ArgType t, int nth = 0) {
  int seen = 0;
  for (std::size_t i = 0; i < row.args.size(); ++i)
    if (row.args[i].type == t && seen++ == nth)
      return {t, static_cast<std::int8_t>(nth), static_cast<std::int8_t>(i)};
  return {};
}
RoleArg last_of_type(const ApiSpec& row, ArgType t) {
  const auto n = std::count_if(row.args.begin(), row.args.end(), [t](const ArgSpec& a) { return a.type == t; });
  return n ? nth_of_type(row, t, static_cast<int>(n - 1)) : RoleArg{};
}
RoleArg first_out(const ApiSpec& row) {
  for (const ArgSpec& a : row.args)
    if (is_out(a.type)) return nth_of_type(row, a.type);
  return {};
}
int count_of_type(const ApiSpec& row, ArgType t) {
  return static_cast<int>(std::count_if(row.args.begin(), row.args.end(), [t](const ArgSpec& a) { return a.type == t; }));
}
bool has_type(const ApiSpec& row, ArgType t) { return count_of_type(row, t) > 0; }

}  // namespace

ArgRoles roles_of(const ApiSpec& row) {
  ArgRoles r;
  r[Role::Stream] = nth_of_type(row, A::Stream);
  // A launch config's decoding adds its stream to the call's arguments (arg_types.cpp: as_launch_config).
  if (!r[Role::Stream].present() && has_type(row, A::LaunchConfig)) r[Role::Stream] = {A::Stream, 0, -1};
  r[Role::Event] = nth_of_type(row, A::Event);
  r[Role::Object] = nth_of_type(row, A::Handle);
  r[Role::Created] = nth_of_type(row, A::OutHandle);
  switch (row.effect) {
    case E::Copy: {
      // A 2D copy has more than two sizes: the pitches, then width and height.
      const int sizes = count_of_type(row, A::Size);
      r[Role::Bytes] = nth_of_type(row, A::Size, sizes > 2 ? sizes - 2 : 0);
      if (sizes > 2) r[Role::Rows] = last_of_type(row, A::Size);
      r[Role::Destination] = nth_of_type(row, A::Ptr, 0);
      r[Role::Source] = nth_of_type(row, A::Ptr, 1);
      break;
    }
    case E::Memset: {
      r[Role::Bytes] = nth_of_type(row, A::Size);
      const std::string_view name = row.name;
      r.element_bytes = name.find("D32") != std::string_view::npos   ? 4
                        : name.find("D16") != std::string_view::npos ? 2
                                                                     : 1;
      break;
    }
    case E::AllocDevice:
    case E::AllocManaged:
    case E::AllocHost:
      // cudaMallocPitch / cuMemAllocPitch: the pitch it chose times the height (the last size).
      if (has_type(row, A::OutSize)) {
        r[Role::Bytes] = nth_of_type(row, A::OutSize);
        r[Role::Rows] = last_of_type(row, A::Size);
      } else {
        r[Role::Bytes] = nth_of_type(row, A::Size);
      }
      r[Role::Address] = first_out(row);
      break;
    case E::RegisterHost:
      r[Role::Bytes] = nth_of_type(row, A::Size);
      r[Role::Address] = nth_of_type(row, A::Ptr);
      break;
    case E::UnregisterHost:
    case E::FreeHost:
      r[Role::Address] = nth_of_type(row, A::Ptr);
      break;
    case E::Free:
      r[Role::Address] = has_type(row, A::Ptr) ? nth_of_type(row, A::Ptr) : nth_of_type(row, A::Handle);  // cuMemRelease
      break;
    case E::SetDevice:
      r[Role::Device] = nth_of_type(row, A::Int);
      break;
    case E::MemInfo:
      r[Role::FreeBytes] = nth_of_type(row, A::OutSize, 0);
      r[Role::TotalBytes] = nth_of_type(row, A::OutSize, 1);
      break;
    case E::CommInit:
      // With a unique id (or ncclCommInitAll's array): nranks (ndev) and rank; ncclCommSplit: color, key.
      if (has_type(row, A::NcclUniqueId) || has_type(row, A::NcclUniqueIdPtr) || has_type(row, A::NcclCommArray)) {
        r[Role::Ranks] = nth_of_type(row, A::Int, 0);
        r[Role::Rank] = nth_of_type(row, A::Int, 1);
      } else {
        r[Role::Color] = nth_of_type(row, A::Int, 0);
      }
      break;
    case E::Collective:
      r[Role::Count] = nth_of_type(row, A::Size);
      r[Role::DataType] = nth_of_type(row, A::NcclDataType);
      break;
    case E::NvtxPush:
    case E::NvtxPop:
    case E::NvtxStart:
    case E::NvtxEnd:
    case E::NvtxMark:
      r[Role::Message] = nth_of_type(row, A::String);
      if (row.effect == E::NvtxStart || row.effect == E::NvtxEnd) r[Role::RangeId] = nth_of_type(row, A::Size);
      break;
    default:
      break;
  }
  return r;
}

namespace {

Api make_api(std::uint16_t id, const ApiSpec& spec, std::string symbol, bool variant) {
  Api api{id, std::move(symbol), &spec, {}, {-1, -1}, -1, 0, variant};
  ArgumentPlaces places(spec.returns);
  int outs = 0;
  bool register_after_struct = false;
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    const ArgTypeFacts& facts = arg_facts(spec.args[i].type);
    const int slot = place_argument(places, spec.args[i]);
    api.slots.push_back(static_cast<std::uint8_t>(slot));
    if (slot == kNotCaptured) continue;
    // A struct passed in memory takes no register: ct_enter stores its address in slot CT_REG_ARGS
    // (CT_COOKIE_STACK_ADDR), and the payload reads it from there.
    register_after_struct |= slot >= CT_REG_ARGS && facts.passing != Passing::InMemory;
    if (facts.out_bytes) {
      if (outs == 2) throw std::logic_error(std::string("more than two out-params: ") + spec.name);
      api.out_index[outs++] = static_cast<int>(i);
    }
    if (facts.payload != CT_PAYLOAD_NONE) {
      if (api.payload_index >= 0) throw std::logic_error(std::string("two payloads: ") + spec.name);
      api.payload_index = static_cast<int>(i);
    }
  }
  // Stack arguments must not reach the slot that holds a by-value struct's address.
  if (has_stack_struct(api) && register_after_struct)
    throw std::logic_error(std::string("stack arguments after a by-value ncclUniqueId: ") + spec.name);
  api.cookie = make_cookie(api);
  api.roles = roles_of(spec);
  return api;
}

// The name of the operation a function performs: without its _ptsz/_ptds
// form and its _vN version suffix (cuEventElapsedTime_v2 is cuEventElapsedTime).
std::string_view operation_name(std::string_view name) {
  const auto v = name.rfind("_v");
  if (v != std::string_view::npos && v + 2 < name.size() &&
      name.find_first_not_of("0123456789", v + 2) == std::string_view::npos)
    name = name.substr(0, v);
  return name;
}

// The rows: every function the headers declare, as written by hand where a
// hand row has its name, else placed by the overrides' rules; then the hand
// rows of functions no header declares. Rows traced by default (of the
// default groups, and those that name kernels) come first, so that a default
// --summary's per-CPU statistics, sized by the largest API id it probes
// (record/bpf_object.cpp), stay small.
std::vector<ApiSpec> build_rows() {
  std::unordered_map<std::string_view, const HeaderRow*> declared;
  for (const HeaderRow& h : header_rows()) declared.emplace(h.name, &h);
  std::vector<ApiSpec> rows;
  std::unordered_set<std::string_view> by_hand;
  for (const ApiSpec& hand : hand_rows()) {
    ApiSpec row = hand;
    if (const auto it = declared.find(hand.name); it != declared.end()) {
      row.prototype = it->second->prototype;
      row.per_thread = it->second->per_thread;
      // The C types the header declares, and the enum table of an argument decoded as the header's, by name.
      for (ArgSpec& a : row.args)
        for (const ArgSpec& declared_arg : it->second->args)
          if (std::string_view(a.name) == declared_arg.name) {
            a.ctype = declared_arg.ctype;
            if (a.type == declared_arg.type) a.enum_type = declared_arg.enum_type;
          }
    }
    row.core = true;
    by_hand.insert(hand.name);
    rows.push_back(std::move(row));
  }
  for (const HeaderRow& h : header_rows()) {
    if (by_hand.count(h.name)) continue;
    const Placement p = placement(h.name, operation_name(h.name));
    rows.push_back({h.name, h.layer, p.group, p.effect, h.args, h.returns, h.prototype, h.per_thread, p.core});
  }
  std::stable_partition(rows.begin(), rows.end(),
                        [](const ApiSpec& r) { return group_on_by_default(r.group) || names_kernels(r); });
  return rows;
}

static_assert(CT_MAX_APIS <= CT_COOKIE_OP(~0ull) + 1, "an operation id is an API id: it must fit its cookie bits");

std::vector<Api> build_apis() {
  std::vector<Api> out;
  for (const ApiSpec& row : api_rows()) {
    out.push_back(make_api(static_cast<std::uint16_t>(out.size()), row, row.name, false));
    // The per-thread-default-stream forms the header declares.
    for (const auto& [flag, suffix] : {std::pair{kPerThreadPtsz, "_ptsz"}, std::pair{kPerThreadPtds, "_ptds"}})
      if (row.per_thread & flag)
        out.push_back(make_api(static_cast<std::uint16_t>(out.size()), row, std::string(row.name) + suffix, true));
  }
  if (out.size() > CT_MAX_APIS) throw std::logic_error("API table larger than CT_MAX_APIS");
  std::unordered_map<std::string_view, std::uint16_t> operations;
  for (Api& api : out) {
    const std::uint16_t op = operations.emplace(operation_name(api.spec->name), api.id).first->second;
    api.cookie |= std::uint64_t(op) << CT_COOKIE_OP_SHIFT;
  }
  return out;
}

}  // namespace

bool is_hot_api(const Api& a) {
  // The getters of query, info and error are called at launch rate by frameworks (issue 28).
  if (a.group() == Group::Launch || a.group() == Group::Query || a.group() == Group::Info ||
      a.group() == Group::Error)
    return true;
  const std::string_view name = a.spec->name;
  // Each <<<>>> launch pushes its configuration and its stub pops it.
  if (name == "__cudaPushCallConfiguration" || name == "__cudaPopCallConfiguration") return true;
  // Looked up before launches (cuBLAS, per launch): launch-rate in the
  // H200's launch-bound inference, the busiest probe the budget left exact.
  if (name == "cuKernelGetFunction") return true;
  // Asynchronous memsets are enqueued like launches (PyTorch's zero fills:
  // 12 per step of the H200's launch-bound inference, next to ~66 launches).
  return a.group() == Group::Xfer && name.find("Memset") != std::string_view::npos &&
         name.size() >= 5 && name.substr(name.size() - 5) == "Async";
}

bool names_kernels(const ApiSpec& row) {
  if (row.group != Group::Module) return false;
  if (row.effect == E::ModuleLoad || row.effect == E::ModuleUnload) return true;
  return std::any_of(row.args.begin(), row.args.end(),
                     [](const ArgSpec& a) { return arg_facts(a.type).handle_of == HandleOf::Kernel; });
}

const char* group_name(Group g) {
  static const char* const kNames[kGroupCount] = {"mem",  "xfer",  "launch", "stream",    "event",   "device",
                                                  "module", "query", "nvtx",   "coll",      "info",    "error",
                                                  "graph",  "occupancy", "texture", "interop", "other"};
  return kNames[static_cast<int>(g)];
}

bool group_on_by_default(Group g) {
  switch (g) {
    case Group::Mem:
    case Group::Xfer:
    case Group::Launch:
    case Group::Stream:
    case Group::Event:
    case Group::Device:
    case Group::Coll:
      return true;
    default:
      return false;
  }
}

const char* group_description(Group g) {
  switch (g) {
    case Group::Mem: return "allocations and frees, page-locked host memory, memory pools, free and total memory";
    case Group::Xfer: return "copies and memsets";
    case Group::Launch: return "kernel and graph launches, host functions queued on streams";
    case Group::Stream: return "stream creation, synchronisation, waits";
    case Group::Event: return "events";
    case Group::Device: return "device selection and synchronisation, initialisation, contexts";
    case Group::Module:
      return "kernel registration and lookups, module and library loads and unloads (traced with launches for kernel "
             "names, printed only when asked for); fat binary and variable registration, launch configurations";
    case Group::Query:
      return "cheap getters (current device and context, last error, capture state, stream properties): off by "
             "default because frameworks call them dozens of times per launch (PyTorch: ~30 cudaGetDevice per "
             "kernel) and each probe hit costs about 1 us, more than the call itself";
    case Group::Nvtx: return "NVTX ranges through cudatrace's injection library: traced with --nvtx (docs/nvtx.md)";
    case Group::Coll: return "NCCL collectives, point-to-point and communicator calls";
    case Group::Info:
      return "versions, device properties, attributes, limits, entry points, configuration: off by default, "
             "frameworks call some at launch rate (a GPT-2 run: 26,851 cuDevicePrimaryCtxGetState)";
    case Group::Error: return "error names and strings: off by default, called after failed calls and at launch rate";
    case Group::Graph:
      return "graph construction, instantiation and update, stream capture: capture, instantiation and destruction "
             "are traced and printed with launches, for what a graph launch runs (docs/graphs.md)";
    case Group::Occupancy: return "occupancy calculators";
    case Group::Texture: return "CUDA arrays, textures and surfaces";
    case Group::Interop: return "graphics interoperability, external memory and semaphores";
    case Group::Other: return "the rest of the toolkit's headers: checkpointing, logs, green contexts, tensor maps, JIT linking, profiler control, ...";
  }
  return "";
}

std::optional<Group> parse_group(std::string_view name) {
  for (int i = 0; i < kGroupCount; ++i)
    if (name == group_name(static_cast<Group>(i))) return static_cast<Group>(i);
  return std::nullopt;
}

const char* layer_name(Layer l) {
  static const char* const kNames[kLayerCount] = {"runtime", "driver", "nvtx", "nccl"};
  return kNames[static_cast<int>(l)];
}

const std::vector<ApiSpec>& api_rows() {
  static const std::vector<ApiSpec> kRows = build_rows();
  return kRows;
}

const char* enum_value_name(const EnumType& e, std::int64_t value) {
  // An argument's 32 bits: enums with values above INT_MAX arrive sign-extended.
  for (std::size_t i = 0; i < e.count; ++i)
    if (static_cast<std::uint32_t>(e.values[i].value) == static_cast<std::uint32_t>(value)) return e.values[i].name;
  return nullptr;
}

const EnumType* header_enum(std::string_view name) {
  for (std::size_t i = 0; i < kHeaderEnumCount; ++i)
    if (name == kHeaderEnums[i].name) return &kHeaderEnums[i];
  return nullptr;
}

const std::vector<Api>& apis() {
  static const std::vector<Api> kApis = build_apis();
  return kApis;
}

const Api* api_by_id(std::uint16_t id) { return id < apis().size() ? &apis()[id] : nullptr; }

std::string_view probe_symbol(const Api& a) {
  // Named apart from NVTX's own functions, which a program's libnvToolsExt exports too.
  static constexpr std::pair<std::string_view, std::string_view> kInjectionTargets[] = {
      {"nvtxRangePush", "cudatrace_nvtx_push"}, {"nvtxRangePop", "cudatrace_nvtx_pop"},
      {"nvtxRangeStart", "cudatrace_nvtx_start"}, {"nvtxRangeEnd", "cudatrace_nvtx_end"},
      {"nvtxMark", "cudatrace_nvtx_mark"}};
  if (a.layer() == Layer::Nvtx)
    for (const auto& [row, target] : kInjectionTargets)
      if (a.symbol == row) return target;
  return a.symbol;
}

const Api* api_by_symbol(std::string_view symbol) {
  static const auto kIndex = [] {
    std::unordered_map<std::string_view, const Api*> m;
    for (const Api& a : apis()) {
      m.emplace(a.symbol, &a);
      m.emplace(probe_symbol(a), &a);  // and the traces of versions that showed the probe targets
    }
    return m;
  }();
  auto it = kIndex.find(symbol);
  return it == kIndex.end() ? nullptr : it->second;
}

}  // namespace cudatrace
