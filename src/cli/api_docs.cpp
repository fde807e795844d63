#include "cudatrace/cli/api_docs.h"

#include <fmt/format.h>

#include "cudatrace/decode/arg_types.h"
#include "cudatrace/render/json.h"

namespace cudatrace {
namespace {

// How argument i of `a` is decoded: its type, the enum it is named by, or
// why it is not read.
std::string arg_type(const Api& a, std::size_t i) {
  const ArgSpec& arg = a.spec->args[i];
  const ArgTypeFacts& facts = arg_facts(arg.type);
  if (facts.passing == Passing::Xmm) return fmt::format("{}: in an xmm register, not read", facts.doc);
  if (facts.passing == Passing::ByValue) return fmt::format("{} by value, not read", arg.ctype ? arg.ctype : facts.doc);
  if (a.slots[i] == kNotCaptured) return fmt::format("{}: beyond the saved argument slots, not read", facts.doc);
  if (arg.enum_type) return fmt::format("{}{}", facts.out_bytes ? "out " : "", arg.enum_type->name);
  return facts.doc;
}

// " (+ `_ptsz`)": the per-thread-default-stream forms also probed.
std::string per_thread_forms(const ApiSpec& row) {
  std::string forms;
  for (const auto& [flag, suffix] : {std::pair{kPerThreadPtsz, "_ptsz"}, std::pair{kPerThreadPtds, "_ptds"}})
    if (row.per_thread & flag) forms += fmt::format("{}`{}`", forms.empty() ? " (+ " : ", ", suffix);
  return forms.empty() ? forms : forms + ")";
}

}  // namespace

const char* recording(const Api& a) {
  // bpf_abi.h, bit 60: part of the runtime call's record unless --every-layer.
  if (a.layer() == Layer::Driver && a.out_index[0] < 0) return "entry and return; inside a runtime call, by it";
  return "entry and return";
}

std::string api_list_markdown(const Selection& selection) {
  fmt::memory_buffer out;
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "| API | layer | group | recorded | arguments (CUDA names; `out` = read at return) |\n"
                 "| --- | --- | --- | --- | --- |\n");
  for (const Api& a : apis()) {
    if (a.variant || !selection.wants(a)) continue;
    std::string args;
    for (std::size_t i = 0; i < a.spec->args.size(); ++i)
      args += fmt::format("{}{} ({})", args.empty() ? "" : ", ", a.spec->args[i].name, arg_type(a, i));
    fmt::format_to(it, "| `{}`{} | {} | {} | {} | {} |\n", a.symbol, per_thread_forms(*a.spec), layer_name(a.layer()),
                   group_name(a.group()), recording(a), args.empty() ? "none" : args);
  }
  fmt::format_to(it,
                 "\nAn API marked (+ `_ptsz`) or (+ `_ptds`) is also probed in that per-thread-default-stream form, "
                 "which its header declares.\n");
  fmt::format_to(it,
                 "\n");
  fmt::format_to(it, "{}", api_groups_markdown());
  fmt::format_to(it,
                 "\n`-f all` selects every group. \"recorded\": every call is recorded with its latency and its "
                 "status. A driver call that a runtime call makes (the `cuLaunchKernel` of a `cudaLaunchKernel`) is "
                 "part of the runtime call's record, which has the program's arguments and the status the program "
                 "got, unless it has out-parameters. In a command traced from its start (Linux 6.6 and later) the "
                 "driver's launches, copies, event records and stream operations without out-parameters are not "
                 "even probed until code other than a CUDA runtime may call them (it imports them, or looks them "
                 "up); elsewhere such a driver call traps at its entry and, on Linux 6.13 and later, its return is "
                 "not probed. `--every-layer` records it too.\n");
  return fmt::to_string(out);
}

std::string api_list_json(const Selection& selection) {
  fmt::memory_buffer out;
  auto it = std::back_inserter(out);
  for (const Api& a : apis()) {
    if (!selection.wants(a)) continue;
    fmt::format_to(it, "{{\"api\":\"{}\",\"layer\":\"{}\",\"group\":\"{}\",\"variant\":{},\"recorded\":\"{}\",\"args\":[",
                   a.symbol, layer_name(a.layer()), group_name(a.group()), a.variant, recording(a));
    for (std::size_t i = 0; i < a.spec->args.size(); ++i) {
      const ArgSpec& arg = a.spec->args[i];
      fmt::format_to(it, "{}{{\"name\":\"{}\",\"type\":\"{}\"", i ? "," : "", arg.name, arg_facts(arg.type).doc);
      if (arg.ctype) fmt::format_to(it, ",\"ctype\":\"{}\"", arg.ctype);
      if (arg.enum_type) fmt::format_to(it, ",\"enum\":\"{}\"", arg.enum_type->name);
      if (a.slots[i] == kNotCaptured) fmt::format_to(it, ",\"read\":false");
      fmt::format_to(it, "}}");
    }
    fmt::format_to(it, "]");
    if (a.spec->prototype) fmt::format_to(it, ",\"prototype\":\"{}\"", a.spec->prototype);
    fmt::format_to(it, "}}\n");
  }
  return fmt::to_string(out);
}

std::string api_groups_markdown() {
  std::size_t rows[kGroupCount][kLayerCount] = {};
  for (const ApiSpec& r : api_rows()) ++rows[static_cast<int>(r.group)][static_cast<int>(r.layer)];
  fmt::memory_buffer out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "| group | traced by default | APIs by layer | what, and why |\n"
                     "| --- | --- | --- | --- |\n");
  for (int g = 0; g < kGroupCount; ++g) {  // every group, listed or not: the table says how to get the others
    const auto group = static_cast<Group>(g);
    const auto* n = rows[g];
    std::string counts;
    for (const Layer l : {Layer::Runtime, Layer::Driver, Layer::Nccl, Layer::Nvtx})
      if (const std::size_t k = n[static_cast<int>(l)])
        counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", k, layer_name(l));
    fmt::format_to(it, "| {} | {} | {} | {} |\n", group_name(group), group_on_by_default(group) ? "yes" : "no", counts,
                   group_description(group));
  }
  return fmt::to_string(out);
}

std::string group_names(bool traced_by_default) {
  std::string names;
  for (int g = 0; g < kGroupCount; ++g)
    if (group_on_by_default(static_cast<Group>(g)) == traced_by_default)
      names += fmt::format("{}{}", names.empty() ? "" : ", ", group_name(static_cast<Group>(g)));
  return names;
}

}  // namespace cudatrace
