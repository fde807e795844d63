#include "cudatrace/cli/api_docs.h"

#include <fmt/format.h>

#include "cudatrace/render/json.h"

namespace cudatrace {
namespace {

const char* type_name(ArgType t) {
  switch (t) {
    case ArgType::Size: return "size";
    case ArgType::Int: return "int";
    case ArgType::UInt: return "uint";
    case ArgType::Flags: return "flags";
    case ArgType::Ptr: return "ptr";
    case ArgType::MemcpyKind: return "cudaMemcpyKind";
    case ArgType::Stream: return "stream";
    case ArgType::Event: return "event";
    case ArgType::Handle: return "handle";
    case ArgType::Func: return "kernel";
    case ArgType::Dim3: return "dim3";
    case ArgType::Dim3Split: return "dim3";
    case ArgType::String: return "string";
    case ArgType::LaunchConfig: return "launch config";
    case ArgType::NcclDataType: return "ncclDataType_t";
    case ArgType::NcclRedOp: return "ncclRedOp_t";
    case ArgType::NcclUniqueId: return "ncclUniqueId (by value)";
    case ArgType::NcclUniqueIdPtr: return "ncclUniqueId* (read at return)";
    case ArgType::NcclCommArray: return "out comm array";
    case ArgType::OutPtr: return "out ptr";
    case ArgType::OutSize: return "out size";
    case ArgType::OutInt: return "out int";
    case ArgType::OutFloat: return "out float";
    case ArgType::OutStream: return "out stream";
    case ArgType::OutEvent: return "out event";
    case ArgType::OutHandle: return "out handle";
    case ArgType::OutFunc: return "out kernel";
  }
  return "?";
}

}  // namespace

const char* recording(const Api& a, ProbePlan plan) {
  if (plan.ops_at_driver_only && recorded_at_driver(a)) return "by its driver call";
  // (In a forwarding stub's file the return is probed too: Probes::planned_cookie.)
  if (plan.ops_at_entry && is_async_operation(a)) return "at entry";
  return "entry and return";
}

std::string api_list_markdown(const Selection& selection, ProbePlan plan) {
  fmt::memory_buffer out;
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "| API | layer | group | recorded | arguments (CUDA names; `out` = read at return) |\n"
                 "| --- | --- | --- | --- | --- |\n");
  for (const Api& a : apis()) {
    if (a.variant || !selection.wants(a)) continue;
    std::string args;
    for (const ArgSpec& arg : a.spec->args)
      args += fmt::format("{}{} ({})", args.empty() ? "" : ", ", arg.name, type_name(arg.type));
    fmt::format_to(it, "| `{}` | {} | {} | {} | {} |\n", a.symbol, layer_name(a.layer()), group_name(a.group()),
                   recording(a, plan), args.empty() ? "none" : args);
  }
  fmt::format_to(it,
                 "\nEvery API is also probed in its `_ptsz` and `_ptds` (per-thread default stream) forms where a "
                 "library exports them, except the module and nvtx groups and NCCL.\n");
  fmt::format_to(it,
                 "\n| group | traced by default | what, and why |\n"
                 "| --- | --- | --- |\n");
  for (int g = 0; g < kGroupCount; ++g) {  // every group, listed or not: the table says how to get the others
    const auto group = static_cast<Group>(g);
    fmt::format_to(it, "| {} | {} | {} |\n", group_name(group), group_on_by_default(group) ? "yes" : "no",
                   group_description(group));
  }
  fmt::format_to(it,
                 "\n`-f all` selects every group. \"recorded\": how a call is recorded by default. An asynchronous "
                 "operation (launch, async copy or memset, event record, stream wait) is recorded once, at its entry "
                 "(one trap; no latency or status), and a runtime one that calls a driver one in this table is left "
                 "unprobed: the driver call records it. `--every-layer` records each at every layer with its return; "
                 "`--errors`, `--min-us` and `--stack` probe the returns too.\n");
  return fmt::to_string(out);
}

std::string api_list_json(const Selection& selection, ProbePlan plan) {
  fmt::memory_buffer out;
  auto it = std::back_inserter(out);
  for (const Api& a : apis()) {
    if (!selection.wants(a)) continue;
    fmt::format_to(it, "{{\"api\":\"{}\",\"layer\":\"{}\",\"group\":\"{}\",\"variant\":{},\"probed\":{},\"recorded\":\"{}\",\"args\":[",
                   a.symbol, layer_name(a.layer()), group_name(a.group()), a.variant,
                   !(plan.ops_at_driver_only && recorded_at_driver(a)), recording(a, plan));
    bool first = true;
    for (const ArgSpec& arg : a.spec->args) {
      fmt::format_to(it, "{}{{\"name\":\"{}\",\"type\":\"{}\"}}", first ? "" : ",", arg.name, type_name(arg.type));
      first = false;
    }
    fmt::format_to(it, "]}}\n");
  }
  return fmt::to_string(out);
}

}  // namespace cudatrace
