// What the toolkit's headers cannot say about an API (api_overrides.h): the
// rows written by hand, and the group and effect of every generated row.
#include "cudatrace/decode/api_overrides.h"

#include <iterator>
#include <string_view>

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
// A row a header declares must place its arguments in the same slots (ApiOverrides.HandRowsAgreeWithTheHeaders),
// and is written here only to decode what the header's C types do not say; its group and effect are its own.
const std::vector<ApiSpec> kHandRows = {
  // ---- The argument the analyses find a copy's kind by (MemcpyKind: the header's enum, with that role).
  {"cudaMemcpy", RT, XFER, E::Copy, {{"dst", A::Ptr}, {"src", A::Ptr}, {"count", A::Size}, {"kind", A::MemcpyKind}}},
  {"cudaMemcpyAsync", RT, XFER, E::Copy, {{"dst", A::Ptr}, {"src", A::Ptr}, {"count", A::Size}, {"kind", A::MemcpyKind}, {"stream", A::Stream}}},
  {"cudaMemcpy2D", RT, XFER, E::Copy, {{"dst", A::Ptr}, {"dpitch", A::Size}, {"src", A::Ptr}, {"spitch", A::Size}, {"width", A::Size}, {"height", A::Size}, {"kind", A::MemcpyKind}}},
  {"cudaMemcpy2DAsync", RT, XFER, E::Copy, {{"dst", A::Ptr}, {"dpitch", A::Size}, {"src", A::Ptr}, {"spitch", A::Size}, {"width", A::Size}, {"height", A::Size}, {"kind", A::MemcpyKind}, {"stream", A::Stream}}},
  // ---- Kernels given as a host stub (`const void*` to the header), launch configurations read at return,
  // the driver's three grid and block arguments as one dim3 (and `void** extra`, an array, not an out-parameter).
  {"cudaLaunchKernel", RT, LAUNCH, E::Launch, {{"func", A::Func}, {"grid", A::Dim3}, {"block", A::Dim3}, {"args", A::Ptr}, {"sharedMem", A::Size}, {"stream", A::Stream}}},
  {"cudaLaunchKernelExC", RT, LAUNCH, E::Launch, {{"config", A::LaunchConfig}, {"func", A::Func}, {"args", A::Ptr}}},
  {"cudaLaunchCooperativeKernel", RT, LAUNCH, E::Launch, {{"func", A::Func}, {"grid", A::Dim3}, {"block", A::Dim3}, {"args", A::Ptr}, {"sharedMem", A::Size}, {"stream", A::Stream}}},
  {"cuLaunchKernel", DRV, LAUNCH, E::Launch, {{"f", A::Func}, {"grid", A::Dim3Split}, {"block", A::Dim3Split}, {"sharedMemBytes", A::UInt}, {"hStream", A::Stream}, {"kernelParams", A::Ptr}, {"extra", A::Ptr}}},
  {"cuLaunchKernelEx", DRV, LAUNCH, E::Launch, {{"config", A::LaunchConfig}, {"f", A::Func}, {"kernelParams", A::Ptr}, {"extra", A::Ptr}}},
  {"cuLaunchCooperativeKernel", DRV, LAUNCH, E::Launch, {{"f", A::Func}, {"grid", A::Dim3Split}, {"block", A::Dim3Split}, {"sharedMemBytes", A::UInt}, {"hStream", A::Stream}, {"kernelParams", A::Ptr}}},
  {"cudaFuncGetAttributes", RT, QUERY, E::None, {{"attr", A::Ptr}, {"func", A::Func}}},
  {"cudaGetKernel", RT, MODULE, E::None, {{"kernelPtr", A::OutFunc}, {"entryFuncAddr", A::Func}}},
  // ---- Graph kernel nodes: the kernel is read from the params struct at return (docs/graphs.md).
  {"cudaGraphAddKernelNode", RT, GRAPH, E::GraphAddKernel, {{"pGraphNode", A::OutHandle}, {"graph", A::Handle},
      {"pDependencies", A::Ptr}, {"numDependencies", A::Size}, {"pNodeParams", A::KernelNodeParams}}},
  {"cuGraphAddKernelNode", DRV, GRAPH, E::GraphAddKernel, {{"phGraphNode", A::OutHandle}, {"hGraph", A::Handle},
      {"dependencies", A::Ptr}, {"numDependencies", A::Size}, {"nodeParams", A::KernelNodeParams}}},
  // Its struct adds kern and ctx: 72 bytes, where the others' are 56 (reading past a struct could fault).
  {"cuGraphAddKernelNode_v2", DRV, GRAPH, E::GraphAddKernel, {{"phGraphNode", A::OutHandle}, {"hGraph", A::Handle},
      {"dependencies", A::Ptr}, {"numDependencies", A::Size},
      {"nodeParams", A::KernelNodeParams, nullptr, nullptr, kKernelNodeParamsV2Bytes / 8}}},
  // ---- A float* out-parameter whose name reads as an array to the generator (ms, pMilliseconds).
  {"cudaEventElapsedTime", RT, EVENT, E::None, {{"ms", A::OutFloat}, {"start", A::Event}, {"end", A::Event}}},
  {"cuEventElapsedTime", DRV, EVENT, E::None, {{"pMilliseconds", A::OutFloat}, {"hStart", A::Event}, {"hEnd", A::Event}}},
  {"cuEventElapsedTime_v2", DRV, EVENT, E::None, {{"pMilliseconds", A::OutFloat}, {"hStart", A::Event}, {"hEnd", A::Event}}},
  // ---- Allocation handles (CUmemGenericAllocationHandle: an unsigned long long to the header) in hex.
  {"cuMemCreate", DRV, MEM, E::AllocDevice, {{"handle", A::OutHandle}, {"size", A::Size}, {"prop", A::Ptr}, {"flags", A::Flags}}},
  {"cuMemMap", DRV, MEM, E::None, {{"ptr", A::Ptr}, {"size", A::Size}, {"offset", A::Size}, {"handle", A::Handle}, {"flags", A::Flags}}},
  {"cuMemRelease", DRV, MEM, E::Free, {{"handle", A::Handle}}},
  // ---- An array of attribute values, not an out-parameter.
  {"cuPointerGetAttributes", DRV, QUERY, E::None, {{"numAttributes", A::UInt}, {"attributes", A::Ptr}, {"data", A::Ptr}, {"ptr", A::Ptr}}},
  // ---- The argument name traces have had (the header's is hStream): `report` reads old traces by it.
  {"cudaMallocAsync", RT, MEM, E::AllocDevice, {{"devPtr", A::OutPtr}, {"size", A::Size}, {"stream", A::Stream}}},
  {"cudaFreeAsync", RT, MEM, E::Free, {{"devPtr", A::Ptr}, {"stream", A::Stream}}},

  // ---- Runtime: kernel registration, for kernel names (no header declares these)
  {"__cudaRegisterFunction", RT, MODULE, E::None, {{"fatCubinHandle", A::Handle}, {"hostFun", A::Func}, {"deviceFun", A::String}}, Returns::Void},
  {"__cudaGetKernel", RT, MODULE, E::None, {{"kernel", A::OutFunc}, {"hostFun", A::Func}}},
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

  // ---- NVTX, with --nvtx: each row is a family of NVTX calls (nvtxRangePush: A, W, Ex and the domain form),
  // probed at its function in cudatrace's injection library (probe_symbol, src/target/nvtx_inject.c).
  {"nvtxRangePush", NVTXL, NVTX, E::NvtxPush, {{"message", A::String}, {"domain", A::Handle}}, Returns::Void},
  {"nvtxRangePop", NVTXL, NVTX, E::NvtxPop, {{"domain", A::Handle}}, Returns::Void},
  {"nvtxRangeStart", NVTXL, NVTX, E::NvtxStart, {{"message", A::String}, {"domain", A::Handle}, {"id", A::Size}}, Returns::Void},
  {"nvtxRangeEnd", NVTXL, NVTX, E::NvtxEnd, {{"id", A::Size}}, Returns::Void},
  {"nvtxMark", NVTXL, NVTX, E::NvtxMark, {{"message", A::String}, {"domain", A::Handle}}, Returns::Void},
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

// Where a generated row goes, by its name or its operation name (the name
// without its _vN suffix): the first pattern that matches ("name",
// "prefix*", "*suffix", "*infix*"). Rows of the default groups are traced
// without -f: only what programs call rarely, or what an analysis reads,
// goes there; getters that frameworks call at launch rate do not.
struct Rule {
  const char* pattern;
  Group group;
  Effect effect = E::None;
  bool core = false;  // what cudatrace counts on every library of its layer to export (is_core_api)
};
constexpr bool kCore = true;
// clang-format off
const Rule kRules[] = {
  // ---- What the analyses read: allocations, copies, launches, stream and event work, and the calls
  // cudatrace counts on finding (kCore). A name with its version (cuMemAlloc_v2) is that symbol only,
  // not the older versions libcuda also exports.
  {"cudaMalloc", MEM, E::AllocDevice}, {"cudaFree", MEM, E::Free}, {"cudaMallocHost", MEM, E::AllocHost},
  {"cudaFreeHost", MEM, E::FreeHost}, {"cudaHostAlloc", MEM, E::AllocHost}, {"cudaHostRegister", MEM, E::RegisterHost},
  {"cudaHostUnregister", MEM, E::UnregisterHost}, {"cudaMallocManaged", MEM, E::AllocManaged},
  {"cudaMallocPitch", MEM, E::AllocDevice},
  {"cuMemAlloc_v2", MEM, E::AllocDevice}, {"cuMemFree_v2", MEM, E::Free}, {"cuMemAllocHost_v2", MEM, E::AllocHost},
  {"cuMemFreeHost", MEM, E::FreeHost}, {"cuMemHostAlloc", MEM, E::AllocHost},
  {"cuMemHostRegister_v2", MEM, E::RegisterHost}, {"cuMemAllocManaged", MEM, E::AllocManaged},
  {"cuMemAllocPitch_v2", MEM, E::AllocDevice}, {"cuMemAllocAsync", MEM, E::AllocDevice},
  {"cuMemFreeAsync", MEM, E::Free}, {"cuMemUnmap", MEM, E::None, kCore}, {"cuMemAddressReserve", MEM, E::None, kCore},
  {"cudaMemcpyPeer", XFER, E::Copy}, {"cudaMemcpyPeerAsync", XFER, E::Copy}, {"cudaMemset", XFER, E::Memset},
  {"cudaMemsetAsync", XFER, E::Memset},
  {"cuMemcpy", XFER, E::Copy}, {"cuMemcpyAsync", XFER, E::Copy}, {"cuMemcpyHtoD_v2", XFER, E::Copy},
  {"cuMemcpyDtoH_v2", XFER, E::Copy}, {"cuMemcpyDtoD_v2", XFER, E::Copy}, {"cuMemcpyHtoDAsync_v2", XFER, E::Copy},
  {"cuMemcpyDtoHAsync_v2", XFER, E::Copy}, {"cuMemcpyDtoDAsync_v2", XFER, E::Copy},
  {"cuMemsetD8_v2", XFER, E::Memset}, {"cuMemsetD32_v2", XFER, E::Memset}, {"cuMemsetD8Async", XFER, E::Memset},
  {"cuMemsetD32Async", XFER, E::Memset},
  {"cudaGraphLaunch", LAUNCH, E::Launch}, {"cuGraphLaunch", LAUNCH, E::Launch},
  {"cudaStreamCreate", STREAM, E::StreamCreate}, {"cudaStreamCreateWithFlags", STREAM, E::StreamCreate},
  {"cudaStreamCreateWithPriority", STREAM, E::StreamCreate}, {"cudaStreamDestroy", STREAM, E::StreamDestroy},
  {"cudaStreamSynchronize", STREAM, E::StreamSync}, {"cudaStreamQuery", STREAM, E::StreamQuery},
  {"cudaStreamWaitEvent", STREAM, E::StreamWaitEvent},
  {"cuStreamCreate", STREAM, E::StreamCreate}, {"cuStreamCreateWithPriority", STREAM, E::StreamCreate},
  {"cuStreamDestroy_v2", STREAM, E::StreamDestroy}, {"cuStreamSynchronize", STREAM, E::StreamSync},
  {"cuStreamQuery", STREAM, E::StreamQuery}, {"cuStreamWaitEvent", STREAM, E::StreamWaitEvent},
  {"cudaEventCreate", EVENT, E::EventCreate}, {"cudaEventCreateWithFlags", EVENT, E::EventCreate},
  {"cudaEventRecord", EVENT, E::EventRecord}, {"cudaEventRecordWithFlags", EVENT, E::EventRecord},
  {"cudaEventSynchronize", EVENT, E::EventSync}, {"cudaEventQuery", EVENT, E::EventQuery},
  {"cudaEventDestroy", EVENT, E::EventDestroy},
  {"cuEventCreate", EVENT, E::EventCreate}, {"cuEventRecord", EVENT, E::EventRecord},
  {"cuEventRecordWithFlags", EVENT, E::EventRecord}, {"cuEventSynchronize", EVENT, E::EventSync},
  {"cuEventQuery", EVENT, E::EventQuery}, {"cuEventDestroy_v2", EVENT, E::EventDestroy},
  {"cudaSetDevice", DEVICE, E::SetDevice}, {"cudaGetDeviceCount", DEVICE, E::None, kCore},
  {"cudaDeviceSynchronize", DEVICE, E::DeviceSync}, {"cudaDeviceReset", DEVICE, E::None, kCore},
  {"cuInit", DEVICE, E::None, kCore}, {"cuCtxSynchronize", DEVICE, E::DeviceSync},  // _v2: what CUDA 13 runtimes call
  {"cuDevicePrimaryCtxRetain", DEVICE, E::None, kCore},
  // ---- Kernel lookups, for kernel names.
  {"cudaLibraryGetKernel", MODULE, E::None, kCore}, {"cuModuleGetFunction", MODULE, E::None, kCore},
  {"cuLibraryGetKernel", MODULE, E::None, kCore}, {"cuKernelGetFunction", MODULE, E::None, kCore},
  // ---- High-frequency queries (off by default: PyTorch calls cudaGetDevice ~30 times per launch, and each
  // probe hit costs ~1 us). cuCtxSetCurrent is a setter, but XLA calls it ~60 times per step: a query by cost.
  {"cudaGetDevice", QUERY, E::None, kCore}, {"cudaGetLastError", QUERY, E::None, kCore},
  {"cudaPeekAtLastError", QUERY, E::None, kCore}, {"cudaStreamIsCapturing", QUERY, E::None, kCore},
  {"cudaStreamGetCaptureInfo", QUERY, E::None, kCore}, {"cudaDeviceGetAttribute", QUERY, E::None, kCore},
  {"cudaPointerGetAttributes", QUERY, E::None, kCore},
  {"cuCtxSetCurrent", QUERY, E::None, kCore}, {"cuCtxGetCurrent", QUERY, E::None, kCore},
  {"cuCtxGetDevice", QUERY, E::None, kCore}, {"cuStreamIsCapturing", QUERY, E::None, kCore},
  {"cuStreamGetCaptureInfo_v3", QUERY, E::None, kCore},  // what cuStreamGetCaptureInfo means with CUDA 13 headers
  {"cuDeviceGetAttribute", QUERY, E::None, kCore}, {"cuFuncGetAttribute", QUERY, E::None, kCore},
  {"cuKernelGetAttribute", QUERY, E::None, kCore}, {"cuPointerGetAttribute", QUERY, E::None, kCore},
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
  // Graph calls come and go between toolkit versions (cudaGraphInstantiateWithParams is 12.0's): not core.
  return a.group() != GRAPH && (a.effect() != E::None || a.spec->core);
}

Placement placement(std::string_view name, std::string_view operation) {
  for (const Rule& r : kRules)
    if (matches(r.pattern, name) || matches(r.pattern, operation)) return {r.group, r.effect, r.core};
  // Checkpointing, logs, green contexts, tensor maps, profiler control, ...
  return {OTHER, E::None, false};
}

}  // namespace cudatrace
