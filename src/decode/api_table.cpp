// The API table: one row per traced function, and the cookie each row gives
// the BPF programs. Its length is the table's; the logic is short.
#include "cudatrace/decode/api_table.h"

#include <stdexcept>
#include <unordered_map>

#include "cudatrace/record.h"

namespace cudatrace {
namespace {

using A = ArgType;
using E = Effect;
constexpr Layer RT = Layer::Runtime;
constexpr Layer DRV = Layer::Driver;
constexpr Layer NCCL = Layer::Nccl;
constexpr Group MEM = Group::Mem, XFER = Group::Xfer, LAUNCH = Group::Launch, STREAM = Group::Stream,
                EVENT = Group::Event, DEVICE = Group::Device, MODULE = Group::Module, QUERY = Group::Query,
                NVTX = Group::Nvtx, COLL = Group::Coll;
constexpr Layer NVTXL = Layer::Nvtx;

// clang-format off
// name, layer, group, effect, {arguments in order as {CUDA parameter name, type}}[, returns]
const std::vector<ApiSpec> kRows = {
  // ---- Runtime: memory
  {"cudaMalloc", RT, MEM, E::AllocDevice, {{"devPtr", A::OutPtr}, {"size", A::Size}}},
  {"cudaFree", RT, MEM, E::Free, {{"devPtr", A::Ptr}}},
  {"cudaMallocHost", RT, MEM, E::AllocHost, {{"ptr", A::OutPtr}, {"size", A::Size}}},
  {"cudaFreeHost", RT, MEM, E::FreeHost, {{"ptr", A::Ptr}}},
  {"cudaHostAlloc", RT, MEM, E::AllocHost, {{"pHost", A::OutPtr}, {"size", A::Size}, {"flags", A::Flags}}},
  {"cudaHostRegister", RT, MEM, E::RegisterHost, {{"ptr", A::Ptr}, {"size", A::Size}, {"flags", A::Flags}}},
  {"cudaHostUnregister", RT, MEM, E::UnregisterHost, {{"ptr", A::Ptr}}},
  {"cudaMallocManaged", RT, MEM, E::AllocManaged, {{"devPtr", A::OutPtr}, {"size", A::Size}, {"flags", A::Flags}}},
  {"cudaMallocAsync", RT, MEM, E::AllocDevice, {{"devPtr", A::OutPtr}, {"size", A::Size}, {"stream", A::Stream}}},
  {"cudaFreeAsync", RT, MEM, E::Free, {{"devPtr", A::Ptr}, {"stream", A::Stream}}},
  {"cudaMallocPitch", RT, MEM, E::AllocDevice, {{"devPtr", A::OutPtr}, {"pitch", A::OutSize}, {"width", A::Size}, {"height", A::Size}}},
  // ---- Runtime: transfers
  {"cudaMemcpy", RT, XFER, E::Copy, {{"dst", A::Ptr}, {"src", A::Ptr}, {"count", A::Size}, {"kind", A::MemcpyKind}}},
  {"cudaMemcpyAsync", RT, XFER, E::Copy, {{"dst", A::Ptr}, {"src", A::Ptr}, {"count", A::Size}, {"kind", A::MemcpyKind}, {"stream", A::Stream}}},
  {"cudaMemcpy2D", RT, XFER, E::Copy, {{"dst", A::Ptr}, {"dpitch", A::Size}, {"src", A::Ptr}, {"spitch", A::Size}, {"width", A::Size}, {"height", A::Size}, {"kind", A::MemcpyKind}}},
  {"cudaMemcpy2DAsync", RT, XFER, E::Copy, {{"dst", A::Ptr}, {"dpitch", A::Size}, {"src", A::Ptr}, {"spitch", A::Size}, {"width", A::Size}, {"height", A::Size}, {"kind", A::MemcpyKind}, {"stream", A::Stream}}},
  {"cudaMemcpyPeer", RT, XFER, E::Copy, {{"dst", A::Ptr}, {"dstDevice", A::Int}, {"src", A::Ptr}, {"srcDevice", A::Int}, {"count", A::Size}}},
  {"cudaMemcpyPeerAsync", RT, XFER, E::Copy, {{"dst", A::Ptr}, {"dstDevice", A::Int}, {"src", A::Ptr}, {"srcDevice", A::Int}, {"count", A::Size}, {"stream", A::Stream}}},
  {"cudaMemset", RT, XFER, E::Memset, {{"devPtr", A::Ptr}, {"value", A::Int}, {"count", A::Size}}},
  {"cudaMemsetAsync", RT, XFER, E::Memset, {{"devPtr", A::Ptr}, {"value", A::Int}, {"count", A::Size}, {"stream", A::Stream}}},
  // ---- Runtime: launches
  {"cudaLaunchKernel", RT, LAUNCH, E::Launch, {{"func", A::Func}, {"grid", A::Dim3}, {"block", A::Dim3}, {"args", A::Ptr}, {"sharedMem", A::Size}, {"stream", A::Stream}}},
  {"cudaLaunchKernelExC", RT, LAUNCH, E::Launch, {{"config", A::LaunchConfig}, {"func", A::Func}, {"args", A::Ptr}}},
  {"cudaLaunchCooperativeKernel", RT, LAUNCH, E::Launch, {{"func", A::Func}, {"grid", A::Dim3}, {"block", A::Dim3}, {"args", A::Ptr}, {"sharedMem", A::Size}, {"stream", A::Stream}}},
  {"cudaGraphLaunch", RT, LAUNCH, E::Launch, {{"graphExec", A::Handle}, {"stream", A::Stream}}},
  // ---- Runtime: streams
  {"cudaStreamCreate", RT, STREAM, E::StreamCreate, {{"pStream", A::OutStream}}},
  {"cudaStreamCreateWithFlags", RT, STREAM, E::StreamCreate, {{"pStream", A::OutStream}, {"flags", A::Flags}}},
  {"cudaStreamCreateWithPriority", RT, STREAM, E::StreamCreate, {{"pStream", A::OutStream}, {"flags", A::Flags}, {"priority", A::Int}}},
  {"cudaStreamDestroy", RT, STREAM, E::StreamDestroy, {{"stream", A::Stream}}},
  {"cudaStreamSynchronize", RT, STREAM, E::StreamSync, {{"stream", A::Stream}}},
  {"cudaStreamQuery", RT, STREAM, E::StreamQuery, {{"stream", A::Stream}}},
  {"cudaStreamWaitEvent", RT, STREAM, E::StreamWaitEvent, {{"stream", A::Stream}, {"event", A::Event}, {"flags", A::Flags}}},
  // ---- Runtime: events
  {"cudaEventCreate", RT, EVENT, E::EventCreate, {{"event", A::OutEvent}}},
  {"cudaEventCreateWithFlags", RT, EVENT, E::EventCreate, {{"event", A::OutEvent}, {"flags", A::Flags}}},
  {"cudaEventRecord", RT, EVENT, E::EventRecord, {{"event", A::Event}, {"stream", A::Stream}}},
  {"cudaEventRecordWithFlags", RT, EVENT, E::EventRecord, {{"event", A::Event}, {"stream", A::Stream}, {"flags", A::Flags}}},
  {"cudaEventSynchronize", RT, EVENT, E::EventSync, {{"event", A::Event}}},
  {"cudaEventQuery", RT, EVENT, E::EventQuery, {{"event", A::Event}}},
  {"cudaEventElapsedTime", RT, EVENT, E::None, {{"ms", A::OutFloat}, {"start", A::Event}, {"end", A::Event}}},
  {"cudaEventDestroy", RT, EVENT, E::EventDestroy, {{"event", A::Event}}},
  // ---- Runtime: device
  {"cudaSetDevice", RT, DEVICE, E::SetDevice, {{"device", A::Int}}},
  {"cudaGetDeviceCount", RT, DEVICE, E::None, {{"count", A::OutInt}}},
  {"cudaDeviceSynchronize", RT, DEVICE, E::DeviceSync, {}},
  {"cudaDeviceReset", RT, DEVICE, E::None, {}},
  // ---- Runtime: high-frequency queries (off by default: PyTorch calls
  // cudaGetDevice ~30 times per launch, and each probe hit costs ~1 us)
  {"cudaGetDevice", RT, QUERY, E::None, {{"device", A::OutInt}}},
  {"cudaGetLastError", RT, QUERY, E::None, {}},
  {"cudaPeekAtLastError", RT, QUERY, E::None, {}},
  {"cudaStreamIsCapturing", RT, QUERY, E::None, {{"stream", A::Stream}, {"pCaptureStatus", A::OutInt}}},
  // The last four out-pointers are not read: a row reads at most two.
  {"cudaStreamGetCaptureInfo", RT, QUERY, E::None, {{"stream", A::Stream}, {"captureStatus_out", A::OutInt}, {"id_out", A::OutSize},
      {"graph_out", A::Ptr}, {"dependencies_out", A::Ptr}, {"edgeData_out", A::Ptr}, {"numDependencies_out", A::Ptr}}},
  {"cudaDeviceGetAttribute", RT, QUERY, E::None, {{"value", A::OutInt}, {"attr", A::Int}, {"device", A::Int}}},
  {"cudaFuncGetAttributes", RT, QUERY, E::None, {{"attr", A::Ptr}, {"func", A::Func}}},
  {"cudaPointerGetAttributes", RT, QUERY, E::None, {{"attributes", A::Ptr}, {"ptr", A::Ptr}}},
  // ---- Runtime: kernel registration, for kernel names
  {"__cudaRegisterFunction", RT, MODULE, E::None, {{"fatCubinHandle", A::Handle}, {"hostFun", A::Func}, {"deviceFun", A::String}}, Returns::Void},
  {"__cudaGetKernel", RT, MODULE, E::None, {{"kernel", A::OutFunc}, {"hostFun", A::Func}}},
  {"cudaGetKernel", RT, MODULE, E::None, {{"kernelPtr", A::OutFunc}, {"entryFuncAddr", A::Func}}},
  {"cudaLibraryGetKernel", RT, MODULE, E::None, {{"pKernel", A::OutFunc}, {"library", A::Handle}, {"name", A::String}}},

  // ---- Driver: memory
  {"cuMemAlloc_v2", DRV, MEM, E::AllocDevice, {{"dptr", A::OutPtr}, {"bytesize", A::Size}}},
  {"cuMemFree_v2", DRV, MEM, E::Free, {{"dptr", A::Ptr}}},
  {"cuMemAllocHost_v2", DRV, MEM, E::AllocHost, {{"pp", A::OutPtr}, {"bytesize", A::Size}}},
  {"cuMemFreeHost", DRV, MEM, E::FreeHost, {{"p", A::Ptr}}},
  {"cuMemHostAlloc", DRV, MEM, E::AllocHost, {{"pp", A::OutPtr}, {"bytesize", A::Size}, {"Flags", A::Flags}}},
  {"cuMemHostRegister_v2", DRV, MEM, E::RegisterHost, {{"p", A::Ptr}, {"bytesize", A::Size}, {"Flags", A::Flags}}},
  {"cuMemAllocManaged", DRV, MEM, E::AllocManaged, {{"dptr", A::OutPtr}, {"bytesize", A::Size}, {"flags", A::Flags}}},
  {"cuMemAllocPitch_v2", DRV, MEM, E::AllocDevice, {{"dptr", A::OutPtr}, {"pPitch", A::OutSize}, {"WidthInBytes", A::Size}, {"Height", A::Size}, {"ElementSizeBytes", A::UInt}}},
  {"cuMemAllocAsync", DRV, MEM, E::AllocDevice, {{"dptr", A::OutPtr}, {"bytesize", A::Size}, {"hStream", A::Stream}}},
  {"cuMemFreeAsync", DRV, MEM, E::Free, {{"dptr", A::Ptr}, {"hStream", A::Stream}}},
  {"cuMemCreate", DRV, MEM, E::AllocDevice, {{"handle", A::OutHandle}, {"size", A::Size}, {"prop", A::Ptr}, {"flags", A::Flags}}},
  {"cuMemMap", DRV, MEM, E::None, {{"ptr", A::Ptr}, {"size", A::Size}, {"offset", A::Size}, {"handle", A::Handle}, {"flags", A::Flags}}},
  {"cuMemUnmap", DRV, MEM, E::None, {{"ptr", A::Ptr}, {"size", A::Size}}},
  {"cuMemRelease", DRV, MEM, E::Free, {{"handle", A::Handle}}},
  {"cuMemAddressReserve", DRV, MEM, E::None, {{"ptr", A::OutPtr}, {"size", A::Size}, {"alignment", A::Size}, {"addr", A::Ptr}, {"flags", A::Flags}}},
  // ---- Driver: transfers
  {"cuMemcpy", DRV, XFER, E::Copy, {{"dst", A::Ptr}, {"src", A::Ptr}, {"ByteCount", A::Size}}},
  {"cuMemcpyAsync", DRV, XFER, E::Copy, {{"dst", A::Ptr}, {"src", A::Ptr}, {"ByteCount", A::Size}, {"hStream", A::Stream}}},
  {"cuMemcpyHtoD_v2", DRV, XFER, E::Copy, {{"dstDevice", A::Ptr}, {"srcHost", A::Ptr}, {"ByteCount", A::Size}}},
  {"cuMemcpyDtoH_v2", DRV, XFER, E::Copy, {{"dstHost", A::Ptr}, {"srcDevice", A::Ptr}, {"ByteCount", A::Size}}},
  {"cuMemcpyDtoD_v2", DRV, XFER, E::Copy, {{"dstDevice", A::Ptr}, {"srcDevice", A::Ptr}, {"ByteCount", A::Size}}},
  {"cuMemcpyHtoDAsync_v2", DRV, XFER, E::Copy, {{"dstDevice", A::Ptr}, {"srcHost", A::Ptr}, {"ByteCount", A::Size}, {"hStream", A::Stream}}},
  {"cuMemcpyDtoHAsync_v2", DRV, XFER, E::Copy, {{"dstHost", A::Ptr}, {"srcDevice", A::Ptr}, {"ByteCount", A::Size}, {"hStream", A::Stream}}},
  {"cuMemcpyDtoDAsync_v2", DRV, XFER, E::Copy, {{"dstDevice", A::Ptr}, {"srcDevice", A::Ptr}, {"ByteCount", A::Size}, {"hStream", A::Stream}}},
  {"cuMemsetD8_v2", DRV, XFER, E::Memset, {{"dstDevice", A::Ptr}, {"uc", A::UInt}, {"N", A::Size}}},
  {"cuMemsetD32_v2", DRV, XFER, E::Memset, {{"dstDevice", A::Ptr}, {"ui", A::UInt}, {"N", A::Size}}},
  {"cuMemsetD8Async", DRV, XFER, E::Memset, {{"dstDevice", A::Ptr}, {"uc", A::UInt}, {"N", A::Size}, {"hStream", A::Stream}}},
  {"cuMemsetD32Async", DRV, XFER, E::Memset, {{"dstDevice", A::Ptr}, {"ui", A::UInt}, {"N", A::Size}, {"hStream", A::Stream}}},
  // ---- Driver: launches
  {"cuLaunchKernel", DRV, LAUNCH, E::Launch, {{"f", A::Func}, {"grid", A::Dim3Split}, {"block", A::Dim3Split}, {"sharedMemBytes", A::UInt}, {"hStream", A::Stream}, {"kernelParams", A::Ptr}, {"extra", A::Ptr}}},
  {"cuLaunchKernelEx", DRV, LAUNCH, E::Launch, {{"config", A::LaunchConfig}, {"f", A::Func}, {"kernelParams", A::Ptr}, {"extra", A::Ptr}}},
  {"cuLaunchCooperativeKernel", DRV, LAUNCH, E::Launch, {{"f", A::Func}, {"grid", A::Dim3Split}, {"block", A::Dim3Split}, {"sharedMemBytes", A::UInt}, {"hStream", A::Stream}, {"kernelParams", A::Ptr}}},
  {"cuGraphLaunch", DRV, LAUNCH, E::Launch, {{"hGraphExec", A::Handle}, {"hStream", A::Stream}}},
  // ---- Driver: streams
  {"cuStreamCreate", DRV, STREAM, E::StreamCreate, {{"phStream", A::OutStream}, {"Flags", A::Flags}}},
  {"cuStreamCreateWithPriority", DRV, STREAM, E::StreamCreate, {{"phStream", A::OutStream}, {"flags", A::Flags}, {"priority", A::Int}}},
  {"cuStreamDestroy_v2", DRV, STREAM, E::StreamDestroy, {{"hStream", A::Stream}}},
  {"cuStreamSynchronize", DRV, STREAM, E::StreamSync, {{"hStream", A::Stream}}},
  {"cuStreamQuery", DRV, STREAM, E::StreamQuery, {{"hStream", A::Stream}}},
  {"cuStreamWaitEvent", DRV, STREAM, E::StreamWaitEvent, {{"hStream", A::Stream}, {"hEvent", A::Event}, {"Flags", A::Flags}}},
  // ---- Driver: events
  {"cuEventCreate", DRV, EVENT, E::EventCreate, {{"phEvent", A::OutEvent}, {"Flags", A::Flags}}},
  {"cuEventRecord", DRV, EVENT, E::EventRecord, {{"hEvent", A::Event}, {"hStream", A::Stream}}},
  {"cuEventRecordWithFlags", DRV, EVENT, E::EventRecord, {{"hEvent", A::Event}, {"hStream", A::Stream}, {"flags", A::Flags}}},
  {"cuEventSynchronize", DRV, EVENT, E::EventSync, {{"hEvent", A::Event}}},
  {"cuEventQuery", DRV, EVENT, E::EventQuery, {{"hEvent", A::Event}}},
  {"cuEventDestroy_v2", DRV, EVENT, E::EventDestroy, {{"hEvent", A::Event}}},
  {"cuEventElapsedTime", DRV, EVENT, E::None, {{"pMilliseconds", A::OutFloat}, {"hStart", A::Event}, {"hEnd", A::Event}}},
  {"cuEventElapsedTime_v2", DRV, EVENT, E::None, {{"pMilliseconds", A::OutFloat}, {"hStart", A::Event}, {"hEnd", A::Event}}},
  // ---- Driver: context and device
  {"cuInit", DRV, DEVICE, E::None, {{"Flags", A::Flags}}},
  {"cuCtxSynchronize", DRV, DEVICE, E::DeviceSync, {}},
  {"cuCtxSynchronize_v2", DRV, DEVICE, E::DeviceSync, {}},  // what CUDA 13 runtimes call
  // A setter, but XLA calls it ~60 times per step (docs/apis.md): a query by cost.
  {"cuCtxSetCurrent", DRV, QUERY, E::None, {{"ctx", A::Handle}}},
  {"cuDevicePrimaryCtxRetain", DRV, DEVICE, E::None, {{"pctx", A::OutHandle}, {"dev", A::Int}}},
  // ---- Driver: high-frequency queries (off by default)
  {"cuCtxGetCurrent", DRV, QUERY, E::None, {{"pctx", A::OutHandle}}},
  {"cuCtxGetDevice", DRV, QUERY, E::None, {{"device", A::OutInt}}},
  {"cuCtxGetDevice_v2", DRV, QUERY, E::None, {{"device", A::OutInt}, {"ctx", A::Handle}}},
  {"cuStreamIsCapturing", DRV, QUERY, E::None, {{"hStream", A::Stream}, {"captureStatus", A::OutInt}}},
  // What cuStreamGetCaptureInfo means with CUDA 13 headers; the last four out-pointers are not read.
  {"cuStreamGetCaptureInfo_v3", DRV, QUERY, E::None, {{"hStream", A::Stream}, {"captureStatus_out", A::OutInt}, {"id_out", A::OutSize},
      {"graph_out", A::Ptr}, {"dependencies_out", A::Ptr}, {"edgeData_out", A::Ptr}, {"numDependencies_out", A::Ptr}}},
  {"cuDeviceGetAttribute", DRV, QUERY, E::None, {{"pi", A::OutInt}, {"attrib", A::Int}, {"dev", A::Int}}},
  {"cuFuncGetAttribute", DRV, QUERY, E::None, {{"pi", A::OutInt}, {"attrib", A::Int}, {"hfunc", A::Func}}},
  {"cuKernelGetAttribute", DRV, QUERY, E::None, {{"pi", A::OutInt}, {"attrib", A::Int}, {"kernel", A::Func}, {"dev", A::Int}}},
  {"cuPointerGetAttribute", DRV, QUERY, E::None, {{"data", A::Ptr}, {"attribute", A::Int}, {"ptr", A::Ptr}}},
  {"cuPointerGetAttributes", DRV, QUERY, E::None, {{"numAttributes", A::UInt}, {"attributes", A::Ptr}, {"data", A::Ptr}, {"ptr", A::Ptr}}},
  // ---- Driver: kernel lookups, for kernel names
  {"cuModuleGetFunction", DRV, MODULE, E::None, {{"hfunc", A::OutFunc}, {"hmod", A::Handle}, {"name", A::String}}},
  {"cuLibraryGetKernel", DRV, MODULE, E::None, {{"pKernel", A::OutFunc}, {"library", A::Handle}, {"name", A::String}}},
  {"cuKernelGetFunction", DRV, MODULE, E::None, {{"pFunc", A::OutFunc}, {"kernel", A::Func}}},

  // ---- NVTX: the probe targets of cudatrace's injection library (src/target/nvtx_inject.c), with --nvtx
  {"cudatrace_nvtx_push", NVTXL, NVTX, E::NvtxPush, {{"message", A::String}, {"domain", A::Handle}}, Returns::Void},
  {"cudatrace_nvtx_pop", NVTXL, NVTX, E::NvtxPop, {{"domain", A::Handle}}, Returns::Void},
  {"cudatrace_nvtx_start", NVTXL, NVTX, E::NvtxStart, {{"message", A::String}, {"domain", A::Handle}, {"id", A::Size}}, Returns::Void},
  {"cudatrace_nvtx_end", NVTXL, NVTX, E::NvtxEnd, {{"id", A::Size}}, Returns::Void},
  {"cudatrace_nvtx_mark", NVTXL, NVTX, E::NvtxMark, {{"message", A::String}, {"domain", A::Handle}}, Returns::Void},
  // ---- NCCL (nccl.h of 2.28; a version without some of these rows gets a warning): communicators,
  // collectives, point to point, groups.
  // ncclAllReduce is a weak alias of pncclAllReduce: one probe per address.
  {"ncclGetUniqueId", NCCL, COLL, E::None, {{"uniqueId", A::NcclUniqueIdPtr}}},
  {"ncclCommInitRank", NCCL, COLL, E::CommInit, {{"comm", A::OutHandle}, {"nranks", A::Int}, {"commId", A::NcclUniqueId}, {"rank", A::Int}}},
  {"ncclCommInitRankConfig", NCCL, COLL, E::CommInit, {{"comm", A::OutHandle}, {"nranks", A::Int}, {"commId", A::NcclUniqueId}, {"rank", A::Int}, {"config", A::Ptr}}},
  {"ncclCommInitRankScalable", NCCL, COLL, E::CommInit, {{"newcomm", A::OutHandle}, {"nranks", A::Int}, {"myrank", A::Int}, {"nId", A::Int}, {"commIds", A::NcclUniqueIdPtr}, {"config", A::Ptr}}},
  {"ncclCommInitAll", NCCL, COLL, E::CommInit, {{"comm", A::NcclCommArray}, {"ndev", A::Int}, {"devlist", A::Ptr}}},
  {"ncclCommSplit", NCCL, COLL, E::CommInit, {{"comm", A::Handle}, {"color", A::Int}, {"key", A::Int}, {"newcomm", A::OutHandle}, {"config", A::Ptr}}},
  {"ncclCommDestroy", NCCL, COLL, E::CommDestroy, {{"comm", A::Handle}}},
  {"ncclCommAbort", NCCL, COLL, E::CommDestroy, {{"comm", A::Handle}}},
  {"ncclCommCount", NCCL, COLL, E::None, {{"comm", A::Handle}, {"count", A::OutInt}}},
  {"ncclCommUserRank", NCCL, COLL, E::None, {{"comm", A::Handle}, {"rank", A::OutInt}}},
  {"ncclAllReduce", NCCL, COLL, E::Collective, {{"sendbuff", A::Ptr}, {"recvbuff", A::Ptr}, {"count", A::Size}, {"datatype", A::NcclDataType}, {"op", A::NcclRedOp}, {"comm", A::Handle}, {"stream", A::Stream}}},
  {"ncclBroadcast", NCCL, COLL, E::Collective, {{"sendbuff", A::Ptr}, {"recvbuff", A::Ptr}, {"count", A::Size}, {"datatype", A::NcclDataType}, {"root", A::Int}, {"comm", A::Handle}, {"stream", A::Stream}}},
  {"ncclReduce", NCCL, COLL, E::Collective, {{"sendbuff", A::Ptr}, {"recvbuff", A::Ptr}, {"count", A::Size}, {"datatype", A::NcclDataType}, {"op", A::NcclRedOp}, {"root", A::Int}, {"comm", A::Handle}, {"stream", A::Stream}}},
  {"ncclAllGather", NCCL, COLL, E::Collective, {{"sendbuff", A::Ptr}, {"recvbuff", A::Ptr}, {"sendcount", A::Size}, {"datatype", A::NcclDataType}, {"comm", A::Handle}, {"stream", A::Stream}}},
  {"ncclReduceScatter", NCCL, COLL, E::Collective, {{"sendbuff", A::Ptr}, {"recvbuff", A::Ptr}, {"recvcount", A::Size}, {"datatype", A::NcclDataType}, {"op", A::NcclRedOp}, {"comm", A::Handle}, {"stream", A::Stream}}},
  {"ncclAlltoAll", NCCL, COLL, E::Collective, {{"sendbuff", A::Ptr}, {"recvbuff", A::Ptr}, {"count", A::Size}, {"datatype", A::NcclDataType}, {"comm", A::Handle}, {"stream", A::Stream}}},
  {"ncclSend", NCCL, COLL, E::Collective, {{"sendbuff", A::Ptr}, {"count", A::Size}, {"datatype", A::NcclDataType}, {"peer", A::Int}, {"comm", A::Handle}, {"stream", A::Stream}}},
  {"ncclRecv", NCCL, COLL, E::Collective, {{"recvbuff", A::Ptr}, {"count", A::Size}, {"datatype", A::NcclDataType}, {"peer", A::Int}, {"comm", A::Handle}, {"stream", A::Stream}}},
  {"ncclGroupStart", NCCL, COLL, E::GroupStart, {}},
  {"ncclGroupEnd", NCCL, COLL, E::GroupEnd, {}},
};
// clang-format on

int out_size(ArgType t) {
  switch (t) {
    case A::OutInt:
    case A::OutFloat:
      return 4;
    default:
      return 8;
  }
}

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
      return true;
    default:
      // Kernel names; the range stacks; the NCCL model (communicator ids, sequence numbers, groups).
      return row.group == MODULE || row.group == NVTX || row.group == COLL;
  }
}

bool has_stack_struct(const Api& api) {
  for (const ArgSpec& a : api.spec->args)
    if (a.type == A::NcclUniqueId) return true;
  return false;
}

std::uint64_t make_cookie(const Api& api) {
  std::uint64_t c = api.id;
  int used_slots = 0;
  for (std::size_t i = 0; i < api.spec->args.size(); ++i)
    used_slots = std::max(used_slots, api.slots[i] + slot_count(api.spec->args[i].type));
  // A by-value ncclUniqueId takes slot CT_REG_ARGS for its address, not a stack word.
  const int stack_words = std::max(0, used_slots - CT_REG_ARGS - (has_stack_struct(api) ? 1 : 0));
  if (stack_words > CT_MAX_STACK_ARGS) throw std::logic_error(std::string("too many arguments: ") + api.symbol);
  c |= std::uint64_t(stack_words) << 16;
  for (int o = 0; o < 2; ++o) {
    if (api.out_index[o] < 0) continue;
    const ArgSpec& a = api.spec->args[api.out_index[o]];
    c |= std::uint64_t(api.slots[api.out_index[o]] + 1) << (20 + 8 * o);
    c |= std::uint64_t(out_size(a.type)) << (24 + 8 * o);
  }
  if (api.spec->returns == Returns::Void) c |= CT_COOKIE_VOID;
  if (api.layer() == NCCL) c |= CT_COOKIE_NCCL_STATUS;
  if (has_stack_struct(api)) c |= CT_COOKIE_STACK_ADDR;
  if (needs_detail_record(*api.spec)) c |= CT_COOKIE_DETAIL;
  if (api.group() == NVTX) c |= CT_COOKIE_ALWAYS;
  if (api.payload_index >= 0) {
    const ArgSpec& a = api.spec->args[api.payload_index];
    c |= std::uint64_t(api.slots[api.payload_index] + 1) << 36;
    if (a.type == A::NcclUniqueId || a.type == A::NcclUniqueIdPtr || a.type == A::NcclCommArray) {
      c |= std::uint64_t(CT_PAYLOAD_BYTES) << 40;
      c |= std::uint64_t(a.type == A::NcclCommArray ? kNcclMaxInitAllComms : kNcclUniqueIdBytes / 8) << 42;
    } else {
      const auto kind = a.type == A::String ? CT_PAYLOAD_STRING : CT_PAYLOAD_LAUNCH_CONFIG;
      c |= std::uint64_t(kind) << 40;
    }
  }
  return c;
}

Api make_api(std::uint16_t id, const ApiSpec& spec, std::string symbol, bool variant) {
  Api api{id, std::move(symbol), &spec, {}, {-1, -1}, -1, 0, variant};
  int slot = 0, outs = 0;
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    const ArgType t = spec.args[i].type;
    if (t == A::NcclUniqueId) {
      // Passed in memory: no register; ct_enter stores its address in slot CT_REG_ARGS
      // (CT_COOKIE_STACK_ADDR), and the payload reads the 128 bytes from there.
      if (api.payload_index >= 0) throw std::logic_error(std::string("two payloads: ") + spec.name);
      api.slots.push_back(CT_REG_ARGS);
      api.payload_index = static_cast<int>(i);
      continue;
    }
    api.slots.push_back(static_cast<std::uint8_t>(slot));
    slot += slot_count(t);
    if (is_out(t)) {
      if (outs == 2) throw std::logic_error(std::string("more than two out-params: ") + spec.name);
      api.out_index[outs++] = static_cast<int>(i);
    }
    if (t == A::String || t == A::LaunchConfig || t == A::NcclUniqueIdPtr || t == A::NcclCommArray) {
      if (api.payload_index >= 0) throw std::logic_error(std::string("two payloads: ") + spec.name);
      api.payload_index = static_cast<int>(i);
    }
  }
  // Register arguments must not reach the slot that holds a by-value struct's address.
  if (has_stack_struct(api) && slot > CT_REG_ARGS)
    throw std::logic_error(std::string("stack arguments after a by-value ncclUniqueId: ") + spec.name);
  api.cookie = make_cookie(api);
  return api;
}

// The name of the operation an API performs: without its _ptsz/_ptds form and
// its _vN version suffix (cuEventElapsedTime_v2 is cuEventElapsedTime).
std::string_view operation_name(const Api& api) {
  std::string_view name = api.spec->name;
  const auto v = name.rfind("_v");
  if (v != std::string_view::npos && v + 2 < name.size() &&
      name.find_first_not_of("0123456789", v + 2) == std::string_view::npos)
    name = name.substr(0, v);
  return name;
}

std::vector<Api> build_apis() {
  std::vector<Api> out;
  // Every row may also be exported in its per-thread-default-stream forms.
  static const char* const kVariantSuffixes[] = {"_ptsz", "_ptds"};
  for (const ApiSpec& row : kRows) {
    out.push_back(make_api(static_cast<std::uint16_t>(out.size()), row, row.name, false));
    if (row.group == MODULE || row.group == NVTX || row.layer == NCCL) continue;  // no per-thread stream forms
    for (const char* suffix : kVariantSuffixes)
      out.push_back(make_api(static_cast<std::uint16_t>(out.size()), row, std::string(row.name) + suffix, true));
  }
  if (out.size() > CT_MAX_APIS) throw std::logic_error("API table larger than CT_MAX_APIS");
  std::unordered_map<std::string_view, std::uint16_t> operations;
  for (Api& api : out) {
    const std::uint16_t op = operations.emplace(operation_name(api), api.id).first->second;
    api.cookie |= std::uint64_t(op) << CT_COOKIE_OP_SHIFT;
  }
  return out;
}

}  // namespace

bool is_async_operation(const Api& a) {
  if (a.layer() != RT && a.layer() != DRV) return false;
  const std::string_view name = a.spec->name;
  switch (a.effect()) {
    case E::Launch:
    case E::EventRecord:
    case E::StreamWaitEvent:
      return true;
    case E::Copy:
    case E::Memset:
      return name.find("Async") != std::string_view::npos;
    default:
      return false;
  }
}

bool recorded_at_driver(const Api& a) {
  if (a.layer() != RT || !is_async_operation(a)) return false;
  // The 2D and peer copies make driver calls the table has no row for.
  const std::string_view name = a.spec->name;
  return name != "cudaMemcpy2DAsync" && name != "cudaMemcpyPeerAsync";
}

bool is_hot_api(const Api& a) {
  if (a.group() == Group::Launch || a.group() == Group::Query) return true;
  const std::string_view name = a.spec->name;
  // Looked up before launches (cuBLAS, per launch): launch-rate in the
  // H200's launch-bound inference, the busiest probe the budget left exact.
  if (name == "cuKernelGetFunction") return true;
  // Asynchronous memsets are enqueued like launches (PyTorch's zero fills:
  // 12 per step of the H200's launch-bound inference, next to ~66 launches).
  return a.group() == Group::Xfer && name.find("Memset") != std::string_view::npos &&
         name.size() >= 5 && name.substr(name.size() - 5) == "Async";
}

bool is_out(ArgType t) { return t >= A::OutPtr; }

int slot_count(ArgType t) {
  switch (t) {
    case A::Dim3:
      return 2;
    case A::Dim3Split:
      return 3;
    default:
      return 1;
  }
}

const char* group_name(Group g) {
  static const char* const kNames[kGroupCount] = {"mem",    "xfer",   "launch", "stream", "event",
                                                  "device", "module", "query",  "nvtx",   "coll"};
  return kNames[static_cast<int>(g)];
}

bool group_on_by_default(Group g) { return g != MODULE && g != QUERY && g != NVTX; }

const char* group_description(Group g) {
  switch (g) {
    case MEM: return "allocations and frees, page-locked host memory";
    case XFER: return "copies and memsets";
    case LAUNCH: return "kernel and graph launches";
    case STREAM: return "stream creation, synchronisation, waits";
    case EVENT: return "events";
    case DEVICE: return "device selection and synchronisation, initialisation";
    case MODULE:
      return "kernel registration and lookups: always traced with launches for kernel names, printed only when "
             "asked for";
    case QUERY:
      return "cheap getters (current device and context, last error, capture state, attributes): off by default "
             "because frameworks call them dozens of times per launch (PyTorch: ~30 cudaGetDevice per kernel) and "
             "each probe hit costs about 1 us, more than the call itself";
    case NVTX:
      return "NVTX ranges through cudatrace's injection library: traced with --nvtx (docs/nvtx.md)";
    case COLL: return "NCCL collectives, point-to-point and communicator calls";
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

const std::vector<ApiSpec>& api_rows() { return kRows; }

const std::vector<Api>& apis() {
  static const std::vector<Api> kApis = build_apis();
  return kApis;
}

const Api* api_by_id(std::uint16_t id) { return id < apis().size() ? &apis()[id] : nullptr; }

const Api* api_by_symbol(std::string_view symbol) {
  static const auto kIndex = [] {
    std::unordered_map<std::string_view, const Api*> m;
    for (const Api& a : apis()) m.emplace(a.symbol, &a);
    return m;
  }();
  auto it = kIndex.find(symbol);
  return it == kIndex.end() ? nullptr : it->second;
}

}  // namespace cudatrace
