#include "cudatrace/record/bpf_load.h"

#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "cudatrace/options.h"

namespace cudatrace {
namespace {

constexpr int kCapSysAdmin = 21, kCapPerfmon = 38, kCapBpf = 39;

// The end of the verifier's log shown without -v: its verdict is the last
// line but one (the last counts what it processed), the code it looked at
// comes before.
constexpr int kVerifierLinesShown = 8;

libbpf_print_fn_t g_next_printer = nullptr;
std::string* g_kept = nullptr;

int keep_message(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level != LIBBPF_DEBUG && g_kept) {
    va_list copy;
    va_copy(copy, args);
    const int n = std::vsnprintf(nullptr, 0, fmt, copy);
    va_end(copy);
    if (n > 0) {
      const std::size_t at = g_kept->size();
      g_kept->resize(at + n + 1);
      va_copy(copy, args);
      std::vsnprintf(&(*g_kept)[at], n + 1, fmt, copy);
      va_end(copy);
      g_kept->resize(at + n);
    }
  }
  return g_next_printer ? g_next_printer(level, fmt, args) : 0;
}

// Everything in `text` between `begin` and the next `end`, from `from`.
std::string between(const std::string& text, const std::string& begin, const std::string& end,
                    std::size_t from = 0) {
  const std::size_t b = text.find(begin, from);
  if (b == std::string::npos) return {};
  const std::size_t e = text.find(end, b + begin.size());
  return e == std::string::npos ? std::string() : text.substr(b + begin.size(), e - b - begin.size());
}

std::vector<std::string> last_lines(const std::string& text, int n) {
  std::vector<std::string> lines;
  std::size_t end = text.size();
  while (end > 0 && static_cast<int>(lines.size()) < n) {
    const std::size_t nl = text.rfind('\n', end - 1);
    const std::size_t start = nl == std::string::npos ? 0 : nl + 1;
    if (end > start) lines.insert(lines.begin(), text.substr(start, end - start));
    if (nl == std::string::npos) break;
    end = nl;
  }
  return lines;
}

}  // namespace

bool has_bpf_capabilities(unsigned long long effective) {
  const auto has = [effective](int cap) { return (effective >> cap & 1) != 0; };
  return has(kCapSysAdmin) || (has(kCapBpf) && has(kCapPerfmon));
}

BpfLoadFailure parse_libbpf_messages(const std::string& messages) {
  // libbpf: "prog 'NAME': BPF program load failed: ...", then (when the
  // kernel wrote one) "prog 'NAME': -- BEGIN PROG LOAD LOG --\n...-- END PROG LOAD LOG --".
  BpfLoadFailure f;
  const std::size_t failed = messages.find("': BPF program load failed");
  if (failed == std::string::npos) return f;
  const std::size_t name = messages.rfind("prog '", failed);
  if (name == std::string::npos) return f;
  f.program = messages.substr(name + 6, failed - name - 6);
  f.verifier_log =
      between(messages, "prog '" + f.program + "': -- BEGIN PROG LOAD LOG --\n", "-- END PROG LOAD LOG --", failed);
  return f;
}

int load_keeping_messages(const std::function<int()>& load, BpfLoadFailure& failure) {
  std::string kept;
  g_kept = &kept;
  g_next_printer = libbpf_set_print(keep_message);
  const int err = load();
  libbpf_set_print(g_next_printer);
  g_kept = nullptr;
  if (err) failure = parse_libbpf_messages(kept);
  return err;
}

LoadErrorReport report_load_error(int err, const BpfLoadFailure& failure, bool verbose) {
  LoadErrorReport r;
  const std::string why = std::strerror(-err);
  if (!failure.verifier_log.empty()) {
    r.exit_status = kExitKernel;
    r.lines.push_back("the kernel's BPF verifier rejected program " + failure.program + " (" + why + ")" +
                      (verbose ? "; its log is above" : "; the end of its log:"));
    if (!verbose) {
      for (const std::string& line : last_lines(failure.verifier_log, kVerifierLinesShown))
        r.lines.push_back("  " + line);
      r.lines.push_back("-v prints the verifier's whole log");
    }
    return r;
  }
  const std::string what = failure.program.empty() ? "the BPF programs" : "BPF program " + failure.program;
  if (err == -EPERM || err == -EACCES) {
    // The capabilities were checked before: what refused is something else.
    r.exit_status = kExitPermission;
    r.lines.push_back("the kernel refused to load " + what + ": " + why +
                      ", although cudatrace has CAP_BPF and CAP_PERFMON (those of a user namespace do not count; "
                      "kernel lockdown, an LSM or seccomp can also forbid BPF)");
    return r;
  }
  r.exit_status = kExitKernel;
  r.lines.push_back("cannot load " + what + ": " + why + (verbose ? "" : " (run with -v for details)"));
  return r;
}

}  // namespace cudatrace
