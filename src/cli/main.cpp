// cudatrace: trace a process's CUDA runtime and driver API calls with eBPF uprobes.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <iterator>
#include <sstream>

#include "cudatrace/cli/api_docs.h"
#include "cudatrace/cli/probe_list.h"
#include "cudatrace/decode/api_table.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/drive/tracer.h"
#include "cudatrace/options.h"
#include "cudatrace/render/metrics_server.h"
#include "cudatrace/render/otlp.h"
#include "cudatrace/render/output_file.h"
#include "cudatrace/target/nvtx_injection.h"
#include "cudatrace/terminal.h"

namespace {

constexpr const char* kVersion = "cudatrace 0.2.0";

constexpr const char* kDescription = "Trace the CUDA runtime and driver API calls of a process with eBPF uprobes.";

constexpr const char* kUsage = R"(
USAGE: cudatrace [OPTIONS] -p PID
       cudatrace [OPTIONS] [--] COMMAND [ARGS...]
       cudatrace [OPTIONS] --all-processes
       cudatrace report [OPTIONS] TRACE.jsonl     (cudatrace report --help)
)";

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
  cudatrace --py-stack --summary -- python3 train.py  # CUDA time by Python line
  cudatrace --json -o run.jsonl -- ./app && cudatrace report --summary run.jsonl
  cudatrace --nvtx --json -- python3 train.py    # each call with its NVTX range stack
  cudatrace --summary --by-range -- python3 train.py  # CUDA time per NVTX range
  cudatrace --all-processes --prometheus 127.0.0.1:9400  # every CUDA process of the host, as metrics
  cudatrace --summary -i 60 --max-overhead 1 -p 1234  # always on: launches sampled to cost ~1 %

)";

// The groups from the API table, then the rest of the footer.
constexpr const char* kAfterGroups = R"(
OUTPUT: the trace goes to standard output (or -o FILE). In command mode without
  -o, the command's own standard output goes to cudatrace's standard error, so
  that standard output carries the trace alone (`| jq` sees only JSON). With -p
  the process keeps its own standard output. Output its consumer has not read
  yet waits in memory, up to --buffer-mb; beyond that, records are dropped and
  counted as lost ("output" in the end line's lost_detail).

EXIT STATUS: the command's own status in command mode; otherwise 0. Errors:
  2 bad usage (also -o and --perfetto naming one file), 3 no such process /
  nothing to trace / the command cannot be run (not found, not executable, not
  a program), 4 not permitted (needs root or CAP_BPF+CAP_PERFMON; a process
  whose /proc/PID/maps root may not read), 5 kernel or BPF failure, 6 an output
  (-o, --perfetto, --prometheus) cannot be written, 7 (report) the trace cannot
  be read. 141 (128 + SIGPIPE): the reader of the trace went away (`| head`);
  cudatrace stops quietly, the command runs on untraced.)";

constexpr const char* kReportUsage = R"(
USAGE: cudatrace report [OPTIONS] TRACE.jsonl
)";

constexpr const char* kReportExamples = R"(
Reads a trace recorded with --json (docs/json.md; "-" reads standard input)
and prints what tracing live would have: the calls with stream annotations,
or the --summary/--hist/--insights reports, and a --perfetto timeline.
Times are relative to the trace's first call.

EXAMPLES:
  cudatrace --json -o run.jsonl -- ./app     # record once, at the lowest cost
  cudatrace report run.jsonl                 # the calls, as text
  cudatrace report --summary run.jsonl       # the tables and insights
  cudatrace report --perfetto run.perfetto.json --insights run.jsonl

A FIFO is waited on for a writer for 10 s (the tracer writing it opens it
once attached); to wait for ever, read it from standard input (- < FIFO).

EXIT STATUS: 0; 2 bad usage (also --perfetto onto the trace or standard
  output), 6 output cannot be written, 7 the trace cannot be read (also a FIFO
  nobody opened for writing in time) or a line of it is not a cudatrace --json
  line (the message names the line).)";

// --help's option groups, in this order.
constexpr const char* kTargets = "TARGETS";
constexpr const char* kSelection = "SELECTION";
constexpr const char* kOutput = "OUTPUT";
constexpr const char* kAnalysis = "ANALYSIS";
constexpr const char* kTuning = "TUNING";
constexpr const char* kOther = "OTHER";

// One usage block (ours, not CLI11's "Usage: cudatrace [OPTIONS]"), and an
// option's argument as a plain label: no CLI11 defaults ("{false}").
class HelpFormatter : public CLI::Formatter {
 public:
  explicit HelpFormatter(const char* usage) : usage_(usage) { column_width(32); }
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    if (positional) return opt->get_name(true, false);
    std::string name = opt->get_name(false, true);
    for (auto open = name.find('{'); open != std::string::npos; open = name.find('{'))
      name.erase(open, name.find('}', open) - open + 1);
    return name;
  }
  // The label alone: a check appends its own text after a ':'.
  std::string make_option_opts(const CLI::Option* opt) const override {
    return opt->get_type_size() == 0 ? std::string() : " " + opt->get_type_name().substr(0, opt->get_type_name().find(':'));
  }
  // Description, usage, arguments, option groups one blank line apart, footer.
  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const override {
    std::string out = make_description(app) + usage_;
    const auto positionals = app->get_options([](const CLI::Option* o) { return o->get_positional(); });
    if (!positionals.empty()) out += make_group("ARGUMENTS", true, positionals);
    for (const std::string& group : app->get_groups()) {
      const auto opts = app->get_options([&](const CLI::Option* o) { return o->get_group() == group && o->nonpositional(); });
      if (!opts.empty()) out += make_group(group, false, opts);
    }
    return out + make_footer(app);
  }

 private:
  const char* usage_;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "cudatrace: %s (see --help)\n", cudatrace::one_line(msg).c_str());
  std::exit(cudatrace::kExitUsage);
}

// A value an option cannot be empty for (-o '', -f '').
const CLI::Validator kNotEmpty(
    [](std::string& value) { return value.empty() ? std::string("needs a value, not an empty string") : std::string(); },
    "", "not empty");

// Numbers are decimal and nothing else: CLI11 would read "020" as octal,
// "0x10" as hex, and take "+5" and " 5". Leading zeros are dropped here, so
// that "020" is twenty. A number outside [min, max] is refused with the
// range, in words (`unit`), before CLI11 converts it: CLI11 would say
// neither, nor that it overflows the option's type.
CLI::Validator decimal(std::uint64_t min, std::uint64_t max, const std::string& unit) {
  return CLI::Validator(
      [=](std::string& value) {
        if (value.empty() || !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
          return "takes a decimal number, not '" + value + "'";
        std::uint64_t n = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec != std::errc() || end != value.data() + value.size() || n < min || n > max)
          return fmt::format("takes {} from {} to {}, not '{}'", unit, min, max, value);
        value = std::to_string(n);
        return std::string();
      },
      "", "decimal");
}

// The highest process id Linux can give (PID_MAX_LIMIT - 1 on 64-bit).
constexpr long kMaxPid = 4194303;

// -p and --tid: a decimal id from 1 to kMaxPid, all of the text.
pid_t parse_id(const std::string& text, const char* what, const char* option) {
  long id = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || end != text.data() + text.size() || id < 1 || id > kMaxPid)
    usage_error(fmt::format("invalid {} '{}': {} takes a {} id from 1 to {}", what, text, option,
                            std::string(what) == "PID" ? "process" : "thread", kMaxPid));
  return static_cast<pid_t>(id);
}

// --max-overhead: a percentage, all of the text (strtod alone takes "nan" and "inf").
double parse_percentage(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  // Decimal digits with an optional fraction: strtod alone takes " 5", "+5", "1e1", "0x1p3" and "inf".
  const bool decimal = !text.empty() && std::isdigit(static_cast<unsigned char>(text.front())) &&
                       std::isdigit(static_cast<unsigned char>(text.back())) &&
                       text.find_first_not_of("0123456789.") == std::string::npos &&
                       std::count(text.begin(), text.end(), '.') <= 1;
  const double pct = decimal ? std::strtod(text.c_str(), &end) : 0;
  if (!decimal || *end != '\0' || errno != 0 || !std::isfinite(pct) || pct < 0.01 || pct > 100)
    usage_error("--max-overhead takes a percentage from 0.01 to 100, not '" + text + "'");
  return pct;
}

// The timeline must not be written over the trace, nor over the trace
// `report` reads: compared by file, not by name.
void refuse_shared_file(const std::string& perfetto, const std::string& output, const std::string& input) {
  if (perfetto.empty()) return;
  using cudatrace::same_output_file;
  if (!output.empty() ? same_output_file(perfetto, output) : same_output_file(perfetto, STDOUT_FILENO))
    usage_error("--perfetto " + perfetto + " is the file the trace goes to (" +
                (output.empty() ? std::string("standard output") : "-o " + output) + "): give each its own file");
  if (!input.empty() && (input == "-" ? same_output_file(perfetto, STDIN_FILENO) : same_output_file(perfetto, input)))
    usage_error("--perfetto " + perfetto + " is the trace being read: it would be overwritten");
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

// Words wrapped at 80 columns, each line after the first indented by two spaces.
std::string wrapped(const std::string& text) {
  std::string out, line;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    if (!line.empty() && line.size() + 1 + w.size() > 78) {
      out += line + "\n";
      line = " ";
    }
    line += (line.empty() ? "" : " ") + w;
  }
  return out + line + "\n";
}

std::string groups_help() {
  using namespace cudatrace;
  return wrapped("GROUPS: traced without -f: " + group_names(true) +
                        ". Off by default, traced with -f (comma-separated): " + group_names(false) +
                        "; all: every group. Kernel registration and lookups (module) are traced with launches "
                        "for kernel names and printed only when asked for; the graph calls that say what a graph "
                        "launch runs (capture, instantiation, destruction) are traced and printed with launches; "
                        "nvtx calls are traced with --nvtx. "
                        "--list-apis says which API is in which group, and why a group is off (getters that "
                        "frameworks call dozens of times per launch: each probed call costs about 1 us).");
}

// -f and --layer as given, before apply_selection makes Selections of them.
struct SelectionArgs {
  std::string groups, layer = "all";
};

// -f and --layer: which APIs are traced (opts.selection) and printed (opts.display).
void apply_selection(cudatrace::Options& opts, const SelectionArgs& args) {
  using namespace cudatrace;
  const std::string& layer = args.layer;
  if (layer != "all" && layer != "runtime" && layer != "driver" && layer != "nccl")
    usage_error("--layer must be runtime, driver, nccl or all, not '" + layer + "'");
  // The nvtx layer is not chosen here: --nvtx turns it on.
  for (const Layer l : {Layer::Runtime, Layer::Driver, Layer::Nccl})
    opts.selection.layer[static_cast<int>(l)] = layer == "all" || layer == layer_name(l);
  opts.display = opts.selection;
  if (args.groups.empty()) {
    for (int g = 0; g < kGroupCount; ++g) opts.display.group[g] = group_on_by_default(static_cast<Group>(g));
  } else {
    for (const std::string& name : split(args.groups, ',')) {
      const auto g = parse_group(name);
      if (name == "all") {
        std::fill(std::begin(opts.display.group), std::end(opts.display.group), true);
        opts.every_layer = true;  // all is every call, at every layer
      }
      else if (g)
        opts.display.group[static_cast<int>(*g)] = true;
      else
        usage_error("unknown group '" + name + "' (groups: " + group_names(true) + ", " + group_names(false) +
                    ", all)");
    }
  }
  const auto& rows = apis();
  if (std::none_of(rows.begin(), rows.end(), [&](const Api& a) { return opts.display.wants(a); }))
    usage_error("-f " + (args.groups.empty() ? std::string("(the default groups)") : args.groups) + " --layer " +
                layer + " selects no API: none of these groups is at that layer (--list-apis lists them)");
  // What a graph launch runs comes from its capture and instantiation: known whenever launches are.
  opts.display.graph_model = opts.display.group[static_cast<int>(Group::Launch)];
  opts.selection = opts.display;
  // Kernel names come from registration and lookup calls: trace them whenever launches are.
  opts.selection.kernel_names = opts.display.group[static_cast<int>(Group::Launch)];
}

// What CLI11 would take silently: it reads "--output=" and "-o" alike as
// "the value is the next argument", whatever that is, so that
// "--output= --json" wrote a text trace to ./--json. An empty "--opt=" is
// refused, and so is a FILE or PATH value that looks like an option. Only
// the options are looked at: the scan stops at "--" and at the command.
void refuse_swallowed_values(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') return;
    const auto equals = arg.find('=');
    const bool is_long = arg[1] == '-';
    const std::string name = is_long ? arg.substr(0, equals) : arg.substr(0, 2);
    const CLI::Option* opt = app.get_option_no_throw(name);
    if (!opt || opt->get_type_size() == 0) continue;  // a flag, or unknown (CLI11 says so)
    const std::string shown = opt->get_name();
    if (is_long && equals == arg.size() - 1) usage_error(shown + ": " + arg + " needs a value, not an empty string");
    if (is_long ? equals != std::string::npos : arg.size() > 2) continue;  // --opt=VALUE, -oVALUE
    if (++i == argc) return;  // CLI11 says the value is missing
    const std::string value = argv[i];
    const std::string type = opt->get_type_name().substr(0, opt->get_type_name().find(':'));
    if (value.size() > 1 && value[0] == '-' && (type == "FILE" || type == "PATH"))
      usage_error(fmt::format("{}: takes a {}, not the option '{}' (for a file of that name, write ./{})", shown,
                              type, value, value));
  }
}

// Parses argv into `app`; --help prints and exits 0, a bad option exits 2.
void parse_or_exit(CLI::App& app, int argc, char** argv) {
  refuse_swallowed_values(app, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    usage_error(e.what());
  }
}

// ---- The options `cudatrace` and `cudatrace report` share -----------------
// One function per --help group, each option declared once; a command adds
// its own options to a group after these.

void add_selection_options(CLI::App& app, SelectionArgs& args) {
  app.add_option("-f,--filter", args.groups, "Only the calls of these groups, comma-separated; all: every group")->group(kSelection)->type_name("GROUPS")->check(kNotEmpty);
  app.add_option("--layer", args.layer, "runtime, driver, nccl or all (default)")->group(kSelection)->type_name("LAYER");
}

void add_output_options(CLI::App& app, cudatrace::Options& opts) {
  app.add_flag("--json", opts.json, "JSON Lines output (docs/json.md)")->group(kOutput);
  app.add_option("--perfetto", opts.perfetto_path, "Also write a timeline to FILE, for ui.perfetto.dev (docs/timeline.md)")->group(kOutput)->type_name("FILE")->check(kNotEmpty);
  app.add_flag("--output-follow-symlinks", opts.output_follow_symlinks, "Let an output FILE write through a symbolic link in a world-writable directory (/tmp)")->group(kOutput);
  app.add_flag("--full-names", opts.full_names, "Print kernels by their whole demangled names (default: short names; JSON has both)")->group(kOutput);
}

void add_analysis_options(CLI::App& app, cudatrace::Options& opts) {
  app.add_flag("--summary", opts.summary_tables, "Print per-API, kernel, transfer, memory tables and insights, not calls (docs/summary.md)")->group(kAnalysis);
  app.add_flag("--hist", opts.hist, "Print a log2 latency histogram per API instead of calls")->group(kAnalysis);
  app.add_flag("--insights", opts.insights, "Print inferences about the host side (launch-bound, sync storms, ...)")->group(kAnalysis);
  app.add_flag("--gpu-time", opts.gpu_time, "Bounds and estimates of GPU time from host events alone, in the summary and the timeline (docs/gpu-time.md)")->group(kAnalysis);
  app.add_flag("--by-span", opts.by_span, "With --summary: CUDA time, launches, synchronisation time and bytes per OpenTelemetry trace and span attribute (docs/correlation.md)")->group(kAnalysis);
}

// What --summary, --hist, --insights and --gpu-time have in common: reports
// instead of calls. --gpu-time alone reports as a summary; with --perfetto,
// its tracks are there too.
void apply_reports(cudatrace::Options& opts) {
  opts.summary = opts.summary_tables || opts.hist || opts.insights || opts.gpu_time;
}

// ---- cudatrace report [OPTIONS] TRACE.jsonl --------------------------------

int report_main(int argc, char** argv) {
  using namespace cudatrace;
  Options opts;
  SelectionArgs selection;
  std::string trace;

  CLI::App app{kDescription, "cudatrace report"};
  app.formatter(std::make_shared<HelpFormatter>(kReportUsage));
  app.footer(kReportExamples);
  app.add_option("TRACE.jsonl", trace, "The trace, JSON Lines written by --json; - reads standard input")->required()->type_name("")->check(kNotEmpty);
  add_selection_options(app, selection);
  add_output_options(app, opts);
  add_analysis_options(app, opts);
  app.set_help_flag("-h,--help", "Print this help and exit")->group(kOther);

  parse_or_exit(app, argc, argv);
  apply_selection(opts, selection);
  apply_reports(opts);
  refuse_shared_file(opts.perfetto_path, "", trace);
  return run_report(opts, trace);
}

// ---- cudatrace [OPTIONS] -p PID | --all-processes | -- COMMAND -------------

// What the command line holds besides Options: texts checked once parsed,
// and the actions that exit at once.
struct LiveArgs {
  SelectionArgs selection;
  std::string pid, tid, max_overhead, dlopen_stop, attach = "auto", nvtx_library_path;
  bool no_dlopen_stop = false, list_apis = false, version = false;
};

// The facets' options of --help group `group` (decode/facet.h), in the
// facets' order.
void add_facet_options(CLI::App& app, cudatrace::Options& opts, const char* group) {
  for (const cudatrace::Facet* f : cudatrace::call_facets()) {
    const cudatrace::FacetOption o = f->option();
    if (std::string_view(o.help_group) != group) continue;
    app.add_flag(o.flag, [&opts, f, o](std::int64_t) { cudatrace::set_facet(opts, *f, o.sets); }, o.help)->group(group);
  }
}

// One option per line, in blocks by --help group; a new option goes at the
// end of its block (one both commands have, in the add_*_options above).
void add_live_options(CLI::App& app, cudatrace::Options& opts, LiveArgs& args) {
  // Targets
  app.add_option("-p,--pid", args.pid, "Trace the running process PID")->group(kTargets)->type_name("PID");
  app.add_flag("--all-processes", opts.all_processes, "Trace every process of this host that maps a CUDA library, now and later; stops none (docs/prometheus.md)")->group(kTargets);
  app.add_option("--lib", opts.libs, "Also probe this library or executable (repeatable)")->group(kTargets)->type_name("PATH")->check(kNotEmpty);
  // Selection
  add_selection_options(app, args.selection);
  app.add_option("--min-us", opts.min_us, "Only calls that took at least this many microseconds")->group(kSelection)->type_name("US")->transform(decimal(0, 1000000000000, "a number of microseconds"));
  app.add_flag("--errors", opts.errors_only, "Only calls that returned an error")->group(kSelection);
  app.add_option("--tid", args.tid, "Only this thread")->group(kSelection)->type_name("TID");
  // Output
  app.add_option("-o,--output", opts.output_path, "Write the trace to FILE instead of standard output")->group(kOutput)->type_name("FILE")->check(kNotEmpty);
  add_output_options(app, opts);
  add_facet_options(app, opts, kOutput);
  app.add_option("--prometheus", opts.prometheus_address, "Serve Prometheus metrics at http://ADDRESS/metrics (HOST:PORT; :PORT for every address) instead of printing calls (docs/prometheus.md)")->group(kOutput)->type_name("ADDRESS")->check(kNotEmpty);
  app.add_option("--otlp", opts.otlp_endpoint, "Also send the calls made under a published OpenTelemetry span to an OTLP/HTTP collector, as child spans, and the node exporter's metrics (ENDPOINT: http[s]://HOST:PORT; default OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318; docs/otlp.md)")->group(kOutput)->type_name("ENDPOINT")->expected(0, 1);
  app.add_flag("--otlp-all-calls", opts.otlp_all_calls, "With --otlp: also send the calls made under no span, as root spans")->group(kOutput);
  app.add_option("--otlp-interval", opts.otlp_interval_s, "With --otlp: send the node exporter's metrics (and the spans' counts) every N seconds (default 10)")->group(kOutput)->type_name("N")->transform(decimal(1, 86400, "a number of seconds"));
  app.add_flag("--nvtx", opts.nvtx, "Give each call the NVTX ranges open on its thread (torch.cuda.nvtx, emit_nvtx; docs/nvtx.md)")->group(kOutput);
  // Analysis
  add_analysis_options(app, opts);
  app.add_option("-i,--interval", opts.interval_s, "With --summary/--hist/--insights: also report every N seconds")->group(kAnalysis)->type_name("N")->transform(decimal(1, UINT_MAX, "a number of seconds"));
  app.add_option("-c,--count", opts.count, "With -i: stop after this many interval reports")->group(kAnalysis)->type_name("N")->transform(decimal(1, UINT_MAX, "a number of reports"));
  app.add_flag("--by-range", opts.by_range, "With --summary: CUDA time, launches and bytes per NVTX range (implies --nvtx)")->group(kAnalysis);
  // Tuning
  app.add_option("--ring-mb", opts.ring_mb, "Ring buffer size in MiB, a power of two (default 16)")->group(kTuning)->type_name("MIB")->transform(decimal(1, 1024, "a power of two"));
  app.add_option("--buffer-mb", opts.buffer_mb, "Output not yet read by its consumer kept in memory, at most N MiB (default 128)")->group(kTuning)->type_name("MIB")->transform(decimal(1, 65536, "a number of MiB"));
  app.add_option("--dlopen-stop", args.dlopen_stop, "Pause a process while probes attach to a library it just loaded: auto (default: always, but not a -p target that is a job of an interactive shell), always, never")->group(kTuning)->type_name("WHEN")->check(kNotEmpty);
  app.add_flag("--no-dlopen-stop", args.no_dlopen_stop, "Same as --dlopen-stop=never")->group(kTuning);
  app.add_option("--attach", args.attach, "How uprobes are attached: auto (default: multi where the kernel has it), multi (uprobe_multi links, Linux 6.6) or perf (one perf-event uprobe per function and direction, Linux 5.15)")->group(kTuning)->type_name("HOW");
  app.add_option("--max-overhead", args.max_overhead, "Keep the estimated tracing cost to each process under PCT % by sampling the launch, async memset and query probes; their counts are then estimates, marked (docs/fleet.md)")->group(kTuning)->type_name("PCT");
  app.add_flag("--empty-probes", opts.empty_probes, "For benchmarks: place and attach every probe as usual, with BPF programs that do nothing (the cost of the traps alone); records nothing")->group(kTuning);
  add_facet_options(app, opts, kTuning);
  app.add_flag("--every-layer", opts.every_layer, "Also record the driver calls a runtime call makes (a cudaLaunchKernel's cuLaunchKernel), each with its latency and status, nested in it (implied by -f all)")->group(kTuning);
  // Other
  app.set_help_flag("-h,--help", "Print this help and exit")->group(kOther);
  app.add_flag("--list-apis", args.list_apis, "List the traced APIs and exit")->group(kOther);
  app.add_option("--write-nvtx-library", args.nvtx_library_path, "Write the NVTX injection library to FILE and exit (to start a program for -p --nvtx)")->group(kOther)->type_name("FILE")->check(kNotEmpty);
  app.add_flag("-v,--verbose", opts.verbose, "Say which files are probed; show libbpf messages")->group(kOther);
  app.add_flag("-V,--version", args.version, "Print the version and exit")->group(kOther);
  app.prefix_command(true);
}

// The command: what follows the options (after --, or from the first word
// that is no option).
void take_command(const CLI::App& app, cudatrace::Options& opts) {
  opts.command = app.remaining();
  if (!opts.command.empty() && opts.command.front() == "--")
    opts.command.erase(opts.command.begin());
  else if (!opts.command.empty() && opts.command.front().rfind('-', 0) == 0)
    usage_error("unknown option " + opts.command.front());
}

// --write-nvtx-library FILE, for a program started to be traced with -p --nvtx.
int write_nvtx_library_file(const std::string& path) {
  std::string error;
  if (!cudatrace::write_nvtx_library(path, error)) {
    cudatrace::error_line(error);
    return cudatrace::kExitOutput;
  }
  return 0;
}

// --nvtx, which --by-range (with --summary only) implies: the NVTX calls are
// traced whatever -f says, as every call needs the range stack.
void apply_nvtx(cudatrace::Options& opts, const SelectionArgs& selection) {
  using namespace cudatrace;
  if (opts.by_range && !opts.summary_tables) usage_error("--by-range needs --summary");
  if (opts.by_span && !opts.summary_tables) usage_error("--by-span needs --summary");
  opts.nvtx |= opts.by_range;
  if (!opts.nvtx) return;
  opts.selection.layer[static_cast<int>(Layer::Nvtx)] = opts.display.layer[static_cast<int>(Layer::Nvtx)] = true;
  opts.selection.group[static_cast<int>(Group::Nvtx)] = true;
  // Without -f the range calls are printed too (the nvtx group is off by default only because it needs --nvtx).
  if (selection.groups.empty()) opts.display.group[static_cast<int>(Group::Nvtx)] = true;
}

// --list-apis: the APIs -f selects, or with --lib those each file has.
int list_apis(const cudatrace::Options& opts) {
  using namespace cudatrace;
  if (!opts.libs.empty()) {
    std::string out, error;
    if (!probe_list_markdown(opts.libs, opts.selection, out, error)) {
      error_line(error);
      return kExitTarget;
    }
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  std::fputs((opts.json ? api_list_json(opts.display) : api_list_markdown(opts.display)).c_str(), stdout);
  return 0;
}

// -p, --tid and --max-overhead: their text checked whole.
void parse_numbers(const CLI::App& app, const LiveArgs& args, cudatrace::Options& opts) {
  if (app.count("--pid")) opts.pid = parse_id(args.pid, "PID", "-p/--pid");
  if (app.count("--tid")) opts.tid = parse_id(args.tid, "TID", "--tid");
  if (app.count("--max-overhead")) opts.max_overhead_pct = parse_percentage(args.max_overhead);
}

// One target: -p, --all-processes or a command.
void check_target(const LiveArgs& args, const cudatrace::Options& opts) {
  if ((opts.pid > 0) + !opts.command.empty() + opts.all_processes > 1)
    usage_error("give one of -p PID, --all-processes or a command");
  if (opts.pid == 0 && opts.command.empty() && !opts.all_processes)
    usage_error("nothing to trace: give -p PID, --all-processes or -- COMMAND");
  if (opts.all_processes && (opts.tid || args.dlopen_stop == "always"))
    usage_error("--all-processes traces every process and stops none: --tid and --dlopen-stop=always do not apply");
}

// --prometheus serves metrics instead of a trace.
void check_prometheus(const cudatrace::Options& opts) {
  if (opts.prometheus_address.empty()) return;
  sockaddr_in addr{};
  std::string error;
  if (!cudatrace::parse_listen_address(opts.prometheus_address, addr, error)) usage_error(error);
  // The facets that ride on call records, each named by its option.
  bool facet_on = false;
  std::string facet_flags;
  for (const cudatrace::Facet* f : cudatrace::call_facets()) {
    if (!f->option().needs_records) continue;
    facet_on = facet_on || f->on(opts);
    facet_flags += std::string(f->option().flag) + ", ";
  }
  if (opts.json || !opts.output_path.empty() || !opts.perfetto_path.empty() || opts.summary_tables || opts.hist ||
      opts.insights || opts.gpu_time || facet_on || opts.nvtx || opts.min_us || opts.errors_only || opts.tid)
    usage_error("--prometheus serves metrics instead of a trace: it does not combine with --json, -o, --perfetto, "
                "--summary, --hist, --insights, --gpu-time, " + facet_flags + "--nvtx, --min-us, --errors or --tid");
}

// --otlp: the endpoint and the OTEL_EXPORTER_OTLP_* variables are read now,
// so that a bad one is said before anything is traced.
void check_otlp(const CLI::App& app, cudatrace::Options& opts) {
  opts.otlp = app.count("--otlp") > 0;
  if (opts.otlp_all_calls && !opts.otlp) usage_error("--otlp-all-calls needs --otlp");
  if (app.count("--otlp-interval") && !opts.otlp) usage_error("--otlp-interval needs --otlp");
  if (!opts.otlp) return;
  if (!opts.prometheus_address.empty() && opts.otlp_all_calls)
    usage_error("--otlp-all-calls needs a trace: with --prometheus, --otlp sends the calls made under a span and the "
                "metrics (the other calls are counted in the kernel, none is recorded)");
  cudatrace::OtlpConfig config;
  std::string error;
  if (!cudatrace::read_otlp_config(opts.otlp_endpoint, [](const char* name) { return std::getenv(name); }, config,
                                   error))
    usage_error(error);
}

// -i and -c report summaries; --min-us and --errors select calls to print.
void check_reports(const cudatrace::Options& opts) {
  if (opts.interval_s && !opts.summary) usage_error("-i needs --summary, --hist or --insights");
  if (opts.count && !opts.interval_s) usage_error("-c needs -i");
  if (opts.summary && (opts.min_us || opts.errors_only))
    usage_error("--min-us and --errors select calls to print; they do not combine with --summary, --hist or --insights");
}

// --dlopen-stop, --attach and --ring-mb.
void apply_tuning(const LiveArgs& args, cudatrace::Options& opts) {
  using namespace cudatrace;
  if (args.no_dlopen_stop && !args.dlopen_stop.empty() && args.dlopen_stop != "never")
    usage_error("--no-dlopen-stop contradicts --dlopen-stop=" + args.dlopen_stop);
  if (args.no_dlopen_stop || args.dlopen_stop == "never")
    opts.dlopen_stop = Options::DlopenStop::Never;
  else if (args.dlopen_stop == "always")
    opts.dlopen_stop = Options::DlopenStop::Always;
  else if (!args.dlopen_stop.empty() && args.dlopen_stop != "auto")
    usage_error("--dlopen-stop must be auto, always or never, not '" + args.dlopen_stop + "'");
  if (args.attach == "multi")
    opts.attach = AttachRequest::Multi;
  else if (args.attach == "perf")
    opts.attach = AttachRequest::Perf;
  else if (args.attach != "auto")
    usage_error("--attach must be auto, multi or perf, not '" + args.attach + "'");
  // A detached perf-event uprobe still traps until the keeper destroys it
  // (uprobe_keeper.h): the budget would stop counting a cost still paid.
  if (opts.attach == AttachRequest::Perf && opts.max_overhead_pct > 0)
    usage_error("--max-overhead needs uprobe_multi links, not --attach perf (docs/fleet.md)");
  if (opts.ring_mb & (opts.ring_mb - 1))
    usage_error("--ring-mb must be a power of two between 1 and 1024");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cudatrace;
  // "report" is a subcommand: a program of that name is traced with "cudatrace -- report".
  if (argc > 1 && std::string(argv[1]) == "report") return report_main(argc - 1, argv + 1);

  Options opts;
  LiveArgs args;
  CLI::App app{kDescription, "cudatrace"};
  app.formatter(std::make_shared<HelpFormatter>(kUsage));
  app.footer(std::string(kExamples) + groups_help() + kAfterGroups);
  add_live_options(app, opts, args);
  parse_or_exit(app, argc, argv);
  if (args.version) {
    std::printf("%s\n", kVersion);
    // A static build lacking an exporter's dependency (CMakeLists.txt) says which.
    std::vector<std::string> without;
#ifdef CUDATRACE_BUILT_WITHOUT
    without.emplace_back(CUDATRACE_BUILT_WITHOUT);
#endif
    if (!cudatrace::otlp_export_built()) without.emplace_back("the OTLP exporter");
    if (!without.empty()) std::printf("built without: %s\n", fmt::format("{}", fmt::join(without, ", ")).c_str());
    return 0;
  }
  take_command(app, opts);
  apply_selection(opts, args.selection);
  if (!args.nvtx_library_path.empty()) return write_nvtx_library_file(args.nvtx_library_path);
  apply_nvtx(opts, args.selection);
  if (args.list_apis) return list_apis(opts);
  parse_numbers(app, args, opts);
  check_target(args, opts);
  check_prometheus(opts);
  check_otlp(app, opts);
  apply_reports(opts);
  check_reports(opts);
  apply_tuning(args, opts);
  refuse_shared_file(opts.perfetto_path, opts.output_path, "");
  return run_tracer(opts);
}
