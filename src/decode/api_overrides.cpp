// What the toolkit's headers cannot say about an API (api_overrides.h): the
// rows written by hand, and the group and effect of every generated row.
#include "cudatrace/decode/api_overrides.h"

#include <iterator>
#include <string_view>
#include <unordered_set>

namespace cudatrace {
namespace {

using A = ArgType;
using E = Effect;
constexpr Layer RT = Layer::Runtime;
constexpr Layer DRV = Layer::Driver;
constexpr Layer NCCL = Layer::Nccl;
constexpr Group MEM = Group::Mem, XFER = Group::Xfer, LAUNCH = Group::Launch, STREAM = Group::Stream,
                EVENT = Group::Event, DEVICE = Group::Device, MODULE = Group::Module, QUERY = Group::Query,
                NVTX = Group::Nvtx, COLL = Group::Coll, INFO = Group::Info, ERROR = Group::Error,
                GRAPH = Group::Graph, OCCUPANCY = Group::Occupancy, TEXTURE = Group::Texture,
                INTEROP = Group::Interop, OTHER = Group::Other;
constexpr Layer NVTXL = Layer::Nvtx;

// clang-format off
// name, layer, group, effect, {arguments in order as {CUDA parameter name, type}}[, returns]
// A row a header declares must place its arguments in the same slots (ApiOverrides.HandRowsAgreeWithTheHeaders).
const std::vector<ApiSpec> kHandRows = {
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
  {"cudaStreamIsCapturing", RT, QUERY, E::None, {{"stream", A::Stream}, {"pCaptureStatus", A::OutEnum}}},
  // The last four out-pointers are not read: a row reads at most two.
  {"cudaStreamGetCaptureInfo", RT, QUERY, E::None, {{"stream", A::Stream}, {"captureStatus_out", A::OutEnum}, {"id_out", A::OutSize},
      {"graph_out", A::Ptr}, {"dependencies_out", A::Ptr}, {"edgeData_out", A::Ptr}, {"numDependencies_out", A::Ptr}}},
  {"cudaDeviceGetAttribute", RT, QUERY, E::None, {{"value", A::OutInt}, {"attr", A::Enum}, {"device", A::Int}}},
  {"cudaFuncGetAttributes", RT, QUERY, E::None, {{"attr", A::Ptr}, {"func", A::Func}}},
  {"cudaPointerGetAttributes", RT, QUERY, E::None, {{"attributes", A::Ptr}, {"ptr", A::Ptr}}},
  // ---- Runtime: kernel registration, for kernel names
  {"__cudaRegisterFunction", RT, MODULE, E::None, {{"fatCubinHandle", A::Handle}, {"hostFun", A::Func}, {"deviceFun", A::String}}, Returns::Void},
  {"__cudaGetKernel", RT, MODULE, E::None, {{"kernel", A::OutFunc}, {"hostFun", A::Func}}},
  {"cudaGetKernel", RT, MODULE, E::None, {{"kernelPtr", A::OutFunc}, {"entryFuncAddr", A::Func}}},
  {"cudaLibraryGetKernel", RT, MODULE, E::None, {{"pKernel", A::OutFunc}, {"library", A::Handle}, {"name", A::String}}},
  // ---- Runtime: what nvcc's generated code calls to register a module's code and variables, and to
  // pass a <<<>>> launch's configuration to the kernel's stub (crt/host_runtime.h, crt/device_functions.h).
  // They name no kernel, so they are not traced with launches (names_kernels). Not __cudaLaunchKernel
  // and __cudaLaunchKernel_ptsz: each is a bare `jmp cudaLaunchKernel(_ptsz)` (tests/fixtures/real_app.cu),
  // so a row of theirs would count every such launch twice.
  {"__cudaRegisterFatBinary", RT, MODULE, E::None, {{"fatCubin", A::Ptr}}, Returns::Value},
  {"__cudaRegisterFatBinaryEnd", RT, MODULE, E::None, {{"fatCubinHandle", A::Handle}}, Returns::Void},
  {"__cudaUnregisterFatBinary", RT, MODULE, E::None, {{"fatCubinHandle", A::Handle}}, Returns::Void},
  {"__cudaInitModule", RT, MODULE, E::None, {{"fatCubinHandle", A::Handle}}, Returns::Value},
  {"__cudaRegisterVar", RT, MODULE, E::None, {{"fatCubinHandle", A::Handle}, {"hostVar", A::Ptr}, {"deviceAddress", A::Ptr},
      {"deviceName", A::String}, {"ext", A::Int}, {"size", A::Size}, {"constant", A::Int}, {"global", A::Int}}, Returns::Void},
  {"__cudaRegisterManagedVar", RT, MODULE, E::None, {{"fatCubinHandle", A::Handle}, {"hostVarPtrAddress", A::Ptr},
      {"deviceAddress", A::Ptr}, {"deviceName", A::String}, {"ext", A::Int}, {"size", A::Size}, {"constant", A::Int},
      {"global", A::Int}}, Returns::Void},
  // No header declares these two; their code passes on four and five integer arguments.
  {"__cudaRegisterHostVar", RT, MODULE, E::None, {{"fatCubinHandle", A::Handle}, {"deviceName", A::String},
      {"hostVar", A::Ptr}, {"size", A::Size}}, Returns::Void},
  {"__cudaRegisterUnifiedTable", RT, MODULE, E::None, {{"fatCubinHandle", A::Handle}, {"functionTable", A::Ptr},
      {"functionWindowSize", A::Size}, {"dataTable", A::Ptr}, {"dataWindowSize", A::Size}}, Returns::Void},
  // Called per <<<>>> launch: a push by the caller, a pop in the kernel's stub. The popped stream is read.
  {"__cudaPushCallConfiguration", RT, MODULE, E::None, {{"gridDim", A::Dim3}, {"blockDim", A::Dim3},
      {"sharedMem", A::Size}, {"stream", A::Stream}}, Returns::Value},
  {"__cudaPopCallConfiguration", RT, MODULE, E::None, {{"gridDim", A::Ptr}, {"blockDim", A::Ptr},
      {"sharedMem", A::OutSize}, {"stream", A::OutStream}}},
  // A stub that reads no argument and returns 0 (`xor eax,eax; ret`); CUPTI reports it, so it has a row.
  {"__cudaGetProcAddress", RT, INFO, E::None, {}, Returns::Value},

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
  // ---- Graph kernel nodes: the kernel is read from the params struct at return (docs/graphs.md).
  {"cudaGraphAddKernelNode", RT, GRAPH, E::GraphAddKernel, {{"pGraphNode", A::OutHandle}, {"graph", A::Handle},
      {"pDependencies", A::Ptr}, {"numDependencies", A::Size}, {"pNodeParams", A::KernelNodeParams}}},
  {"cuGraphAddKernelNode", DRV, GRAPH, E::GraphAddKernel, {{"phGraphNode", A::OutHandle}, {"hGraph", A::Handle},
      {"dependencies", A::Ptr}, {"numDependencies", A::Size}, {"nodeParams", A::KernelNodeParams}}},
  {"cuGraphAddKernelNode_v2", DRV, GRAPH, E::GraphAddKernel, {{"phGraphNode", A::OutHandle}, {"hGraph", A::Handle},
      {"dependencies", A::Ptr}, {"numDependencies", A::Size}, {"nodeParams", A::KernelNodeParams}}},
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
  {"cuCtxSynchronize_v2", DRV, DEVICE, E::DeviceSync, {{"ctx", A::Handle}}},  // what CUDA 13 runtimes call
  // A setter, but XLA calls it ~60 times per step (docs/apis.md): a query by cost.
  {"cuCtxSetCurrent", DRV, QUERY, E::None, {{"ctx", A::Handle}}},
  {"cuDevicePrimaryCtxRetain", DRV, DEVICE, E::None, {{"pctx", A::OutHandle}, {"dev", A::Int}}},
  // ---- Driver: high-frequency queries (off by default)
  {"cuCtxGetCurrent", DRV, QUERY, E::None, {{"pctx", A::OutHandle}}},
  {"cuCtxGetDevice", DRV, QUERY, E::None, {{"device", A::OutInt}}},
  {"cuCtxGetDevice_v2", DRV, QUERY, E::None, {{"device", A::OutInt}, {"ctx", A::Handle}}},
  {"cuStreamIsCapturing", DRV, QUERY, E::None, {{"hStream", A::Stream}, {"captureStatus", A::OutEnum}}},
  // What cuStreamGetCaptureInfo means with CUDA 13 headers; the last four out-pointers are not read.
  {"cuStreamGetCaptureInfo_v3", DRV, QUERY, E::None, {{"hStream", A::Stream}, {"captureStatus_out", A::OutEnum}, {"id_out", A::OutSize},
      {"graph_out", A::Ptr}, {"dependencies_out", A::Ptr}, {"edgeData_out", A::Ptr}, {"numDependencies_out", A::Ptr}}},
  {"cuDeviceGetAttribute", DRV, QUERY, E::None, {{"pi", A::OutInt}, {"attrib", A::Enum}, {"dev", A::Int}}},
  {"cuFuncGetAttribute", DRV, QUERY, E::None, {{"pi", A::OutInt}, {"attrib", A::Enum}, {"hfunc", A::Func}}},
  {"cuKernelGetAttribute", DRV, QUERY, E::None, {{"pi", A::OutInt}, {"attrib", A::Enum}, {"kernel", A::Func}, {"dev", A::Int}}},
  {"cuPointerGetAttribute", DRV, QUERY, E::None, {{"data", A::Ptr}, {"attribute", A::Enum}, {"ptr", A::Ptr}}},
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

// Where a generated row goes, by its operation name: the first pattern that
// matches ("name", "prefix*", "*infix*"). Rows of the default groups are
// traced without -f: only what programs call rarely, or what an analysis
// reads, goes there; getters that frameworks call at launch rate do not.
struct Rule {
  const char* pattern;
  Group group;
  Effect effect = E::None;
};
// clang-format off
const Rule kRules[] = {
  // ---- Stream work the stream model knows (issue 28): a host function runs when the work before it is done.
  {"cudaLaunchHostFunc", LAUNCH, E::HostFunc}, {"cuLaunchHostFunc", LAUNCH, E::HostFunc},
  {"cudaStreamAddCallback", LAUNCH, E::HostFunc}, {"cuStreamAddCallback", LAUNCH, E::HostFunc},
  // ---- Free and total device memory, for the memory report; allocators call it rarely.
  {"cudaMemGetInfo", MEM, E::MemInfo}, {"cuMemGetInfo", MEM, E::MemInfo},
  // ---- Modules and libraries coming and going: kernel handles die with them (kernel_names.cpp).
  {"cuModuleLoad*", MODULE, E::ModuleLoad}, {"cuLibraryLoad*", MODULE, E::ModuleLoad},
  {"cudaLibraryLoad*", MODULE, E::ModuleLoad},
  {"cuModuleUnload", MODULE, E::ModuleUnload}, {"cuLibraryUnload", MODULE, E::ModuleUnload},
  {"cudaLibraryUnload", MODULE, E::ModuleUnload},
  // ---- Error strings: called after every failed call by some frameworks (CUPTI: 3,488 in one GPT-2 run).
  {"cuGetError*", ERROR}, {"cudaGetError*", ERROR},
  {"cuOccupancy*", OCCUPANCY}, {"cudaOccupancy*", OCCUPANCY},
  // ---- Capture state, stream properties and context switches: called per operation by frameworks.
  {"cuStreamGet*", QUERY}, {"cudaStreamGet*", QUERY}, {"cuCtxPushCurrent", QUERY}, {"cuCtxPopCurrent", QUERY},
  // ---- Graphics interoperability, external memory and semaphores (before graphs: cuGraphics* is not cuGraph*).
  {"cuGraphics*", INTEROP}, {"cudaGraphics*", INTEROP}, {"*External*", INTEROP},
  {"cuGL*", INTEROP}, {"cudaGL*", INTEROP}, {"cuEGL*", INTEROP}, {"cudaEGL*", INTEROP}, {"cuVDPAU*", INTEROP},
  {"cudaVDPAU*", INTEROP}, {"*FromEGLSync", INTEROP},
  // ---- Graphs and stream capture (their launch is in launch). The calls the stream model reads to
  // know what a graph launch runs are traced with launches (Selection::graph_model).
  {"cudaStreamBeginCapture*", GRAPH, E::CaptureBegin}, {"cuStreamBeginCapture*", GRAPH, E::CaptureBegin},
  {"cudaStreamEndCapture", GRAPH, E::CaptureEnd}, {"cuStreamEndCapture", GRAPH, E::CaptureEnd},
  {"cudaGraphInstantiate*", GRAPH, E::GraphInstantiate}, {"cuGraphInstantiate*", GRAPH, E::GraphInstantiate},
  {"cudaGraphExecDestroy", GRAPH, E::GraphExecDestroy}, {"cuGraphExecDestroy", GRAPH, E::GraphExecDestroy},
  {"cudaGraphDestroy", GRAPH, E::GraphDestroy}, {"cuGraphDestroy", GRAPH, E::GraphDestroy},
  {"cudaGraphCreate", GRAPH, E::GraphCreate}, {"cuGraphCreate", GRAPH, E::GraphCreate},
  {"cudaGraphAddDependencies", GRAPH}, {"cuGraphAddDependencies", GRAPH},
  {"cudaGraphAdd*", GRAPH, E::GraphAddNode}, {"cuGraphAdd*", GRAPH, E::GraphAddNode},
  {"cuGraph*", GRAPH}, {"cudaGraph*", GRAPH}, {"*Capture*", GRAPH}, {"cuUserObject*", GRAPH},
  {"cudaUserObject*", GRAPH},
  // ---- CUDA arrays, textures and surfaces.
  {"cuTex*", TEXTURE}, {"cuSurf*", TEXTURE}, {"cuArray*", TEXTURE}, {"cuMipmappedArray*", TEXTURE},
  {"cudaArray*", TEXTURE}, {"*TextureObject*", TEXTURE}, {"*SurfaceObject*", TEXTURE},
  {"cudaMallocArray", TEXTURE}, {"cudaMalloc3DArray", TEXTURE}, {"cudaMallocMipmappedArray", TEXTURE},
  {"cudaFreeArray", TEXTURE}, {"cudaFreeMipmappedArray", TEXTURE}, {"cudaGetMipmappedArrayLevel", TEXTURE},
  {"*ChannelDesc", TEXTURE},
  // ---- Inter-process handles.
  {"cuIpc*", MEM}, {"cudaIpc*", MEM},
  // ---- Versions, properties, attributes, limits and configuration: getters frameworks call
  // at launch rate (CUPTI, one GPT-2 run: cuDevicePrimaryCtxGetState 26,851, cuGetProcAddress_v2
  // 1,797, cuKernelSetAttribute 778, cuDriverGetVersion 773, cuCtxGetLimit 769).
  {"*Get*", INFO}, {"*SetAttribute*", INFO}, {"*SetCacheConfig", INFO}, {"*SetLimit", INFO},
  {"*SetSharedMemConfig", INFO}, {"cuDeviceComputeCapability", INFO}, {"cuDeviceTotalMem", INFO},
  {"*CanAccessPeer", INFO}, {"cudaChooseDevice", INFO}, {"cuFuncSet*", INFO}, {"cudaFuncSet*", INFO},
  {"cuKernelSet*", INFO}, {"cudaKernelSet*", INFO}, {"cuModule*", INFO}, {"cuLibrary*", INFO},
  {"cudaLibrary*", INFO}, {"cuKernel*", INFO},
  // ---- The groups of the hand-written rows, for the rest of each family.
  {"cuMemcpy*", XFER}, {"cudaMemcpy*", XFER}, {"cuMemset*", XFER}, {"cudaMemset*", XFER},
  {"cuMem*", MEM}, {"cudaMalloc*", MEM}, {"cudaFree*", MEM}, {"cudaMem*", MEM}, {"cudaHost*", MEM},
  {"cuMulticast*", MEM}, {"cuPointer*", MEM},
  {"cuStream*", STREAM}, {"cudaStream*", STREAM},
  {"cuEvent*", EVENT}, {"cudaEvent*", EVENT},
  {"cuLaunch*", LAUNCH}, {"cudaLaunch*", LAUNCH},
  {"cuCtx*", DEVICE}, {"cuDevice*", DEVICE}, {"cudaDevice*", DEVICE}, {"cudaSetDevice*", DEVICE},
  {"cudaInitDevice", DEVICE}, {"cudaThread*", DEVICE},
};
// clang-format on

bool matches(std::string_view pattern, std::string_view name) {
  const bool prefix = !pattern.empty() && pattern.back() == '*';
  const bool infix = !pattern.empty() && pattern.front() == '*';
  if (prefix) pattern.remove_suffix(1);
  if (infix) pattern.remove_prefix(1);
  if (prefix && infix) return name.find(pattern) != std::string_view::npos;
  if (prefix) return name.substr(0, pattern.size()) == pattern;
  if (infix) return name.size() >= pattern.size() && name.substr(name.size() - pattern.size()) == pattern;
  return name == pattern;
}

}  // namespace

const std::vector<ApiSpec>& hand_rows() { return kHandRows; }

bool is_core_api(const Api& a) {
  static const std::unordered_set<std::string_view> kByHand = [] {
    std::unordered_set<std::string_view> names;
    for (const ApiSpec& r : kHandRows) names.insert(r.name);
    return names;
  }();
  // Graph calls come and go between toolkit versions (cudaGraphInstantiateWithParams is 12.0's): not core.
  return a.group() != GRAPH && (a.effect() != E::None || kByHand.count(a.spec->name));
}

Placement placement(std::string_view operation) {
  for (const Rule& r : kRules)
    if (matches(r.pattern, operation)) return {r.group, r.effect};
  // Checkpointing, logs, green contexts, tensor maps, profiler control, ...
  return {OTHER, E::None};
}

}  // namespace cudatrace
