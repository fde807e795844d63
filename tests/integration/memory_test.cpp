// End to end (root, real eBPF): cudatrace's anonymous memory (RssAnon)
// stays under a cap and does not grow with the number of calls, on fixture
// programs of the shapes that used to make it grow (issue 10, part 4). The
// trace goes to /dev/null so the output buffer stays empty, and the ring is
// 4 MiB: the text of one ring's worth of records is formatted before it is
// written, which with the default 16 MiB ring and 1,000 busy threads alone
// takes ~40 MiB (an output concern, not a table that grows). The full
// 10-million-call measurement is scripts/bench-memory.sh (docs/benchmarks.md).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "harness.h"

namespace {

using namespace cudatrace_test;

constexpr long kCapKiB = 64 * 1024;

struct Sample {
  double at_s;
  long rss_anon_kib;
};

long rss_anon_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  long value = 0;
  while (status >> key) {
    if (key == "RssAnon:" && status >> value) return value;
    status.ignore(1 << 10, '\n');
  }
  return -1;
}

// Runs cudatrace on the fixture, sampling its RssAnon every 20 ms until it
// exits (at most `limit`); the exit status is returned in `status`.
// With `summary`, traces with --summary (the memory tracker and the tables
// run) instead of writing the trace to /dev/null.
std::vector<Sample> trace_and_sample(const std::vector<std::string>& app_args, int& status,
                                     std::chrono::seconds limit, bool summary = false) {
  std::vector<std::string> argv = {tracer()};
  for (const char* a : summary ? std::vector<const char*>{"--summary"} : std::vector<const char*>{"--json", "-o", "/dev/null", "--ring-mb", "4"})
    argv.push_back(a);
  argv.insert(argv.end(), {"--", INSIGHTS_APP});
  argv.insert(argv.end(), app_args.begin(), app_args.end());
  std::fflush(stdout);  // or the child's copy of what is buffered is printed again
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("FAKE_CUDA_SYNC_US", "0", 1);
    std::vector<char*> c;
    for (std::string& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    if (summary && !freopen("/dev/null", "w", stdout)) _exit(127);
    execv(c[0], c.data());
    _exit(127);
  }
  std::vector<Sample> samples;
  const auto start = std::chrono::steady_clock::now();
  status = -1;
  while (true) {
    const long kib = rss_anon_kib(pid);
    const double at = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      break;
    }
    if (kib > 0) samples.push_back({at, kib});
    if (at > limit.count()) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      ADD_FAILURE() << "cudatrace did not finish within " << limit.count() << " s";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return samples;
}

long peak(const std::vector<Sample>& samples, double until_s = 1e9) {
  long p = 0;
  for (const Sample& s : samples)
    if (s.at_s <= until_s) p = std::max(p, s.rss_anon_kib);
  return p;
}

class Memory : public NeedsRoot {};

// 3 M calls (1.5 M launches and their nested driver launches) on one stream,
// synchronised only at the end: the peak after the first third (~1 M calls)
// and the peak over the whole run differ by less than 4 MiB.
TEST_F(Memory, LaunchLoopOnOneStreamStaysFlat) {
  int status = 0;
  const auto samples = trace_and_sample({"launch-loop", "1500000", "1500000"}, status, std::chrono::seconds(500));
  ASSERT_EQ(status, 0);
  ASSERT_GT(samples.size(), 30u);
  const double run_s = samples.back().at_s;
  const long first_third = peak(samples, run_s / 3), whole = peak(samples);
  std::printf("RssAnon peak: %ld KiB over the first third (%.0f s), %ld KiB over the run\n", first_third, run_s / 3,
              whole);
  EXPECT_LT(whole, kCapKiB);
  EXPECT_LT(whole - first_third, 4 * 1024) << "RssAnon grew from " << first_third << " KiB to " << whole << " KiB";
}

// Over the per-process cap of streams and events, with and without the memory tracker.
TEST_F(Memory, StreamsAndEventsNeverDestroyedStayUnderTheCap) {
  int status = 0;
  for (bool summary : {false, true}) {
    const auto samples = trace_and_sample({"streams", "40000"}, status, std::chrono::seconds(300), summary);
    ASSERT_EQ(status, 0);
    std::printf("RssAnon peak%s: %ld KiB\n", summary ? " (--summary)" : "", peak(samples));
    EXPECT_LT(peak(samples), kCapKiB);
  }
}

TEST_F(Memory, ThousandThreadsStayUnderTheCap) {
  int status = 0;
  const auto samples = trace_and_sample({"threads", "1000", "100"}, status, std::chrono::seconds(300));
  ASSERT_EQ(status, 0);
  std::printf("RssAnon peak: %ld KiB\n", peak(samples));
  EXPECT_LT(peak(samples), kCapKiB);
}

TEST_F(Memory, HundredShortLivedChildrenStayUnderTheCap) {
  int status = 0;
  const auto samples = trace_and_sample({"children", "100", "500"}, status, std::chrono::seconds(300));
  ASSERT_EQ(status, 0);
  std::printf("RssAnon peak: %ld KiB\n", peak(samples));
  EXPECT_LT(peak(samples), kCapKiB);
}

}  // namespace
