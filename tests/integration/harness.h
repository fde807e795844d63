// Shared by the end-to-end tests: running cudatrace (or any command line)
// and reading what it wrote. CUDATRACE_BIN comes from tests/CMakeLists.txt.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace cudatrace_test {

using nlohmann::json;
using namespace std::chrono_literals;

struct Result {
  int status = -1;
  std::string out, err;
  std::vector<json> lines;  // stdout lines that are JSON objects
};

// The tracer's command line. CUDATRACE_TEST_ATTACH=MODE adds --attach MODE:
// ctest runs the suites again with "perf", the fallback for kernels before 6.6.
inline std::vector<std::string> tracer_argv() {
  std::vector<std::string> argv = {CUDATRACE_BIN};
  const char* mode = std::getenv("CUDATRACE_TEST_ATTACH");
  if (mode && *mode) argv.insert(argv.end(), {"--attach", mode});
  return argv;
}

// Perf-event uprobes (CUDATRACE_TEST_ATTACH=perf): they fire in every
// process, so the driver's functions are probed from the start there
// (Probes::defer_driver needs uprobe_multi links).
inline bool perf_attach() {
  const char* mode = std::getenv("CUDATRACE_TEST_ATTACH");
  return mode && std::string(mode) == "perf";
}

inline std::string tracer() {
  std::string cmdline;
  for (const std::string& a : tracer_argv()) cmdline += (cmdline.empty() ? "" : " ") + a;
  return cmdline;
}

// In a forked child: becomes the tracer with these arguments.
// A test that names its own --attach gets that one alone.
[[noreturn]] inline void exec_tracer(const std::vector<std::string>& args) {
  const bool own_attach = std::find(args.begin(), args.end(), "--attach") != args.end();
  std::vector<std::string> argv = own_attach ? std::vector<std::string>{CUDATRACE_BIN} : tracer_argv();
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> ptrs;
  for (const std::string& a : argv) ptrs.push_back(const_cast<char*>(a.c_str()));
  ptrs.push_back(nullptr);
  execv(ptrs[0], ptrs.data());
  _exit(127);
}
// The default groups plus query, whose cudaGetDevice many fixtures call.
inline constexpr const char* kWithQuery = " -f mem,xfer,launch,stream,event,device,query";

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string temp_path(const std::string& tag) {
  return "/tmp/cudatrace-test-" + std::to_string(getpid()) + "-" + tag;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) out.push_back(line);
  return out;
}

// Every line must parse: json::parse throws (the test fails) otherwise.
inline std::vector<json> parse_lines(const std::string& text) {
  std::vector<json> out;
  for (const std::string& line : lines_of(text)) out.push_back(json::parse(line));
  return out;
}

// Runs a shell command line; stdout and stderr are captured in files.
inline Result run(const std::string& cmdline) {
  Result r;
  const std::string out = temp_path("out"), err = temp_path("err");
  const int rc = std::system((cmdline + " >" + out + " 2>" + err).c_str());
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  for (const std::string& line : lines_of(r.out))
    if (!line.empty() && line[0] == '{') r.lines.push_back(json::parse(line));  // throws on invalid JSON
  return r;
}

// The records of one type ("call", "unfinished", "summary", ...), of one API if given.
inline std::vector<json> records(const std::vector<json>& lines, const std::string& type,
                                 const std::string& api = "") {
  std::vector<json> out;
  for (const json& j : lines)
    if (j["type"] == type && (api.empty() || j["api"] == api)) out.push_back(j);
  return out;
}

inline std::vector<json> calls(const Result& r, const std::string& api = "") { return records(r.lines, "call", api); }

// The closing "end" record, or null when the output does not end with one.
inline const json& end_of(const std::vector<json>& lines) {
  static const json kNone;
  return !lines.empty() && lines.back()["type"] == "end" ? lines.back() : kNone;
}

// Whether the running kernel's version is below major.minor.
inline bool kernel_older_than(int major, int minor) {
  utsname u{};
  int have_major = 0, have_minor = 0;
  if (uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &have_major, &have_minor) != 2) return false;
  return have_major < major || (have_major == major && have_minor < minor);
}

// How much slower than this VM the machine runs: CUDATRACE_TEST_TIME_SCALE
// (the 6.1 guest under emulation sets it, scripts/qemu-6.1/guest-init.sh).
// It stretches the limits of waits, never what a test asserts about time.
inline int time_scale() {
  const char* scale = std::getenv("CUDATRACE_TEST_TIME_SCALE");
  return scale && std::atoi(scale) > 1 ? std::atoi(scale) : 1;
}

inline bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit * time_scale();
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// The first child of `pid` (cudatrace's command is its only child), 0 if none.
inline pid_t first_child(pid_t pid) {
  std::ifstream children("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  pid_t child = 0;
  return children >> child ? child : 0;
}

// Base of the test fixtures: loading eBPF programs needs root.
class NeedsRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for eBPF";
  }
};

}  // namespace cudatrace_test
