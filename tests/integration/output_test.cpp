// The output path end to end (real eBPF, as root): the command's own stdout
// kept off a trace on stdout, consumers of the trace that stall, never read
// or go away (`| head -1`). Skipped (not passed) without root.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "json_checker.h"

namespace {

using namespace cudatrace_test;

class Output : public NeedsRoot {};

// A sanitized cudatrace (build-asan) reads the ring several times slower and
// its memory is mostly the sanitizer's: the checks of speed and memory are
// for the real build; the counts are checked in both.
#ifdef CUDATRACE_SANITIZED
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Asserts that every line of `text` is one JSON object by the strict checker
// (the end line included) and returns them parsed.
std::vector<json> strict_json_lines(const std::string& text) {
  std::vector<json> out;
  for (const std::string& line : lines_of(text)) {
    JsonValue v;
    std::string error;
    EXPECT_TRUE(JsonParser::parse(line, v, error) && v.kind == JsonValue::Object) << error << ": " << line;
    out.push_back(json::parse(line));
  }
  return out;
}

bool have_jq() { return std::system("command -v jq >/dev/null 2>&1") == 0; }

std::uint64_t number_after(const std::string& text, const std::string& pattern) {
  std::smatch m;
  return std::regex_search(text, m, std::regex(pattern)) ? std::stoull(m[1]) : 0;
}

// ---- The command's stdout and the trace ----------------------------------------

TEST_F(Output, CommandStdoutStaysOffAJsonTraceOnStdout) {
  const Result r = run(tracer() + kWithQuery + " --json -- " OUTPUT_APP " chatty 60");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<json> lines = strict_json_lines(r.out);
  EXPECT_EQ(records(lines, "call", "cudaGetDevice").size(), 60u) << r.out;
  EXPECT_EQ(end_of(lines)["calls"], 60) << r.out;
  // The program's prints are not lost: they went to cudatrace's stderr.
  EXPECT_NE(r.err.find("{\"type\":\"call\",\"api\":\"not a trace line 0\"\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("plain program output 58\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("half a line 59, output_app: stderr line 59\nthe other half\n"), std::string::npos) << r.err;
}

TEST_F(Output, JqParsesEveryLineOfTheTraceOfAChattyProgram) {
  if (!have_jq()) GTEST_SKIP() << "jq is not installed (scripts/install-deps.sh installs it)";
  const Result r = run(tracer() + kWithQuery + " --json -- " OUTPUT_APP " chatty 60 | jq -c .");
  ASSERT_EQ(r.status, 0) << r.err;  // jq's status: a parse error is 2, 4 or 5
  const std::vector<json> lines = strict_json_lines(r.out);
  ASSERT_EQ(lines.size(), 61u) << r.out;
  EXPECT_EQ(records(lines, "call", "cudaGetDevice").size(), 60u);
  EXPECT_EQ(end_of(lines)["lost"], 0);
}

TEST_F(Output, TextTraceOnStdoutIsTheTraceAlone) {
  const Result r = run(tracer() + kWithQuery + " -- " OUTPUT_APP " chatty 30");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 1u + 30u) << r.out;
  EXPECT_EQ(lines[0].rfind("TIME(s)", 0), 0u);
  for (std::size_t i = 1; i < lines.size(); ++i)
    EXPECT_TRUE(std::regex_search(lines[i], std::regex(R"(^[0-9]+\.[0-9]{6} +output_app .* cudaGetDevice )"))) << lines[i];
  EXPECT_NE(r.err.find("plain program output 1\n"), std::string::npos) << r.err;
}

TEST_F(Output, WithAnOutputFileTheCommandKeepsItsStdout) {
  const std::string trace = temp_path("chatty.json"), program_out = temp_path("chatty.out");
  // (The program's stdout into a file of its own: run() would parse its JSON-like lines.)
  const Result r = run("(" + tracer() + kWithQuery + " --json -o " + trace + " -- " OUTPUT_APP " chatty 30 >" + program_out + ")");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string program = read_file(program_out);
  EXPECT_NE(program.find("plain program output 1\n"), std::string::npos) << program;
  EXPECT_EQ(r.err.find("plain program output"), std::string::npos) << r.err;
  const std::vector<json> lines = strict_json_lines(read_file(trace));
  std::remove(trace.c_str());
  std::remove(program_out.c_str());
  EXPECT_EQ(records(lines, "call", "cudaGetDevice").size(), 30u);
}

// ---- Consumers that stall, never read, go away -----------------------------------

TEST_F(Output, ConsumerStallingTwoSecondsLosesNothing) {
  // 400,000 records (about 80 MB of JSON) while the consumer reads nothing
  // for 2 s: the run is over before it reads, so all of it waits in memory.
  // (Into a file: run() would keep every line parsed in memory.)
  const std::string trace = temp_path("stalled.json");
  const Result r = run("(" + tracer() + kWithQuery + " --json -- " OUTPUT_APP " calls 200000 | (sleep 2; cat) >" + trace + ")");
  ASSERT_EQ(r.status, 0) << r.err;
  std::size_t call_lines = 0;
  json end;
  std::ifstream in(trace);
  for (std::string line; std::getline(in, line);) {
    EXPECT_TRUE(json::accept(line)) << line;
    if (line.rfind(R"({"type":"call",)", 0) == 0) ++call_lines;
    if (line.rfind(R"({"type":"end",)", 0) == 0) end = json::parse(line);
  }
  std::remove(trace.c_str());
  ASSERT_FALSE(end.is_null()) << "no end line; stderr: " << r.err;
  EXPECT_EQ(end["lost_detail"]["output"], 0) << end.dump();
  EXPECT_EQ(end["calls"].get<std::uint64_t>() + end["lost"].get<std::uint64_t>(), 400000u) << end.dump();
  EXPECT_EQ(call_lines, end["calls"].get<std::uint64_t>());
  if (!kSanitized) EXPECT_EQ(end["lost"], 0) << end.dump();
}

// /proc/PID/status's VmHWM (peak RSS) in KiB, once PID runs cudatrace (before
// the exec it is a copy of this test process); 0 before and once it is gone.
std::uint64_t peak_rss_kib(pid_t pid) {
  const std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
  if (status.rfind("Name:\tcudatrace\n", 0) != 0) return 0;
  return number_after(status, R"(VmHWM:\s+(\d+) kB)");
}

TEST_F(Output, ConsumerThatNeverReadsLosesCountedRecordsInBoundedMemory) {
  // 1,000,000 records (about 200 MB of JSON) into a pipe that nobody reads,
  // with an 8 MiB buffer.
  constexpr unsigned kBufferMb = 8;
  constexpr std::uint64_t kRecords = 1000000;
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const std::string err = temp_path("never-read-err");
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    const int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, STDERR_FILENO);
    close(out[0]);
    execl(CUDATRACE_BIN, CUDATRACE_BIN, "-f", "device,query", "--json", "--buffer-mb", std::to_string(kBufferMb).c_str(), "--",
          OUTPUT_APP, "calls", std::to_string(kRecords / 2).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::uint64_t peak_kib = 0;
  int status = 0;
  const bool exited = wait_until(
      [&] {
        peak_kib = std::max(peak_kib, peak_rss_kib(pid));
        return waitpid(pid, &status, WNOHANG) == pid;
      },
      90s);
  if (!exited) kill(pid, SIGKILL), waitpid(pid, nullptr, 0);
  ASSERT_TRUE(exited) << "cudatrace did not end";
  // What did get out: whole lines; the rest of a line cut by the give-up is not a record.
  std::string written;
  char buf[65536];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) written.append(buf, n);
  close(out[0]);
  const std::string e = read_file(err);
  std::remove(err.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << e;
  const auto whole_lines = static_cast<std::uint64_t>(std::count(written.begin(), written.end(), '\n'));
  for (const std::string& line : lines_of(written.substr(0, written.rfind('\n') + 1)))
    EXPECT_TRUE(json::accept(line)) << line;

  // The end line could not be written: its counts are on stderr.
  EXPECT_NE(e.find("cudatrace: warning: standard output was not read for 5 s: gave up writing it"), std::string::npos)
      << e;
  const std::uint64_t traced = number_after(e, R"(cudatrace: (\d+) calls traced)");
  const std::uint64_t lost = number_after(e, R"(calls traced, (\d+) lost)");
  const std::uint64_t lost_output = number_after(e, R"(lost (\d+) records the output's consumer did not read)");
  EXPECT_EQ(traced, whole_lines) << e;
  // Most records reach the output and are lost there, unless the reader is
  // slow (the sanitized build's): then the ring loses most of them first.
  EXPECT_GT(lost_output, kSanitized ? 0 : kRecords / 2) << e;
  EXPECT_EQ(traced + lost, kRecords) << e;  // every record written or counted, exactly
  // Memory: the buffer's cap plus what any run of cudatrace takes (the ring
  // buffer's 16 MiB, the BPF object, libraries: the exporters' libcurl,
  // OpenSSL and libprotobuf among them); without the cap the whole 200 MB
  // would wait in memory.
  constexpr std::uint64_t kMarginMib = 56;
  EXPECT_GT(peak_kib, 0u);
  if (!kSanitized) EXPECT_LT(peak_kib, (kBufferMb + kMarginMib) * 1024) << "peak RSS " << peak_kib << " KiB";
  std::printf("peak RSS %.1f MiB with --buffer-mb %u; %llu records written, %llu lost\n", peak_kib / 1024.0,
              kBufferMb, static_cast<unsigned long long>(traced), static_cast<unsigned long long>(lost));
}

TEST_F(Output, HeadOneEndsTheTracerQuietlyAndTheCommandRunsOnUntraced) {
  // (-f device --layer runtime: the fake libraries export all of these, so cudatrace has no warning to give.)
  for (const std::string format : {"--json -f device,query --layer runtime", "-f device,query --layer runtime"}) {
    SCOPED_TRACE(format);
    const std::string err = temp_path("head-err"), status_file = temp_path("head-status");
    // The command calls for 3 s; head takes the first line and leaves.
    const Result r = run("{ timeout 30 " + tracer() + " " + format + " -- " OUTPUT_APP " for-ms 3000 2>" + err +
                         "; echo $? >" + status_file + "; } | head -1");
    const std::string first = r.out;
    const std::string tracer_status = read_file(status_file);
    const std::string before = read_file(err);
    std::remove(status_file.c_str());
    EXPECT_EQ(tracer_status, "141\n") << before;
    if (format.rfind("--json", 0) == 0)
      EXPECT_TRUE(json::accept(first)) << first;
    else
      EXPECT_EQ(first.rfind("TIME(s)", 0), 0u) << first;
    EXPECT_EQ(before.find("cudatrace:"), std::string::npos) << "not quiet: " << before;
    // The command outlives the tracer, runs to its end, and says so on what was the tracer's stderr.
    EXPECT_EQ(before.find("output_app: done"), std::string::npos) << before;
    EXPECT_TRUE(wait_until([&] { return read_file(err).find("output_app: done") != std::string::npos; }, 20s))
        << read_file(err);
    std::remove(err.c_str());
  }
}

}  // namespace
