// cudatrace: trace a process's CUDA runtime and driver API calls with eBPF uprobes.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <sstream>

#include "cudatrace/api_table.h"
#include "cudatrace/api_docs.h"
#include "cudatrace/tracer.h"

namespace {

constexpr const char* kVersion = "cudatrace 0.2.0";

constexpr const char* kExamples = R"(
EXAMPLES:
  cudatrace -- ./app args          # run ./app, trace every CUDA call it makes
  cudatrace -p 1234                # trace a running process
  cudatrace -f mem,xfer -p 1234    # only allocations and copies
  cudatrace --errors -- ./app      # only failed calls
  cudatrace --min-us 1000 -p 1234  # only calls that took 1 ms or more
  cudatrace --json -- python3 train.py | jq 'select(.api=="cudaMalloc")'
  cudatrace --list-apis            # the traced APIs, their groups and arguments
  cudatrace --summary -- ./app     # per-API/kernel/transfer/memory tables and insights at exit
  cudatrace --summary -i 5 -c 3 -p 1234   # a report every 5 s, three times, then stop
  cudatrace --hist -f stream -- ./app     # latency histograms of the stream calls
  cudatrace --summary --stack -- ./app    # ... and where each leaked allocation was made

GROUPS: mem, xfer, launch, stream, event, device (default: all of them), and
  module (kernel registration and lookup calls; always traced for kernel names,
  printed only when asked for).

EXIT STATUS: the command's own status in command mode; otherwise 0. Errors:
  2 bad usage, 3 no such process / nothing to trace / command not found,
  4 not permitted (needs root or CAP_BPF+CAP_PERFMON), 5 kernel or BPF failure,
  6 output cannot be written.)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "cudatrace: %s (see --help)\n", msg.c_str());
  std::exit(cudatrace::kExitUsage);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cudatrace;
  Options opts;
  std::string groups, layer = "all";
  bool list_apis = false, version = false;
  long long pid = 0, tid = 0;

  CLI::App app{
      "Trace the CUDA runtime and driver API calls of a process with eBPF uprobes.\n\n"
      "USAGE: cudatrace [OPTIONS] -p PID\n"
      "       cudatrace [OPTIONS] -- COMMAND [ARGS...]\n",
      "cudatrace"};
  app.footer(kExamples);
  app.add_option("-p,--pid", pid, "Trace the running process PID");
  app.add_option("--lib", opts.libs, "Also probe this library or executable (repeatable)");
  app.add_option("-f,--filter", groups, "Trace only these groups, comma-separated");
  app.add_option("--layer", layer, "runtime, driver, nccl or all (default)");
  // The range check also refuses "-3", which would otherwise wrap to a huge unsigned value.
  app.add_option("--min-us", opts.min_us, "Only calls that took at least this many microseconds")
      ->check(CLI::Range(std::uint64_t(0), std::uint64_t(1000000000000)));
  app.add_flag("--errors", opts.errors_only, "Only calls that returned an error");
  app.add_option("--tid", tid, "Only this thread");
  app.add_flag("--json", opts.json, "JSON Lines output (docs/json.md)");
  app.add_option("-o,--output", opts.output_path, "Write the trace to FILE instead of standard output");
  app.add_option("--perfetto", opts.perfetto_path,
                 "Also write a timeline to FILE (Chrome trace JSON for ui.perfetto.dev; docs/timeline.md)");
  app.add_flag("--output-follow-symlinks", opts.output_follow_symlinks,
               "Write through a symbolic link given as -o FILE even in a world-writable directory such as /tmp");
  app.add_option("--ring-mb", opts.ring_mb, "Ring buffer size in MiB, a power of two (default 16)");
  app.add_flag("!--no-dlopen-stop", opts.stop_on_dlopen,
               "Do not pause a process while probes attach to a library it just loaded");
  app.add_flag("--list-apis", list_apis, "List the traced APIs and exit");
  app.add_flag("--summary", opts.summary_tables,
               "Print per-API, kernel, transfer and memory tables and insights instead of calls (docs/summary.md)");
  app.add_flag("--hist", opts.hist, "Print a log2 latency histogram per API instead of calls");
  app.add_flag("--insights", opts.insights, "Print inferences about the host side (launch-bound, sync storms, ...)");
  app.add_option("-i,--interval", opts.interval_s, "With --summary/--hist/--insights: also report every N seconds");
  app.add_option("-c,--count", opts.count, "With -i: stop after this many interval reports");
  app.add_flag("--stack", opts.stack, "Capture and symbolise the user stack of each call (and of leaked allocations)");
  app.add_flag("-v,--verbose", opts.verbose, "Say which files are probed; show libbpf messages");
  app.add_flag("-V,--version", version, "Print the version and exit");
  app.prefix_command(true);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    usage_error(e.what());
  }
  if (version) {
    std::printf("%s\n", kVersion);
    return 0;
  }

  opts.command = app.remaining();
  if (!opts.command.empty() && opts.command.front() == "--")
    opts.command.erase(opts.command.begin());
  else if (!opts.command.empty() && opts.command.front().rfind('-', 0) == 0)
    usage_error("unknown option " + opts.command.front());

  if (layer != "all" && layer != "runtime" && layer != "driver" && layer != "nccl")
    usage_error("--layer must be runtime, driver, nccl or all, not '" + layer + "'");
  for (int l = 0; l < kLayerCount; ++l)
    opts.selection.layer[l] = layer == "all" || layer == layer_name(static_cast<Layer>(l));
  opts.display = opts.selection;
  if (groups.empty()) {
    for (int g = 0; g < kGroupCount; ++g) opts.display.group[g] = static_cast<Group>(g) != Group::Module;
  } else {
    for (const std::string& name : split(groups, ',')) {
      const auto g = parse_group(name);
      if (!g) usage_error("unknown group '" + name + "' (groups: mem, xfer, launch, stream, event, device, module, coll)");
      opts.display.group[static_cast<int>(*g)] = true;
    }
  }
  opts.selection = opts.display;
  // Kernel names come from registration and lookup calls: trace them whenever launches are.
  if (opts.display.group[static_cast<int>(Group::Launch)]) opts.selection.group[static_cast<int>(Group::Module)] = true;

  if (list_apis) {
    std::fputs((opts.json ? api_list_json(opts.display) : api_list_markdown(opts.display)).c_str(), stdout);
    return 0;
  }
  if (pid < 0 || pid > 0x7fffffff) usage_error("invalid PID " + std::to_string(pid));
  if (tid < 0 || tid > 0x7fffffff) usage_error("invalid TID " + std::to_string(tid));
  opts.pid = static_cast<pid_t>(pid);
  opts.tid = static_cast<pid_t>(tid);
  if (opts.pid > 0 && !opts.command.empty()) usage_error("give either -p PID or a command, not both");
  if (opts.pid == 0 && opts.command.empty()) usage_error("nothing to trace: give -p PID or -- COMMAND");
  opts.summary = opts.summary_tables || opts.hist || opts.insights;
  if (opts.interval_s && !opts.summary) usage_error("-i needs --summary, --hist or --insights");
  if (opts.count && !opts.interval_s) usage_error("-c needs -i");
  if (opts.summary && (opts.min_us || opts.errors_only))
    usage_error("--min-us and --errors select calls to print; they do not combine with --summary, --hist or --insights");
  if (opts.ring_mb == 0 || opts.ring_mb > 1024 || (opts.ring_mb & (opts.ring_mb - 1)))
    usage_error("--ring-mb must be a power of two between 1 and 1024");
  return run_tracer(opts);
}
