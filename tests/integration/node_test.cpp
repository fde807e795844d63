// Whole-node mode and the Prometheus exporter end to end: cudatrace
// --all-processes --prometheus, scraped by Debian's real Prometheus server on
// loopback, checked with PromQL through its HTTP API. The fixture runs under
// a name of its own (a symbolic link) so that other CUDA programs on this
// host, which whole-node mode traces too, do not count.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "harness.h"
#include "http_client.h"

namespace cudatrace_test {
namespace {

namespace fs = std::filesystem;

// A program running in the background, its output in files, its standard
// input a pipe (release() writes a line); stopped (SIGTERM, then SIGKILL
// after 10 s) when destroyed.
class Daemon {
 public:
  Daemon(const std::vector<std::string>& argv, const std::string& tag, const std::vector<std::string>& env = {})
      : out_(temp_path(tag + ".out")), err_(temp_path(tag + ".err")) {
    int in[2];
    if (pipe2(in, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      const int out = open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(err, 2);
      dup2(in[0], 0);
      for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(in[0]);
    stdin_ = in[1];
  }
  void release() {
    if (stdin_ >= 0 && write(stdin_, "go\n", 3) == 3) close(stdin_);
    stdin_ = -1;
  }
  ~Daemon() {
    if (stdin_ >= 0) close(stdin_);
    stop();
    std::remove(out_.c_str());
    std::remove(err_.c_str());
  }
  // SIGTERM and wait; returns the exit status (-1: killed or not ours).
  int stop() {
    if (pid_ <= 0) return status_;
    kill(pid_, SIGTERM);
    int st = 0;
    if (!wait_until([&] { return waitpid(pid_, &st, WNOHANG) == pid_; }, 10s)) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &st, 0);
    }
    pid_ = -1;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return status_;
  }
  bool running() {
    int st = 0;
    return pid_ > 0 && waitpid(pid_, &st, WNOHANG) == 0;
  }
  std::string err() const { return read_file(err_); }
  pid_t pid() const { return pid_; }

 private:
  std::string out_, err_;
  pid_t pid_ = -1;
  int status_ = -1;
  int stdin_ = -1;
};

// One HTTP GET on loopback; the body, or "" on any failure (5 s limit).
std::string http_get(int port, const std::string& target) {
  const std::string response =
      http::http_exchange(port, "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  const auto body = response.find("\r\n\r\n");
  return response.rfind("HTTP/1.", 0) == 0 && response.find(" 200 ") < body && body != std::string::npos
             ? response.substr(body + 4)
             : std::string();
}

std::string url_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// A TCP port free on loopback right now.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

// The single value of an instant PromQL query, or nullopt (no result yet).
std::optional<double> promql(int port, const std::string& query) {
  const std::string body = http_get(port, "/api/v1/query?query=" + url_encode(query));
  if (body.empty()) return std::nullopt;
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return std::nullopt;
  const json& result = j["data"]["result"];
  if (!result.is_array() || result.size() != 1) return std::nullopt;
  return std::stod(result[0]["value"][1].get<std::string>());
}

// Runs `argv` (argv[0] a path, which names the process) to its end, at most
// `limit`; its exit status, -1 if it did not exit normally in time.
int run_to_end(const std::vector<std::string>& argv, std::chrono::milliseconds limit = 20s) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int null_fd = open("/dev/null", O_RDWR);
    dup2(null_fd, 0);
    dup2(null_fd, 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int st = 0;
  if (!wait_until([&] { return waitpid(pid, &st, WNOHANG) == pid; }, limit)) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// The sum of the samples of `metric` whose labels contain every one of
// `labels` (each like `api="cudaMalloc"`) in an exposition.
double metric_sum(const std::string& text, const std::string& metric, const std::vector<std::string>& labels) {
  double sum = 0;
  for (const std::string& line : lines_of(text)) {
    if (line.rfind(metric + "{", 0) != 0) continue;
    const auto close = line.rfind("} ");
    if (close == std::string::npos) continue;
    const std::string set = line.substr(metric.size(), close - metric.size() + 1);
    bool all = true;
    for (const std::string& l : labels) all = all && set.find(l) != std::string::npos;
    if (all) sum += std::stod(line.substr(close + 2));
  }
  return sum;
}

// A label value as the text exposition format writes it.
std::string escaped(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// `promtool check metrics` on an exposition: "" when it passes, else what it said.
std::string promtool_check(const std::string& text, const std::string& dir) {
  const std::string file = dir + "/exposition.txt";
  std::ofstream(file) << text;
  const Result r = run("timeout 60 /usr/bin/promtool check metrics < " + file);
  return r.status == 0 && r.out.empty() && r.err.empty() ? "" : "status " + std::to_string(r.status) + ": " + r.out + r.err;
}

// A field of /proc/PID/status in KiB (VmRSS, RssAnon, VmHWM), -1 if absent.
long status_kib(pid_t pid, const std::string& field) {
  for (const std::string& line : lines_of(read_file("/proc/" + std::to_string(pid) + "/status")))
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

class Node : public NeedsRoot {
 protected:
  void SetUp() override {
    NeedsRoot::SetUp();
    if (IsSkipped()) return;
    if (access("/usr/bin/prometheus", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/prometheus (apt install prometheus)";
    dir_ = temp_path("node");
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Starts cudatrace --all-processes --prometheus on a port it picks (and
  // `extra` arguments); returns the port, 0 if it did not come up within 60 s.
  int start_tracer(std::unique_ptr<Daemon>& tracer, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {tracer_path(), "-v", "--all-processes", "--prometheus", "127.0.0.1:0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    tracer = std::make_unique<Daemon>(argv, "tracer");
    const std::regex serving("serving Prometheus metrics on port ([0-9]+)");
    std::smatch m;
    int port = 0;
    wait_until(
        [&] {
          const std::string err = tracer->err();
          if (std::regex_search(err, m, serving)) port = std::stoi(m[1]);
          return port != 0 || !tracer->running();
        },
        60s);
    return port;
  }
  static std::string tracer_path() { return tracer(); }

  std::string dir_;
};

TEST_F(Node, PrometheusScrapesCountsOfProcessesRunningBeforeAndStartedAfter) {
  // The fixture under a name of its own: comm is what the metrics label.
  const std::string name = "ctn" + std::to_string(getpid() % 100000);
  const std::string app = dir_ + "/" + name;
  fs::create_symlink(FAKE_APP, app);
  const std::vector<std::string> env = {"FAKE_CUDA_SYNC_US=30000"};  // cudaStreamSynchronize: 30 ms

  // One process maps the runtime before cudatrace starts...
  Daemon before({app, "wait-then-basic"}, "before", env);
  std::unique_ptr<Daemon> tracer;
  const int ct_port = start_tracer(tracer);
  ASSERT_NE(ct_port, 0) << tracer->err();
  const std::string self = "pid " + std::to_string(before.pid()) + ": ";
  ASSERT_TRUE(tracer->err().find(self) != std::string::npos) << "the process running at start was not probed:\n"
                                                             << tracer->err();
  // ... and one starts after: no process is stopped, so wait until the new
  // process's runtime is probed (the exec record, the loader probe or the
  // rescan, at most 5 s) before letting it call.
  Daemon after({app, "wait-then-basic"}, "after", env);
  const std::string after_line = "pid " + std::to_string(after.pid()) + ": ";
  EXPECT_TRUE(wait_until([&] { return tracer->err().find(after_line) != std::string::npos; }, 20s))
      << tracer->err();
  // `basic`: 2 cudaMalloc (one fails), one cudaStreamSynchronize, one launch,
  // a 4096-byte copy each way. One process after the other.
  before.release();
  EXPECT_TRUE(wait_until([&] { return !before.running(); }, 20s));
  after.release();
  EXPECT_TRUE(wait_until([&] { return !after.running(); }, 20s));

  const int prom_port = free_port();
  ASSERT_NE(prom_port, 0);
  {
    std::ofstream config(dir_ + "/prometheus.yml");
    config << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
           << "scrape_configs:\n  - job_name: cudatrace\n    static_configs:\n      - targets: ['127.0.0.1:" << ct_port
           << "']\n";
  }
  Daemon prometheus({"/usr/bin/prometheus", "--config.file=" + dir_ + "/prometheus.yml",
                     "--storage.tsdb.path=" + dir_ + "/tsdb", "--web.listen-address=127.0.0.1:" + std::to_string(prom_port),
                     "--log.level=warn"},
                    "prometheus");
  const std::string by_comm = "comm=\"" + name + "\"";
  std::optional<double> mallocs;
  EXPECT_TRUE(wait_until(
      [&] {
        mallocs = promql(prom_port, "sum(cuda_api_calls_total{api=\"cudaMalloc\"," + by_comm + "})");
        return mallocs && *mallocs >= 4;
      },
      60s))
      << "Prometheus: " << prometheus.err() << "\ncudatrace: " << tracer->err();
  ASSERT_TRUE(mallocs);
  EXPECT_EQ(*mallocs, 4);  // 2 processes x 2
  EXPECT_EQ(promql(prom_port, "sum(cuda_api_calls_total{api=\"cudaMalloc\",error=\"success\"," + by_comm + "})"), 2);
  EXPECT_EQ(promql(prom_port,
                   "sum(cuda_api_calls_total{api=\"cudaMalloc\",error=\"cudaErrorMemoryAllocation\"," + by_comm + "})"),
            2);
  // The two 30 ms synchronizations lie in the (25 ms, 50 ms] bucket.
  const std::optional<double> median = promql(
      prom_port, "histogram_quantile(0.5, sum by (le) (cuda_api_duration_seconds_bucket{api=\"cudaStreamSynchronize\"," +
                     by_comm + "}))");
  ASSERT_TRUE(median);
  EXPECT_GT(*median, 0.025);
  EXPECT_LE(*median, 0.05);
  EXPECT_EQ(promql(prom_port, "sum(cuda_kernel_launches_total{" + by_comm + "})"), 2);
  EXPECT_EQ(promql(prom_port, "sum(cuda_transfer_bytes_total{direction=\"HtoD\"," + by_comm + "})"), 8192);
  const std::optional<double> hits = promql(prom_port, "sum(cudatrace_probe_hits_total{" + by_comm + "})");
  ASSERT_TRUE(hits);
  EXPECT_GT(*hits, 0);
  // Both processes are gone: their allocations no longer count as live; the
  // peak is the largest one process held (1 MiB each).
  EXPECT_EQ(promql(prom_port, "sum(cuda_device_memory_bytes{" + by_comm + "})"), 0);
  EXPECT_EQ(promql(prom_port, "max(cuda_device_memory_peak_bytes{" + by_comm + "})"), 1048576);
  EXPECT_EQ(promql(prom_port, "count(cuda_api_calls_total{pid!=\"\"})"), std::nullopt);  // no pid label
  EXPECT_EQ(prometheus.stop(), 0) << prometheus.err();
  EXPECT_EQ(tracer->stop(), 0) << tracer->err();
}

#ifdef CUBLAS_APP
// Whole-node probes carry no pid filter, so the kernel writes their int3 into
// every private mapping of the probed file, a reader's too. A second cudatrace
// must still recognise cuBLAS's static runtime by its code (fingerprints), so
// it reads ELF files through shared mappings, which the kernel leaves alone.
TEST_F(Node, AnotherTracersProbesDoNotHideTheStaticRuntime) {
  std::unique_ptr<Daemon> tracer;
  const int ct_port = start_tracer(tracer);
  ASSERT_NE(ct_port, 0) << tracer->err();
  // A process holding libcublas (its embedded runtime gets probed) while the
  // second tracer reads the same file.
  const std::string cublas = fs::path(CUBLAS_LIB).string();
  Daemon holder({FAKE_APP, "wait-then-basic"}, "holder", {"LD_PRELOAD=" + cublas});
  const std::string line = "pid " + std::to_string(holder.pid()) + ": ";
  ASSERT_TRUE(wait_until(
      [&] {
        const std::string err = tracer->err();
        const auto at = err.find(line);
        return at != std::string::npos && err.find("libcublas", at) != std::string::npos;
      },
      60s))
      << tracer->err();
  const Result r = run(tracer_path() + " --json -- " CUBLAS_APP);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto frees = calls(r, "cudaFree");
  ASSERT_EQ(frees.size(), 1u) << r.out << r.err;
  EXPECT_EQ(frees[0]["ret_name"], "cudaErrorInsufficientDriver");
  holder.release();
  EXPECT_TRUE(wait_until([&] { return !holder.running(); }, 20s));
  EXPECT_EQ(tracer->stop(), 0) << tracer->err();
}
#endif

#ifdef BUDGET_APP
// Exporter mode under --max-overhead: the launches are sampled, their series
// hold what the sampled windows saw and the ratio is published beside them;
// allocations stay exact.
TEST_F(Node, BudgetSampledSeriesAreMarked) {
  const std::string name = "ctb" + std::to_string(getpid() % 100000);
  const std::string app = dir_ + "/" + name;
  fs::create_symlink(BUDGET_APP, app);
  std::unique_ptr<Daemon> tracer = std::make_unique<Daemon>(
      std::vector<std::string>{tracer_path(), "-v", "--all-processes", "--prometheus", "127.0.0.1:0", "--max-overhead",
                               "5"},
      "tracer");
  const std::regex serving("serving Prometheus metrics on port ([0-9]+)");
  std::smatch m;
  int port = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        const std::string err = tracer->err();
        if (std::regex_search(err, m, serving)) port = std::stoi(m[1]);
        return port != 0 || !tracer->running();
      },
      60s));
  ASSERT_NE(port, 0) << tracer->err();
  // The fake runtime probed before budget_app starts (a library file new to
  // cudatrace is probed a few ms after it is mapped: docs/prometheus.md), so
  // that its allocations are all seen.
  Daemon holder({FAKE_APP, "wait-then-basic"}, "holder");
  const std::string holder_line = "pid " + std::to_string(holder.pid()) + ": ";
  ASSERT_TRUE(wait_until([&] { return tracer->err().find(holder_line) != std::string::npos; }, 20s)) << tracer->err();
  // 4 us of work a launch: tracing every launch (one trap each) costs ~20 %.
  const Result app_run = run("timeout 60 " + app + " 6000 4");
  holder.release();
  ASSERT_EQ(app_run.status, 0) << app_run.err;
  std::smatch t;
  ASSERT_TRUE(std::regex_search(app_run.out, t, std::regex(R"((\d+) launches, (\d+) mallocs)"))) << app_run.out;
  const double launches = std::stod(t[1]), mallocs = std::stod(t[2]);
  // Two ticks of the exporter after the program's end.
  std::this_thread::sleep_for(2500ms);
  const std::string metrics = http_get(port, "/metrics");
  auto value = [&](const std::string& series) -> double {
    std::smatch v;
    const std::regex re(series + "\\{[^}]*comm=\"" + name + "\"[^}]*\\} ([0-9.e+]+)\\n");
    return std::regex_search(metrics, v, re) ? std::stod(v[1]) : -1;
  };
  const double counted = value("cuda_kernel_launches_total");
  EXPECT_GT(counted, 0) << metrics;
  EXPECT_LT(counted, 0.8 * launches) << "a budget of 5 % where tracing every launch costs ~20 % or more\n" << metrics;
  std::smatch r;
  ASSERT_TRUE(std::regex_search(metrics, r,
                                std::regex("cudatrace_api_seen_ratio\\{api=\"cudaLaunchKernel\",layer=\"runtime\"\\} "
                                           "([0-9.e+-]+)\\n")))
      << metrics;
  EXPECT_GT(std::stod(r[1]), 0.0);
  EXPECT_LT(std::stod(r[1]), 1.0);
  std::smatch a;
  ASSERT_TRUE(std::regex_search(
      metrics, a,
      std::regex("cuda_api_calls_total\\{api=\"cudaMalloc\",comm=\"" + name + "\"[^}]*\\} ([0-9.e+]+)\\n")))
      << metrics;
  EXPECT_EQ(std::stod(a[1]), mallocs) << "allocations stay exact";
  EXPECT_EQ(metrics.find("cudatrace_api_seen_ratio{api=\"cudaMalloc\""), std::string::npos);
  // The budget's own state, for whoever watches the fleet.
  auto gauge = [&](const std::string& name) -> double {
    std::smatch g;
    return std::regex_search(metrics, g, std::regex("\n" + name + " ([0-9.e+-]+)\n")) ? std::stod(g[1]) : -1;
  };
  EXPECT_EQ(gauge("cudatrace_budget_max_ratio"), 0.05) << metrics;
  EXPECT_GT(gauge("cudatrace_budget_estimated_cost_ratio"), 0.0) << metrics;
  EXPECT_LT(gauge("cudatrace_budget_estimated_cost_ratio"), 1.0) << metrics;
  EXPECT_GT(gauge("cudatrace_budget_hot_attached_ratio"), 0.0) << metrics;
  EXPECT_LT(gauge("cudatrace_budget_hot_attached_ratio"), 1.0) << metrics;
  EXPECT_EQ(tracer->stop(), 0) << tracer->err();
}

// A process's CPU time (user + system) in ms, from /proc/PID/stat; -1 if unreadable.
double cpu_ms_of(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i)
    if (i >= 14) ticks += std::stod(field);
  return ticks * 1000.0 / double(sysconf(_SC_CLK_TCK));
}

// The CPU time a process (launch-bound budget_app here) spent before
// whole-node tracing found it is not "while traced": the end report's share
// counts from its discovery.
TEST_F(Node, CostShareCountsFromWhenTheProcessWasFound) {
  // Long enough to outlive a slow start-up on a loaded machine (stopped at the end).
  Daemon app({BUDGET_APP, "120000", "10"}, "app");
  std::this_thread::sleep_for(1500ms);
  const double before_ms = cpu_ms_of(app.pid());
  ASSERT_GT(before_ms, 0);
  std::unique_ptr<Daemon> tracer;
  ASSERT_NE(start_tracer(tracer), 0) << tracer->err();
  std::this_thread::sleep_for(1500ms);
  ASSERT_TRUE(app.running());
  EXPECT_EQ(tracer->stop(), 0) << tracer->err();
  const double after_ms = cpu_ms_of(app.pid());
  std::smatch m;
  const std::string err = tracer->err();
  ASSERT_TRUE(std::regex_search(err, m,
                                std::regex(R"(added [^0-9]*([0-9.]+) ms of CPU time to budget_app \(PID )" +
                                           std::to_string(app.pid()) + R"(\), ([0-9.]+) % of its CPU time while traced)")))
      << err;
  const double traced_cpu_ms = std::stod(m[1]) / (std::stod(m[2]) / 100);
  EXPECT_LE(traced_cpu_ms, 1.05 * (after_ms - before_ms) + 20) << "CPU before: " << before_ms << " ms, after: "
                                                               << after_ms << " ms\n" << err;
  EXPECT_GT(traced_cpu_ms, 0);
}
#endif

#ifdef REAL_APP_SHARED
// The issue's case: with the exporter running, a fresh program maps the
// toolkit's libcudart (no process has it mapped), makes 3 cudaMalloc calls
// and exits within milliseconds. The file was probed ahead at start, so the
// uprobes reach the program's mapping at mmap: all 3 are counted.
TEST_F(Node, ShortLivedProgramOfAProbedAheadLibraryMissesNothing) {
  const Result ldd = run("ldd " REAL_APP_SHARED);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(ldd.out, m, std::regex(R"(libcudart\.so\.13 => (\S+))"))) << ldd.out;
  struct stat cudart {};
  ASSERT_EQ(stat(m[1].str().c_str(), &cudart), 0) << m[1];
  std::unique_ptr<Daemon> tracer;
  const int port = start_tracer(tracer);
  ASSERT_NE(port, 0) << tracer->err();
  // The program's libcudart is one of the files probed ahead.
  bool probed_ahead = false;
  const std::regex ahead(R"(cudatrace: (\S+): \d+ APIs, probed ahead)");
  const std::string err = tracer->err();
  for (auto it = std::sregex_iterator(err.begin(), err.end(), ahead); it != std::sregex_iterator(); ++it) {
    struct stat st {};
    probed_ahead |= stat((*it)[1].str().c_str(), &st) == 0 && st.st_ino == cudart.st_ino && st.st_dev == cudart.st_dev;
  }
  ASSERT_TRUE(probed_ahead) << m[1] << " was not probed ahead:\n" << err;

  const std::string name = "cts" + std::to_string(getpid() % 100000);
  const std::string app = dir_ + "/" + name;
  fs::create_symlink(REAL_APP_SHARED, app);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(run_to_end({app, "mallocs", "3"}), 0);
  const auto lived = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  std::printf("the program ran %lld ms (fork to reaped)\n", static_cast<long long>(lived.count()));
  const std::vector<std::string> labels = {"api=\"cudaMalloc\"", "comm=\"" + name + "\""};
  std::string metrics;
  EXPECT_TRUE(wait_until(
      [&] {
        metrics = http_get(port, "/metrics");
        return metric_sum(metrics, "cuda_api_calls_total", labels) >= 3;
      },
      10s))
      << metrics;
  EXPECT_EQ(metric_sum(metrics, "cuda_api_calls_total", labels), 3) << metrics;
  EXPECT_EQ(metric_sum(metrics, "cuda_api_calls_total",
                       {"api=\"cudaMalloc\"", "comm=\"" + name + "\"", "error=\"cudaErrorInsufficientDriver\""}),
            3)
      << metrics;
  EXPECT_EQ(tracer->stop(), 0) << tracer->err();
}
#endif

// A busy node: 100 short CUDA processes (the fake runtime, probed ahead with
// --lib) start and exit, 10 at a time, half of them launching 5,000 kernels
// as fast as they can, while a scraper reads /metrics every 100 ms. Every
// scrape is answered, every call is counted, nothing is lost.
TEST_F(Node, BusyNodeEveryScrapeAnsweredEveryCallCounted) {
  std::unique_ptr<Daemon> tracer;
  const int port = start_tracer(tracer, {"--lib", FAKE_CUDART_LIB, "--lib", FAKE_CUDA_DRIVER_LIB});
  ASSERT_NE(port, 0) << tracer->err();
  const long rss_start_kib = status_kib(tracer->pid(), "VmRSS");

  std::atomic<bool> done{false};
  std::vector<double> latencies_ms;
  int failed = 0;
  std::thread scraper([&] {
    auto next = std::chrono::steady_clock::now();
    while (!done) {
      const auto start = std::chrono::steady_clock::now();
      const bool ok = !http_get(port, "/metrics").empty();  // 5 s limit
      latencies_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      failed += !ok;
      next += 100ms;
      std::this_thread::sleep_until(next);
    }
  });

  const int kProcesses = 100, kAtOnce = 10, kNames = 4, kLaunches = 5000;
  std::vector<std::string> names;
  for (int i = 0; i < kNames; ++i) {
    names.push_back("ctbusy" + std::to_string(getpid() % 1000) + "_" + std::to_string(i));
    fs::create_symlink(FAKE_APP, dir_ + "/" + names.back());
  }
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> failed_apps{0};
  for (int batch = 0; batch < kProcesses / kAtOnce; ++batch) {
    std::vector<std::thread> apps;
    for (int i = 0; i < kAtOnce; ++i) {
      const std::string app = dir_ + "/" + names[static_cast<std::size_t>(i % kNames)];
      const std::vector<std::string> argv =
          i % 2 ? std::vector<std::string>{app, "launch-loop", std::to_string(kLaunches)} : std::vector<std::string>{app, "basic"};
      apps.emplace_back([&failed_apps, argv] {
        if (run_to_end(argv, 60s) != 0) ++failed_apps;
      });
    }
    for (std::thread& t : apps) t.join();
  }
  const double ran_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The exporter reads the kernel's counts every second: two reads later,
  // every process's calls are in.
  std::string metrics;
  wait_until(
      [&] {
        metrics = http_get(port, "/metrics");
        double mallocs = 0;
        for (const std::string& n : names)
          mallocs += metric_sum(metrics, "cuda_api_calls_total", {"api=\"cudaMalloc\"", "comm=\"" + n + "\""});
        return mallocs >= kProcesses;
      },
      10s);
  std::this_thread::sleep_for(2500ms);  // and the launch loops' last counts
  metrics = http_get(port, "/metrics");
  done = true;
  scraper.join();
  EXPECT_EQ(failed_apps, 0);
  double mallocs = 0, launches = 0;
  for (const std::string& n : names) {
    mallocs += metric_sum(metrics, "cuda_api_calls_total", {"api=\"cudaMalloc\"", "comm=\"" + n + "\""});
    launches += metric_sum(metrics, "cuda_kernel_launches_total", {"comm=\"" + n + "\""});
  }
  // `basic`: 2 cudaMalloc (one fails) and a launch; `launch-loop N`: N launches.
  EXPECT_EQ(mallocs, kProcesses) << metrics;
  EXPECT_EQ(launches, kProcesses / 2 * (1.0 + kLaunches)) << metrics;
  EXPECT_EQ(metric_sum(metrics, "cudatrace_lost_records_total", {}), 0) << metrics;
  EXPECT_EQ(promtool_check(metrics, dir_), "");

  std::vector<double> sorted = latencies_ms;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_FALSE(sorted.empty());
  const auto at = [&sorted](double q) { return sorted[std::min(sorted.size() - 1, std::size_t(q * double(sorted.size())))]; };
  const long rss_kib = status_kib(tracer->pid(), "VmRSS"), anon_kib = status_kib(tracer->pid(), "RssAnon"),
             hwm_kib = status_kib(tracer->pid(), "VmHWM");
  std::printf("busy node: %d processes in %.1f s; %zu scrapes every 100 ms: p50 %.1f ms, p99 %.1f ms, max %.1f ms, "
              "%d failed; cudatrace: VmRSS %.1f MiB at start, %.1f MiB after (anonymous %.1f MiB), peak %.1f MiB\n",
              kProcesses, ran_s, sorted.size(), at(0.5), at(0.99), sorted.back(), failed, rss_start_kib / 1024.0,
              rss_kib / 1024.0, anon_kib / 1024.0, hwm_kib / 1024.0);
  EXPECT_EQ(failed, 0);
  EXPECT_LT(at(0.99), 1000) << "a scrape took more than a second";
  EXPECT_EQ(tracer->stop(), 0) << tracer->err();
}

// Process names may hold quotes, backslashes, newlines, braces and bytes
// that are not UTF-8: their label values are escaped per the text format
// and made valid UTF-8, and `promtool check metrics` accepts the whole.
TEST_F(Node, HostileProcessNamesAreEscapedLabelValues) {
  std::unique_ptr<Daemon> tracer;
  const int port = start_tracer(tracer, {"--lib", FAKE_CUDART_LIB, "--lib", FAKE_CUDA_DRIVER_LIB});
  ASSERT_NE(port, 0) << tracer->err();
  const std::string tag = std::to_string(getpid() % 100);
  // (name, its label value); a name is at most 15 bytes (the kernel's comm).
  const std::vector<std::pair<std::string, std::string>> names = {
      {"q\"" + tag + "\"x", "q\"" + tag + "\"x"},
      {"b\\" + tag + "\\\\", "b\\" + tag + "\\\\"},
      {"n\n" + tag + "\nl", "n\n" + tag + "\nl"},
      {"{" + tag + "}=a,b", "{" + tag + "}=a,b"},
      {"u\xff" + tag + "\xc3", "u\xEF\xBF\xBD" + tag + "\xEF\xBF\xBD"},
  };
  for (const auto& [name, label] : names) {
    fs::create_symlink(FAKE_APP, dir_ + "/" + name);
    ASSERT_EQ(run_to_end({dir_ + "/" + name, "basic"}), 0) << name;
  }
  std::string metrics;
  const auto all_there = [&] {
    for (const auto& [name, label] : names)
      if (metric_sum(metrics, "cuda_api_calls_total", {"api=\"cudaMalloc\"", "comm=\"" + escaped(label) + "\""}) != 2)
        return false;
    return true;
  };
  EXPECT_TRUE(wait_until(
      [&] {
        metrics = http_get(port, "/metrics");
        return all_there();
      },
      10s))
      << metrics;
  EXPECT_EQ(promtool_check(metrics, dir_), "");
  EXPECT_EQ(tracer->stop(), 0) << tracer->err();
}

// SIGINT and SIGTERM end cudatrace within a second wherever its start-up is
// (loading and verifying the BPF object, the probe-cost measurement, the
// exporter's start, attaching to running processes, probing ahead) and once
// it serves. SIGINT runs start with SIGINT ignored, as a script's
// background job does: cudatrace catches it anyway.
TEST_F(Node, StopSignalsEndItWithinASecondAtAnyPointOfStartUp) {
  // -v: a run that fails says how far its start-up got.
  const std::vector<std::string> exporter = {"-v", "--all-processes", "--prometheus", "127.0.0.1:0"};
  const std::vector<std::string> summary = {"-v", "--all-processes", "--summary"};
  // Starts one; its pid once it catches both signals (its first step).
  auto spawn = [](const std::vector<std::string>& args, bool ignore_sigint, const std::string& err) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int null_fd = open("/dev/null", O_RDWR);
      const int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(null_fd, 0);
      dup2(null_fd, 1);
      dup2(err_fd, 2);
      if (ignore_sigint) signal(SIGINT, SIG_IGN);
      exec_tracer(args);
    }
    const std::string status = "/proc/" + std::to_string(pid) + "/status";
    const std::uint64_t both = (1ull << (SIGINT - 1)) | (1ull << (SIGTERM - 1));
    wait_until(
        [&] {
          for (const std::string& line : lines_of(read_file(status)))
            if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) & both) == both;
          return true;  // gone
        },
        10s);
    return pid;
  };
  // How long each start-up takes here: from catching the signals to the
  // line that says it traces.
  const std::string err = dir_ + "/tracer.err";
  auto start_up_ms = [&](const std::vector<std::string>& args) {
    const pid_t pid = spawn(args, false, err);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(wait_until([&] { return read_file(err).find("tracing every process") != std::string::npos; }, 60s))
        << read_file(err);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
    return ms;
  };
  const double exporter_ms = start_up_ms(exporter), summary_ms = start_up_ms(summary);
  std::printf("start-up: %.0f ms with --prometheus, %.0f ms with --summary\n", exporter_ms, summary_ms);

  std::mt19937 random(static_cast<unsigned>(getpid()));
  double slowest_ms = 0;
  for (int i = 0; i < 50; ++i) {
    // Every fifth run the exporter (its verifier takes seconds), the others
    // the quicker --summary start: the same steps, more often sampled.
    const bool with_exporter = i % 5 == 0;
    const int sig = i % 2 ? SIGTERM : SIGINT;
    const double span_ms = (with_exporter ? exporter_ms : summary_ms) + 200;
    const int delay_ms = std::uniform_int_distribution<int>(0, static_cast<int>(span_ms))(random);
    const pid_t pid = spawn(with_exporter ? exporter : summary, sig == SIGINT, err);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    const auto sent = std::chrono::steady_clock::now();
    kill(pid, sig);
    int st = 0;
    const bool ended = wait_until([&] { return waitpid(pid, &st, WNOHANG) == pid; }, 5s);
    const double took_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent).count();
    if (!ended) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
    }
    slowest_ms = std::max(slowest_ms, took_ms);
    const std::string what = "run " + std::to_string(i) + ": " + (sig == SIGINT ? "SIGINT" : "SIGTERM") + " " +
                             std::to_string(delay_ms) + " ms into the start-up" +
                             (with_exporter ? " (--prometheus)" : " (--summary)");
    ASSERT_TRUE(ended) << what << ": still running 5 s later\n" << read_file(err);
    EXPECT_LE(took_ms, 1000) << what << ": took " << took_ms << " ms to stop\n" << read_file(err);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << what << ": status " << st << "\n" << read_file(err);
  }
  std::printf("50 stops at random points of the start-up: the slowest took %.0f ms\n", slowest_ms);
}

TEST_F(Node, BadPrometheusAddressIsOneLine) {
  const Result r = run(tracer() + " --all-processes --prometheus nonsense");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("cudatrace: --prometheus needs HOST:PORT"), std::string::npos) << r.err;
  const Result bad_host = run(tracer() + " --all-processes --prometheus 256.0.0.1:80");
  EXPECT_EQ(bad_host.status, 2);
  EXPECT_EQ(lines_of(bad_host.err).size(), 1u) << bad_host.err;
  EXPECT_NE(bad_host.err.find("HOST must be an IPv4 address"), std::string::npos) << bad_host.err;
  // Not an address of this host: refused before anything is loaded.
  const Result elsewhere = run(tracer() + " --all-processes --prometheus 192.0.2.1:19419");
  EXPECT_EQ(elsewhere.status, 6);
  EXPECT_EQ(lines_of(elsewhere.err).size(), 1u) << elsewhere.err;
  EXPECT_NE(elsewhere.err.find("cudatrace: cannot serve Prometheus metrics on 192.0.2.1:19419: Cannot assign requested "
                               "address"), std::string::npos) << elsewhere.err;
  const Result both = run(tracer() + " --all-processes -p 1");
  EXPECT_EQ(both.status, 2);
  EXPECT_NE(both.err.find("give one of -p PID, --all-processes or a command"), std::string::npos) << both.err;
}

}  // namespace
}  // namespace cudatrace_test
