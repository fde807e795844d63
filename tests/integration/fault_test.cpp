// Fault and bad-input tests (docs/reliability.md): the traced process dies,
// cudatrace is interrupted or killed, odd process shapes, mount namespaces,
// bad command lines, hostile data, output-file security. Real eBPF, as root;
// skipped (not passed) without root.
// Over 400 lines: one suite per failure class of docs/reliability.md, kept
// together so that the document and its tests can be read side by side.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "http_client.h"

namespace fs = std::filesystem;

namespace {

using namespace cudatrace_test;

// A process started with a pipe on its stdin and one on its stdout.
struct Child {
  pid_t pid = -1;
  int in = -1;   // its stdin
  FILE* out = nullptr;  // its stdout

  // `setup` runs in the child before exec (e.g. to enter a namespace).
  static Child start(const std::vector<std::string>& argv, const std::function<void()>& setup = {}) {
    int in_pipe[2], out_pipe[2];
    if (pipe(in_pipe) != 0 || pipe(out_pipe) != 0) return {};
    Child c;
    c.pid = fork();
    if (c.pid == 0) {
      dup2(in_pipe[0], STDIN_FILENO);
      dup2(out_pipe[1], STDOUT_FILENO);
      close(in_pipe[1]);
      close(out_pipe[0]);
      if (setup) setup();
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(in_pipe[0]);
    close(out_pipe[1]);
    c.in = in_pipe[1];
    c.out = fdopen(out_pipe[0], "r");
    return c;
  }
  std::string read_line() const {
    char buf[256] = {};
    return out && std::fgets(buf, sizeof buf, out) ? std::string(buf) : std::string();
  }
  void go() const { (void)!write(in, "go\n", 3); }
  // Exit status as a shell reports it (128+signal), or -1 after `limit`.
  int wait(std::chrono::milliseconds limit = 20s) {
    int status = 0;
    const bool done = wait_until([&] { return waitpid(pid, &status, WNOHANG) == pid; }, limit);
    if (!done) return -1;
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (in >= 0) close(in);
    if (out) fclose(out);
  }
  Child() = default;
  Child(Child&& o) noexcept : pid(o.pid), in(o.in), out(o.out) { o.pid = -1, o.in = -1, o.out = nullptr; }
};

// cudatrace running in the background, its output in files.
struct Tracer {
  std::string out, err = temp_path("trace-err");
  bool own_group = false;  // in a process group of its own, which a test may kill whole
  Child proc;

  explicit Tracer(const std::vector<std::string>& args, const std::string& out_path = temp_path("trace"),
                  bool own_process_group = false)
      : out(out_path), own_group(own_process_group), proc(start(args)) {}
  Child start(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = tracer_argv();
    argv.insert(argv.end(), {"-o", out});
    argv.insert(argv.end(), args.begin(), args.end());
    return Child::start(argv, [this] {
      const int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, STDERR_FILENO);
      if (own_group) setpgid(0, 0);
    });
  }
  ~Tracer() {
    std::remove(out.c_str());
    std::remove(err.c_str());
  }
  bool attached(std::chrono::milliseconds limit = 10s) {
    return wait_until([&] { return read_file(err).find("cudatrace: tracing process") != std::string::npos; }, limit);
  }
  // -p on a process without a CUDA library yet.
  bool waiting(std::chrono::milliseconds limit = 10s) {
    return wait_until([&] { return read_file(err).find("waiting for it to load one") != std::string::npos; },
                      limit);
  }
  std::vector<json> lines() const { return parse_lines(read_file(out)); }
};

// The processes whose parent is `pid` (pgrep -P).
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_file("/proc/" + name + "/stat");
    const auto paren = stat.rfind(')');
    int ppid = 0;
    if (paren != std::string::npos && std::sscanf(stat.c_str() + paren + 2, "%*c %d", &ppid) == 1 && ppid == pid)
      out.push_back(std::stoi(name));
  }
  return out;
}

// Where cudatrace and the machine's keeper of perf events wait in the
// kernel: what a test that timed out says, so that the log tells why.
std::string where_they_wait(pid_t tracer) {
  std::string said = "cudatrace stderr: " + read_file("/proc/" + std::to_string(tracer) + "/fd/2");
  std::vector<std::string> pids = {std::to_string(tracer)};
  std::stringstream keepers(run("pgrep -x ct-uprobes").out);
  for (std::string pid; keepers >> pid;) pids.push_back(pid);
  for (const std::string& pid : pids)
    for (const auto& task : fs::directory_iterator("/proc/" + pid + "/task", fs::directory_options::skip_permission_denied)) {
      std::string comm = read_file(task.path() / "comm");
      if (!comm.empty() && comm.back() == '\n') comm.pop_back();
      said += "\n" + pid + "/" + task.path().filename().string() + " (" + comm + ") in:\n";
      said += read_file(task.path() / "stack");
    }
  return said;
}

// The child of `parent` that runs `program` (exec'd), 0 if none.
pid_t child_running(pid_t parent, const std::string& program) {
  for (const pid_t child : children_of(parent)) {
    std::error_code ec;
    if (fs::read_symlink("/proc/" + std::to_string(child) + "/exe", ec) == fs::weakly_canonical(program)) return child;
  }
  return 0;
}

char process_state(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}

// `cudatrace report`: not tracer(), whose --attach would come before "report".
std::string reporter() { return std::string(CUDATRACE_BIN) + " report"; }

// Blocked in pause() (syscall 34 on x86-64): inside the fake runtime's call that never returns.
bool waits_in_pause(pid_t pid) { return read_file("/proc/" + std::to_string(pid) + "/syscall").rfind("34 ", 0) == 0; }

// The ids of BPF objects ("link_id", "prog_id") that process `pid` holds.
std::set<std::string> bpf_ids(pid_t pid, const std::string& kind) {
  std::set<std::string> ids;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fdinfo")) {
    std::stringstream info(read_file(e.path()));
    std::string key, value;
    while (info >> key >> value)
      if (key == kind + ":") ids.insert(value);
  }
  return ids;
}

class Faults : public NeedsRoot {};

// ---- 1. The traced process dies -------------------------------------------

TEST_F(Faults, TargetKilledInsideACallWithPidAttach) {
  Child app = Child::start({FAULT_APP, "calls-then-block", "5"});
  ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
  Tracer t({"--json", "-f", "mem,xfer,launch,stream,event,device,query", "-p", std::to_string(app.pid)});
  ASSERT_TRUE(t.attached()) << read_file(t.err);
  app.go();
  ASSERT_EQ(app.read_line(), "blocking\n");
  std::this_thread::sleep_for(100ms);
  ASSERT_EQ(kill(app.pid, SIGKILL), 0);
  EXPECT_EQ(app.wait(), 128 + SIGKILL);
  EXPECT_EQ(t.proc.wait(), 0) << read_file(t.err);
  const auto lines = t.lines();
  EXPECT_EQ(records(lines, "call", "cudaGetDevice").size(), 5u);
  const auto unfinished = records(lines, "unfinished");
  ASSERT_EQ(unfinished.size(), 1u);
  EXPECT_EQ(unfinished[0]["api"], "cudaStreamSynchronize");
  EXPECT_EQ(end_of(lines)["calls"], 5);
  EXPECT_EQ(end_of(lines)["unfinished"], 1);
}

TEST_F(Faults, TargetSegfaultingInsideACall) {
  const Result r = run(tracer() + kWithQuery + " --json -- " FAULT_APP " calls-then-segv 3");
  EXPECT_EQ(r.status, 128 + SIGSEGV) << r.err;
  const auto lines = parse_lines(r.out);
  EXPECT_EQ(records(lines, "call", "cudaGetDevice").size(), 3u);
  const auto unfinished = records(lines, "unfinished");
  ASSERT_EQ(unfinished.size(), 1u);
  EXPECT_EQ(unfinished[0]["api"], "cudaGetDevice");
  EXPECT_TRUE(unfinished[0]["args"]["device"].is_null());
  EXPECT_EQ(end_of(lines)["unfinished"], 1);
}

// With a 64 MiB ring the reader is woken only once 8 MiB are queued: all
// 20000 records (3.5 MB) are still in the ring when the target exits.
TEST_F(Faults, RecordsStillInTheRingWhenTheTargetExitsArePrinted) {
  Child app = Child::start({FAULT_APP, "wait-then-calls", "20000"});
  ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
  Tracer t({"--json", "--ring-mb", "64", "-f", "device,query", "-p", std::to_string(app.pid)});
  ASSERT_TRUE(t.attached()) << read_file(t.err);
  app.go();
  EXPECT_EQ(app.wait(), 0);
  EXPECT_EQ(t.proc.wait(), 0) << read_file(t.err);
  const auto lines = t.lines();
  EXPECT_EQ(records(lines, "call").size(), 20000u);
  EXPECT_EQ(end_of(lines)["calls"], 20000);
  EXPECT_EQ(end_of(lines)["lost"], 0);

  Tracer command({"--json", "--ring-mb", "64", "-f", "device,query", "--", FAULT_APP, "wait-then-calls", "20000"});
  command.proc.go();
  EXPECT_EQ(command.proc.wait(), 0) << read_file(command.err);
  EXPECT_EQ(records(command.lines(), "call").size(), 20000u);
}

// ---- 2. cudatrace is interrupted or killed ----------------------------------

// SIGHUP (a closed terminal, a service manager) ended cudatrace with 129,
// without the end line, the counts or what was queued (issue 47).
TEST_F(Faults, StopSignalsFlushEverythingAndWriteTheEndLine) {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    Child app = Child::start({FAULT_APP, "calls-then-block", "5"});
    ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
    Tracer t({"--json", "-f", "mem,xfer,launch,stream,event,device,query", "-p", std::to_string(app.pid)});
    ASSERT_TRUE(t.attached()) << read_file(t.err);
    app.go();
    ASSERT_EQ(app.read_line(), "blocking\n");
    // "blocking" comes just before the call: stop cudatrace once the call has begun.
    ASSERT_TRUE(wait_until([&] { return waits_in_pause(app.pid); }, 5s));
    ASSERT_EQ(kill(t.proc.pid, sig), 0);
    EXPECT_EQ(t.proc.wait(), 0) << read_file(t.err);
    const auto lines = t.lines();
    EXPECT_EQ(records(lines, "call", "cudaGetDevice").size(), 5u);
    const auto unfinished = records(lines, "unfinished");
    ASSERT_EQ(unfinished.size(), 1u);  // the call still in progress
    EXPECT_EQ(unfinished[0]["api"], "cudaStreamSynchronize");
    EXPECT_EQ(end_of(lines)["calls"], 5);
    // The target is left running, not stopped.
    EXPECT_EQ(app.wait(200ms), -1);
    EXPECT_NE(process_state(app.pid), 'T');
  }
}

// SIGTERM or SIGHUP to cudatrace in command mode goes on to the command
// (Ctrl-C reaches it from the terminal anyway); cudatrace reports its death.
TEST_F(Faults, SigtermAndSighupInCommandModeEndTheCommandToo) {
  for (const int sig : {SIGTERM, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    Tracer t({"--json", "-f", "mem,xfer,launch,stream,event,device,query", "--", FAULT_APP, "calls-then-block", "4"});
    pid_t command = 0;
    ASSERT_TRUE(wait_until([&] { return (command = child_running(t.proc.pid, FAULT_APP)) > 0; }, 60s))
        << read_file(t.err);
    t.proc.go();  // the command reads cudatrace's stdin
    ASSERT_TRUE(wait_until([&] { return waits_in_pause(command); }, 60s)) << "never reached the blocking call";
    ASSERT_TRUE(wait_until([&] { return read_file(t.out).find("cudaGetDevice") != std::string::npos; }, 30s));
    ASSERT_EQ(kill(t.proc.pid, sig), 0);
    EXPECT_EQ(t.proc.wait(30s), 128 + sig) << read_file(t.err);
    const auto lines = t.lines();
    EXPECT_EQ(records(lines, "call", "cudaGetDevice").size(), 4u);
    EXPECT_EQ(records(lines, "unfinished", "cudaStreamSynchronize").size(), 1u);
    EXPECT_EQ(end_of(lines)["unfinished"], 1);
  }
}

// cudatrace started where the stop signals are ignored (a script's
// background job, nohup), with `dispositions` applied before its exec; its
// stderr in `err`.
Child start_tracer_with(const std::vector<std::string>& args, const std::string& err, bool ignoring) {
  std::vector<std::string> argv = tracer_argv();
  argv.insert(argv.end(), args.begin(), args.end());
  return Child::start(argv, [&err, ignoring] {
    const int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, STDERR_FILENO);
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, ignoring ? SIG_IGN : SIG_DFL);
  });
}

// Issue 47: while cudatrace waited for a FIFO's reader, a SIGINT it was
// started ignoring was ignored (it waited 10 minutes), SIGTERM ended it with
// 143 and SIGHUP with 129, where -p documents 0 for a stop during the
// start-up. Now each ends the wait at once, also SIGINT and SIGTERM
// inherited ignored: 0 with -p, 128+signal in command mode (the command
// never ran), nothing attached. A SIGHUP inherited ignored is nohup's: it
// stays ignored, and SIGTERM then ends the wait.
TEST_F(Faults, AStopSignalEndsTheWaitForAFifoReader) {
  Child app = Child::start({FAULT_APP, "calls-until-line"});
  ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
  const std::string fifo = temp_path("stop-fifo"), err = temp_path("stop-err");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const bool command : {false, true})
    for (const bool ignoring : {true, false})
      for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
        SCOPED_TRACE(std::string(strsignal(sig)) + (ignoring ? ", inherited ignored" : "") +
                     (command ? ", command mode" : ", -p"));
        std::vector<std::string> args = {"-o", fifo, "-p", std::to_string(app.pid)};
        if (command) args = {"-o", fifo, "--", FAKE_APP, "basic"};
        std::remove(err.c_str());  // the last run's line must not be taken for this one's
        Child t = start_tracer_with(args, err, ignoring);
        ASSERT_TRUE(wait_until([&] { return read_file(err).find("waiting for a reader of") != std::string::npos; },
                               30s))
            << read_file(err);
        ASSERT_EQ(kill(t.pid, sig), 0);
        int ended_by = sig;
        if (sig == SIGHUP && ignoring) {
          EXPECT_EQ(t.wait(1s), -1) << "a SIGHUP ignored under nohup ended cudatrace";
          ended_by = SIGTERM;
          ASSERT_EQ(kill(t.pid, ended_by), 0);
        }
        EXPECT_EQ(t.wait(5s), command ? 128 + ended_by : 0) << read_file(err);
        EXPECT_EQ(read_file(err).find("tracing process"), std::string::npos) << read_file(err);
      }
  EXPECT_NE(process_state(app.pid), 'T');
  app.go();
  EXPECT_EQ(app.wait(30s), 0);
  std::remove(fifo.c_str());
  std::remove(err.c_str());
}

// A command gets the dispositions cudatrace was started with for the
// signals cudatrace catches itself: under nohup, SIGHUP stays ignored.
TEST_F(Faults, TheCommandKeepsTheStopSignalsIgnoredAsCudatraceGotThem) {
  const std::string err = temp_path("nohup-err");
  Child t = start_tracer_with({"-o", "/dev/null", "--", FAULT_APP, "calls-then-block", "1"}, err, true);
  pid_t command = 0;
  ASSERT_TRUE(wait_until([&] { return (command = child_running(t.pid, FAULT_APP)) > 0; }, 60s)) << read_file(err);
  std::uint64_t ignored = 0;
  for (const std::string& line : lines_of(read_file("/proc/" + std::to_string(command) + "/status")))
    if (line.rfind("SigIgn:", 0) == 0) ignored = std::stoull(line.substr(7), nullptr, 16);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP})
    EXPECT_TRUE(ignored & (1ull << (sig - 1))) << strsignal(sig) << " not ignored in the command";
  kill(command, SIGKILL);
  EXPECT_EQ(t.wait(30s), 128 + SIGKILL) << read_file(err);
  std::remove(err.c_str());
}

// The program calls until it is told to stop, not for a set time: on a busy
// machine the start-up may take longer than any time the program is given
// (it ended first, and cudatrace with it, exit 0, before its SIGKILL).
TEST_F(Faults, SigkillOfTheTracerLeavesNoProbeAndTheTargetRunsOn) {
  Child app = Child::start({FAULT_APP, "calls-until-line"});
  ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
  Tracer t({"--json", "-f", "mem,xfer,launch,stream,event,device,query", "-p", std::to_string(app.pid)});
  ASSERT_TRUE(t.attached(60s)) << read_file(t.err);
  ASSERT_TRUE(wait_until([&] { return read_file(t.out).find("cudaGetDevice") != std::string::npos; }, 60s));
  const auto links = bpf_ids(t.proc.pid, "link_id");
  const auto progs = bpf_ids(t.proc.pid, "prog_id");
  ASSERT_GE(links.size(), 3u);  // enter, return, loader, tracepoints
  ASSERT_FALSE(progs.empty());
  ASSERT_EQ(kill(t.proc.pid, SIGKILL), 0);
  // The dying process closes its links one by one, each after an RCU grace
  // period (Linux 6.12+): with --attach perf, 160 links take seconds, more
  // beside a parallel build.
  EXPECT_EQ(t.proc.wait(120s), 128 + SIGKILL) << where_they_wait(t.proc.pid);
  std::set<std::string> left;
  EXPECT_TRUE(wait_until(
      [&] {
        left.clear();
        const Result r = run("bpftool -j link list");
        for (const json& link : json::parse(r.out.empty() ? "[]" : r.out))
          if (link.contains("id") && links.count(link["id"].dump())) left.insert(link["id"].dump());
        return left.empty();
      },
      120s))
      << left.size() << " links left, among them " << *left.begin();
  for (const std::string& id : progs)
    EXPECT_TRUE(wait_until([&] { return run("bpftool prog show id " + id).status != 0; }, 30s)) << "prog " << id;
  // It checks every call's result itself and exits 0 once told to stop.
  EXPECT_NE(process_state(app.pid), 'T');
  app.go();
  EXPECT_EQ(app.wait(30s), 0);
}

// The loader probe stops a process that maps a library until cudatrace has
// attached there. If cudatrace dies in that window, its watchdog continues it.
TEST_F(Faults, SigkillOfTheTracerWhileTheTargetWaitsAtALibraryLoad) {
  Child app = Child::start({FAULT_APP_DLOPEN, "wait-then-dlopen", "3"});
  ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
  Tracer t({"--json", "-f", "mem,xfer,launch,stream,event,device,query", "--lib", FAKE_CUDART_LIB, "-p",
            std::to_string(app.pid)});
  ASSERT_TRUE(t.attached()) << read_file(t.err);
  ASSERT_EQ(kill(t.proc.pid, SIGSTOP), 0);  // cudatrace cannot continue it now
  app.go();
  ASSERT_TRUE(wait_until([&] { return process_state(app.pid) == 'T'; }, 5s)) << "the dlopen did not stop the target";
  ASSERT_EQ(kill(t.proc.pid, SIGKILL), 0);
  EXPECT_EQ(t.proc.wait(), 128 + SIGKILL);
  EXPECT_EQ(app.wait(5s), 0) << "left stopped: state " << process_state(app.pid);
}

// Busy loops on every CPU, as a parallel build beside the tests makes; they
// end with the object (or with the test process).
struct CpuLoad {
  std::vector<pid_t> spinners;
  CpuLoad() {
    for (long i = 0; i < std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)); ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (volatile unsigned long n = 0;; n = n + 1) {
        }
      }
      if (pid > 0) spinners.push_back(pid);
    }
  }
  ~CpuLoad() {
    for (const pid_t pid : spinners) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// Issue 47: the target stayed stopped 8-13 s after cudatrace's SIGKILL with
// --attach perf (the watchdog waited for cudatrace to have wholly exited,
// while the kernel closed its links one grace period each), and past 4 s
// with the default attach under load. The worst moment: the target waits
// at a library load that cudatrace (stopped, SIGSTOP) will never answer,
// with every probe of -f all attached; cudatrace alone or its whole process
// group is killed, with both CPUs busy. The target must run again within a
// second of the kill.
TEST_F(Faults, SigkillOfTheTracerContinuesAStoppedTargetWithinASecond) {
  if (const char* mode = std::getenv("CUDATRACE_TEST_ATTACH"); mode && *mode)
    GTEST_SKIP() << "runs both link kinds itself: once is enough";
  std::vector<std::string> attaches = {"perf"};
  if (run(tracer() + " --attach multi -f query -- /bin/true").err.find("has no uprobe_multi links") ==
      std::string::npos)
    attaches.insert(attaches.begin(), "multi");
  const CpuLoad load;
  for (const std::string& attach : attaches)
    for (const bool whole_group : {false, true}) {
      SCOPED_TRACE("--attach " + attach + (whole_group ? ", its process group killed" : ", cudatrace killed"));
      Child app = Child::start({FAULT_APP_DLOPEN, "wait-then-dlopen", "3"});
      ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
      Tracer t({"--attach", attach, "--json", "-f", "all", "--lib", FAKE_CUDART_LIB, "-p", std::to_string(app.pid)},
               temp_path("trace"), whole_group);
      ASSERT_TRUE(t.attached(120s)) << read_file(t.err);
      ASSERT_EQ(kill(t.proc.pid, SIGSTOP), 0);  // cudatrace cannot continue it now
      app.go();
      ASSERT_TRUE(wait_until([&] { return process_state(app.pid) == 'T'; }, 10s))
          << "the dlopen did not stop the target";
      const auto killed = std::chrono::steady_clock::now();
      ASSERT_EQ(kill(whole_group ? -t.proc.pid : t.proc.pid, SIGKILL), 0);
      while (process_state(app.pid) == 'T' && std::chrono::steady_clock::now() - killed < 60s)
        std::this_thread::sleep_for(1ms);
      const std::chrono::duration<double> stopped = std::chrono::steady_clock::now() - killed;
      std::printf("--attach %s, %s: stopped %.3f s after the kill\n", attach.c_str(),
                  whole_group ? "group killed" : "cudatrace killed", stopped.count());
      EXPECT_LT(stopped.count(), 1.0) << "stopped for " << stopped.count() << " s after the kill";
      EXPECT_EQ(app.wait(60s), 0) << "state " << process_state(app.pid);
      EXPECT_EQ(t.proc.wait(120s), 128 + SIGKILL);
    }
}

// Command mode holds the command before its exec until the probes are
// attached; killed then, cudatrace must not leave it waiting for the end of
// its release pipe, which comes only once the kernel has closed every link
// (4-7 s with --attach perf, -f all, both CPUs busy). It ends (127, never
// run untraced) once every thread of cudatrace has begun to exit: that
// waits for the uninterruptible call a thread of it may be in (attaching a
// probe, a grace period), 0.1-0.6 s, 1.1-1.2 s in 2 of 16 beside parallel
// builds; 3 s is the bound.
TEST_F(Faults, SigkillOfTheTracerEndsTheHeldCommandWithinASecond) {
  if (const char* mode = std::getenv("CUDATRACE_TEST_ATTACH"); mode && *mode)
    GTEST_SKIP() << "runs --attach perf itself: once is enough";
  const CpuLoad load;
  const std::string bin = fs::weakly_canonical(CUDATRACE_BIN), app = fs::weakly_canonical(FAULT_APP);
  // The command: > 0 while still held before its exec (cudatrace waiting in
  // read or poll: not the keeper's or the watchdog's fork of a moment, which
  // never wait there), < 0 once released (it runs the program), 0 if none.
  const auto command_of = [&](pid_t tracer) {
    std::ifstream children("/proc/" + std::to_string(tracer) + "/task/" + std::to_string(tracer) + "/children");
    for (pid_t child; children >> child;) {
      std::error_code ec;
      const fs::path exe = fs::read_symlink("/proc/" + std::to_string(child) + "/exe", ec);
      if (exe == app) return -child;
      if (exe != bin) continue;
      const std::string syscall = read_file("/proc/" + std::to_string(child) + "/syscall");
      for (const char* waiting : {"0 ", "7 ", "271 "})  // read, poll, ppoll (x86-64)
        if (syscall.rfind(waiting, 0) == 0) return child;
    }
    return pid_t(0);
  };
  int tries = 0;
  for (; tries < 10; ++tries) {
    Tracer t({"--attach", "perf", "--json", "-f", "all", "--lib", FAKE_CUDART_LIB, "--", FAULT_APP,
              "wait-then-calls", "3"});
    // Once its BPF object is loaded (a stop would interrupt the verifier),
    // cudatrace is run a step at a time (stopped, looked at, continued for a
    // millisecond) until it is caught holding its command: the window may be
    // milliseconds long. Released between two looks: tried again.
    ASSERT_TRUE(wait_until([&] { return !bpf_ids(t.proc.pid, "link_id").empty(); }, 120s)) << read_file(t.err);
    pid_t command = 0;
    for (const auto until = std::chrono::steady_clock::now() + 120s;
         command == 0 && std::chrono::steady_clock::now() < until;) {
      kill(t.proc.pid, SIGSTOP);
      while (process_state(t.proc.pid) != 'T' && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(100us);
      command = command_of(t.proc.pid);
      if (command <= 0) kill(t.proc.pid, SIGCONT);
      std::this_thread::sleep_for(1ms);
    }
    if (command <= 0) continue;
    const auto killed = std::chrono::steady_clock::now();
    ASSERT_EQ(kill(t.proc.pid, SIGKILL), 0);
    while (kill(command, 0) == 0 && process_state(command) != 'Z' && std::chrono::steady_clock::now() - killed < 60s)
      std::this_thread::sleep_for(1ms);
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - killed;
    std::printf("the held command ended %.3f s after the kill\n", waited.count());
    EXPECT_LT(waited.count(), 3.0) << "the held command was still there " << waited.count() << " s after the kill";
    EXPECT_EQ(t.proc.wait(120s), 128 + SIGKILL);
    break;
  }
  EXPECT_LT(tries, 10) << "cudatrace was never caught holding its command";
}

// One copy of the fake runtime per thread, each its own file, so that every
// dlopen maps a library and every dlclose unmaps it (a library already
// loaded by another thread would only be reference-counted).
struct RuntimeCopies {
  std::string dir = temp_path("runtimes");
  std::vector<std::string> paths;
  explicit RuntimeCopies(int n) {
    const fs::path runtime(FAKE_CUDART_LIB);
    fs::create_directories(dir);
    // The runtime finds the fake driver at $ORIGIN/../fakecuda.
    fs::create_directory_symlink(runtime.parent_path().parent_path() / "fakecuda", dir + "/fakecuda");
    for (int i = 0; i < n; ++i) {
      const std::string copy_dir = dir + "/copy" + std::to_string(i);
      fs::create_directories(copy_dir);
      paths.push_back(copy_dir + "/" + runtime.filename().string());
      fs::copy_file(runtime, paths.back());
    }
  }
  ~RuntimeCopies() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
};

// Waits up to `limit` for a process to end; a process still there then
// fails the test, and is continued and killed (a hang is a failure, never a
// wait). Returns its status as Child::wait does, -1 on a timeout.
int wait_or_fail(Child& c, std::chrono::milliseconds limit, const std::string& what) {
  const int status = c.wait(limit);
  if (status == -1) {
    ADD_FAILURE() << what << " did not end within " << limit.count() << " ms; state " << process_state(c.pid);
    kill(c.pid, SIGCONT);
  }
  return status;
}

// 8 threads x 150 rounds of dlopen, one call, dlclose: 2,400 library load
// and unload events, each load stopping the process until probes are
// attached. No hang, and every call into each freshly loaded copy is traced.
void load_and_unload_from_eight_threads(bool attach_by_pid) {
  constexpr int kThreads = 8, kRounds = 150;
  RuntimeCopies copies(kThreads);
  std::vector<std::string> app_args = {DLOPEN_APP, "stress", std::to_string(kThreads), std::to_string(kRounds)};
  app_args.insert(app_args.end(), copies.paths.begin(), copies.paths.end());
  const std::vector<std::string> filter = {"--json", "-f", "device,query", "--layer", "runtime"};
  std::string app_said;
  std::unique_ptr<Tracer> t;
  if (attach_by_pid) {
    Child app = Child::start(app_args);
    ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
    std::vector<std::string> args = filter;
    args.insert(args.end(), {"-p", std::to_string(app.pid)});
    t = std::make_unique<Tracer>(args);
    ASSERT_TRUE(t->waiting()) << read_file(t->err);
    app.go();
    EXPECT_EQ(wait_or_fail(app, 60s, "the -p target"), 0);
    app_said = app.read_line();
    EXPECT_EQ(wait_or_fail(t->proc, 20s, "cudatrace"), 0) << read_file(t->err);
  } else {
    std::vector<std::string> args = filter;
    args.push_back("--");
    args.insert(args.end(), app_args.begin(), app_args.end());
    t = std::make_unique<Tracer>(args);
    ASSERT_EQ(t->proc.read_line().rfind("ready", 0), 0u) << read_file(t->err);
    t->proc.go();
    if (wait_or_fail(t->proc, 60s, "cudatrace and its command") == -1) {
      if (const pid_t app = first_child(t->proc.pid)) {
        ADD_FAILURE() << "the command's state: " << process_state(app);
        kill(app, SIGCONT);
        kill(app, SIGKILL);
      }
      return;
    }
    app_said = t->proc.read_line();
  }
  EXPECT_EQ(app_said, "calls " + std::to_string(kThreads * kRounds) + "\n");
  const auto lines = t->lines();
  std::map<long, int> per_thread;
  for (const json& c : records(lines, "call", "cudaGetDevice")) ++per_thread[c["tid"]];
  EXPECT_EQ(per_thread.size(), std::size_t(kThreads));
  for (const auto& [tid, n] : per_thread) EXPECT_EQ(n, kRounds) << "thread " << tid;
  EXPECT_EQ(end_of(lines)["lost"], 0);
}

TEST_F(Faults, LibraryLoadsFromEightThreadsNeverHangAndAreTracedCommandMode) {
  load_and_unload_from_eight_threads(false);
}

TEST_F(Faults, LibraryLoadsFromEightThreadsNeverHangAndAreTracedWithPid) {
  load_and_unload_from_eight_threads(true);
}

// The output breaks (its reader goes away) while the command loads
// libraries: cudatrace stops writing, but still reads every loader record
// and continues the command, which runs to its end untraced.
TEST_F(Faults, OutputFailureWhileLibrariesLoadLeavesNothingStopped) {
  RuntimeCopies copies(2);
  const std::string fifo = temp_path("fifo"), app_out = temp_path("app-out");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string cmdline = "( " + tracer() + " --json -o " + fifo + " -- " DLOPEN_APP " stress 2 300";
  for (const std::string& p : copies.paths) cmdline += " " + p;
  cmdline += " </dev/null >" + app_out + " )";
  std::thread reader([&] {
    std::ifstream in(fifo);  // opens once cudatrace opens it for writing
    std::string header;
    std::getline(in, header);  // then goes away: cudatrace's next write fails
  });
  run(cmdline);  // its exit status for a broken output is docs/reliability.md's business, not this test's
  reader.join();
  if (!wait_until([&] { return read_file(app_out).find("calls 600") != std::string::npos; }, 60s)) {
    const std::string said = read_file(app_out);  // "ready <pid>"
    const pid_t app = said.rfind("ready ", 0) == 0 ? std::atoi(said.c_str() + 6) : 0;
    ADD_FAILURE() << "the command did not run to its end; state " << (app ? process_state(app) : '?');
    if (app) kill(app, SIGCONT), kill(app, SIGKILL);
  }
  std::remove(fifo.c_str());
  std::remove(app_out.c_str());
}

// An output that nobody reads yet (a FIFO) is waited for before anything is
// attached (issue 38): a -p target keeps running, never stopped, and a
// command does not start; once a reader comes, tracing begins.
TEST_F(Faults, AnOutputWithoutAReaderStopsNothing) {
  for (const bool timeline : {false, true}) {
    SCOPED_TRACE(timeline ? "--perfetto FIFO" : "-o FIFO");
    const std::string dir = temp_path("fifo-target"), fifo = temp_path("out-fifo");
    fs::create_directories(dir);
    fs::create_directory_symlink(fs::path(FAKE_CUDART_LIB).parent_path().parent_path() / "fakecuda", dir + "/fakecuda");
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    // A load every 100 ms: a dozen copies mapped by the time a reader comes,
    // which --attach perf probes one event at a time (seconds on this VM).
    Child app = Child::start({DLOPEN_APP, "fresh", "100", FAKE_CUDART_LIB, dir});
    const auto loads = [&dir] { return std::atol(read_file(dir + "/loads").c_str()); };
    std::ofstream(dir + "/go").put('\n');
    ASSERT_TRUE(wait_until([&] { return loads() > 0; })) << "the program does not start";
    const std::vector<std::string> args =
        timeline ? std::vector<std::string>{"--perfetto", fifo, "-p", std::to_string(app.pid)}
                 : std::vector<std::string>{"-p", std::to_string(app.pid)};
    Tracer t(args, timeline ? temp_path("trace") : fifo);
    ASSERT_TRUE(wait_until([&] { return read_file(t.err).find("waiting for a reader of") != std::string::npos; }))
        << read_file(t.err);
    // A second later the program has loaded its library again and again, and was never stopped.
    const long before = loads();
    ASSERT_TRUE(wait_until([&] { return loads() > before + 10; }, 10s)) << "state " << process_state(app.pid);
    EXPECT_NE(process_state(app.pid), 'T');
    EXPECT_EQ(read_file(t.err).find("tracing process"), std::string::npos) << "nothing attached yet";
    std::string read;
    std::thread reader([&] {
      std::ifstream in(fifo);
      read.assign(std::istreambuf_iterator<char>(in), {});
    });
    EXPECT_TRUE(t.attached(60s)) << read_file(t.err);
    ASSERT_EQ(kill(t.proc.pid, SIGINT), 0);
    EXPECT_EQ(t.proc.wait(30s), 0) << read_file(t.err);
    if (t.proc.pid > 0) kill(t.proc.pid, SIGKILL);  // not ended: the reader must still see the end of the FIFO
    reader.join();
    EXPECT_NE(read.find(timeline ? "traceEvents" : "TIME(s)"), std::string::npos) << read;
    kill(app.pid, SIGKILL);
    app.wait(5s);
    fs::remove_all(dir);
    std::remove(fifo.c_str());
  }
  // Command mode: the command starts only once the output has a reader.
  const std::string fifo = temp_path("cmd-fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Tracer t({"--", FAKE_APP, "basic"}, fifo);
  EXPECT_TRUE(wait_until([&] { return read_file(t.err).find("waiting for a reader of") != std::string::npos; }))
      << read_file(t.err);
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(children_of(t.proc.pid).empty()) << "the command started before the output had a reader";
  std::ifstream in(fifo);  // also ends the wait if the line above was never said
  const std::string trace((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(t.proc.wait(30s), 0) << read_file(t.err);
  EXPECT_NE(trace.find("cudaMalloc"), std::string::npos) << trace;
  std::remove(fifo.c_str());
}

// The sizes of the ring buffers (their data area mapped twice, from
// /proc/PID/maps: "anon_inode:bpf-map" mappings of 32 MiB or more) that
// process `pid` maps.
std::vector<unsigned long> ring_mappings(pid_t pid) {
  std::vector<unsigned long> sizes;
  std::istringstream maps(read_file("/proc/" + std::to_string(pid) + "/maps"));
  for (std::string line; std::getline(maps, line);) {
    unsigned long start = 0, end = 0;
    if (line.find("anon_inode:bpf-map") != std::string::npos && std::sscanf(line.c_str(), "%lx-%lx", &start, &end) == 2 &&
        end - start >= (32ul << 20))
      sizes.push_back(end - start);
  }
  return sizes;
}

// The ring buffer is mapped by cudatrace alone (issue 38): the helpers it
// forks (the stop watchdog) never read it, and do not hold it in their RSS.
TEST_F(Faults, OnlyTheTracerMapsTheRingBuffer) {
  Tracer t({"--", FAKE_APP, "block"});
  std::vector<pid_t> helpers;
  const auto find_helpers = [&] {
    helpers.clear();
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const std::string name = entry.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos || std::stoi(name) == t.proc.pid) continue;
      const std::string cmdline = read_file("/proc/" + name + "/cmdline");
      if (read_file("/proc/" + name + "/comm") == "cudatrace\n" && cmdline.find(FAKE_APP) != std::string::npos)
        helpers.push_back(std::stoi(name));
    }
    return !helpers.empty();
  };
  ASSERT_TRUE(wait_until([&] { return !ring_mappings(t.proc.pid).empty() && find_helpers(); })) << read_file(t.err);
  EXPECT_EQ(ring_mappings(t.proc.pid), std::vector<unsigned long>{4096 + (32ul << 20)}) << "the default 16 MiB ring, twice";
  for (pid_t helper : helpers) EXPECT_TRUE(ring_mappings(helper).empty()) << "helper " << helper;
  // The command blocks for ever, and a SIGINT of cudatrace alone leaves it running (as strace's does).
  const std::vector<pid_t> command = children_of(t.proc.pid);
  ASSERT_EQ(kill(t.proc.pid, SIGINT), 0);
  EXPECT_NE(t.proc.wait(30s), -1) << read_file(t.err);
  for (pid_t c : command)
    if (read_file("/proc/" + std::to_string(c) + "/comm") == "fake_app\n") kill(c, SIGKILL);
}

// Outputs are opened before tracing starts; a start that fails removes the
// files it created (and only those).
TEST_F(Faults, AFailedStartLeavesNoOutputFileItCreated) {
  const std::string fresh = temp_path("never-started.jsonl"), timeline = temp_path("never-started.json"),
                    existing = temp_path("existing.jsonl");
  std::ofstream(existing) << "keep\n";
  Result r = run(tracer() + " --json -o " + fresh + " --perfetto " + timeline + " -p 4000000");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_FALSE(fs::exists(fresh));
  EXPECT_FALSE(fs::exists(timeline));
  r = run(tracer() + " -o " + existing + " -p 4000000");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_TRUE(fs::exists(existing)) << "a file that was there stays (emptied, as -o does)";
  std::remove(existing.c_str());
}

// A -p target that is a job of an interactive shell (bash with job control
// on a terminal, made by script(1)): a SIGSTOP would make the shell report
// it stopped, which --dlopen-stop=auto avoids (one warning line says so).
// With =always it is stopped; whether the shell's `wait` then returns
// 128+SIGSTOP depends on whether it looks before the SIGCONT, so only the
// absence of the warning is checked there.
TEST_F(Faults, ShellJobIsNotStoppedByDefault) {
  if (run("script -qec true /dev/null").status != 0) GTEST_SKIP() << "no script(1) to run a shell on a terminal";
  const std::string fifo = temp_path("job-fifo"), job = temp_path("job.sh"), err = temp_path("job-err");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // The job waits for a line on the FIFO, sent once cudatrace is attached,
  // then loads the runtime 100 ms later and calls it.
  std::ofstream(job) << "set -m\n"
                     << "exec 3<>" << fifo << "\n"
                     << DLOPEN_APP " late 100 3 " FAKE_CUDART_LIB " <&3 >/dev/null &\n"
                     << "app=$!\n"
                     << tracer() << " --json -o /dev/null $MODE -p $app 2>" << err << " &\n"
                     << "until grep -q waiting " << err << "; do sleep 0.05; done\n"
                     << "echo go >&3\n"
                     << "wait $app; echo \"job status $?\"\n"
                     << "wait $!; kill -CONT $app 2>/dev/null; wait $app\n";
  const auto run_job = [&](const std::string& mode) {
    std::remove(err.c_str());  // the script waits for cudatrace's line in it
    return run("MODE=" + mode + " timeout 60 script -qec 'bash --norc -i " + job + "' /dev/null");
  };
  const Result by_default = run_job("");
  EXPECT_NE(by_default.out.find("job status 0"), std::string::npos) << by_default.out;
  EXPECT_NE(read_file(err).find("is a job of an interactive shell"), std::string::npos) << read_file(err);
  run_job("--dlopen-stop=always");
  EXPECT_NE(read_file(err).find("waiting for it to load one"), std::string::npos) << read_file(err);
  EXPECT_EQ(read_file(err).find("is a job of an interactive shell"), std::string::npos) << read_file(err);
  for (const std::string& f : {fifo, job, err}) std::remove(f.c_str());
}

// -p on a process that loads the runtime 1.5 s later: cudatrace says it is
// waiting, and traces every call once the library is there.
TEST_F(Faults, AttachBeforeTheProcessLoadsCuda) {
  Child app = Child::start({DLOPEN_APP, "late", "1500", "5", FAKE_CUDART_LIB});
  ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
  Tracer t({"--json", "-f", "device,query", "-p", std::to_string(app.pid)});
  ASSERT_TRUE(t.waiting()) << read_file(t.err);
  EXPECT_EQ(read_file(t.err), "cudatrace: process " + std::to_string(app.pid) +
                                  " has no CUDA library loaded yet; waiting for it to load one (Ctrl-C to stop)\n");
  app.go();
  EXPECT_EQ(wait_or_fail(app, 20s, "the -p target"), 0);
  EXPECT_EQ(app.read_line(), "calls 5\n");
  EXPECT_EQ(wait_or_fail(t.proc, 20s, "cudatrace"), 0) << read_file(t.err);
  const auto lines = t.lines();
  EXPECT_EQ(records(lines, "call", "cudaGetDevice").size(), 5u);
  EXPECT_EQ(end_of(lines)["lost"], 0);
}

// ---- 3. Process shapes -----------------------------------------------------------

TEST_F(Faults, HundredThreadsCallingAtOnceArePairedPerThread) {
  const Result r = run(tracer() + kWithQuery + " --json --layer runtime -- " FAKE_APP " threads 100 50");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = parse_lines(r.out);
  std::map<long, std::map<std::string, int>> per_tid;
  std::map<long, std::set<long>> sizes_per_tid;
  for (const json& c : records(lines, "call")) {
    const long tid = c["tid"];
    ++per_tid[tid][c["api"]];
    if (c["api"] != "cudaMalloc") continue;
    // Thread i allocates 256 + i bytes at 0xD000000000 + size: a record
    // paired with another thread's entry or return would not match.
    const long size = c["args"]["size"];
    sizes_per_tid[tid].insert(size);
    char expect[32];
    std::snprintf(expect, sizeof expect, "0x%lx", 0xD000000000L + size);
    EXPECT_EQ(c["args"]["devPtr"], expect);
  }
  ASSERT_EQ(per_tid.size(), 100u);
  std::set<long> all_sizes;
  for (const auto& [tid, n] : per_tid) {
    EXPECT_EQ(n, (std::map<std::string, int>{{"cudaGetDevice", 50}, {"cudaMalloc", 50}, {"cudaFree", 50}})) << tid;
    EXPECT_EQ(sizes_per_tid[tid].size(), 1u) << tid;
    all_sizes.insert(sizes_per_tid[tid].begin(), sizes_per_tid[tid].end());
  }
  EXPECT_EQ(all_sizes.size(), 100u);
  EXPECT_EQ(end_of(lines)["lost"], 0);
  EXPECT_EQ(end_of(lines)["unmatched"], 0);
}

TEST_F(Faults, ExecOfAnotherCudaProgramIsFollowed) {
  const Result r = run(tracer() + kWithQuery + " --json --layer runtime -- " FAULT_APP " exec-after 2 " FAKE_APP_DLOPEN
                       " dlopen-basic");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto calls = records(parse_lines(r.out), "call");
  ASSERT_EQ(calls.size(), 2u + 17u) << r.out;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i]["pid"], calls[0]["pid"]);  // exec keeps the pid
    EXPECT_EQ(calls[i]["comm"], i < 2 ? "fault_app" : "fake_app_dlopen") << i;
  }
  EXPECT_EQ(calls[2]["api"], "cudaGetDeviceCount");
  EXPECT_EQ(calls.back()["api"], "cudaMemcpy");
}

#ifdef REAL_APP_STATIC
TEST_F(Faults, ExecOfAProgramWithTheRealStaticRuntimeIsFollowed) {
  const Result r =
      run(tracer() + " --json -f device,mem,query -- " FAULT_APP " exec-after 2 " REAL_APP_STATIC " basic");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> apis;
  for (const json& c : records(parse_lines(r.out), "call")) apis.push_back(c["api"]);
  EXPECT_EQ(apis, (std::vector<std::string>{"cudaGetDevice", "cudaGetDevice", "cudaGetDeviceCount", "cudaMalloc",
                                            "cudaFree", "cudaGetDevice", "cudaDeviceSynchronize"}));
}
#endif

TEST_F(Faults, LibraryDlopenedDlclosedAndDlopenedAgain) {
  const Result r = run(tracer() + kWithQuery + " --json --layer runtime -- " FAULT_APP_DLOPEN " dlopen-cycle");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> apis;
  for (const json& c : records(parse_lines(r.out), "call")) apis.push_back(c["api"]);
  EXPECT_EQ(apis, (std::vector<std::string>{"cudaGetDevice", "cudaGetDevice", "cudaGetDeviceCount",
                                            "cudaGetDeviceCount", "cudaGetDeviceCount"}));
}

// The CPU time `pid` has used (user and system: a probe's trap counts as
// system time), -1 once it is gone.
double cpu_seconds(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  unsigned long utime = 0, stime = 0;
  if (paren == std::string::npos ||
      std::sscanf(stat.c_str() + paren + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
    return -1;
  return double(utime + stime) / sysconf(_SC_CLK_TCK);
}

// Runs `t` on fake_app's 8 threads calling as fast as they can, and stops
// cudatrace (never the program) while they have 2 s of CPU time more, or
// until they have all made their calls (the program is then a zombie: its
// parent is stopped): its 1 MiB ring overflows however fast this machine
// reads. Returns cudatrace's exit status, -1 when a step did not happen in time.
int run_with_a_stopped_reader(Tracer& t) {
  pid_t app = 0;  // started once its probes are in place
  const bool running = wait_until([&] {
    app = first_child(t.proc.pid);
    const std::string status = read_file("/proc/" + std::to_string(app) + "/status");
    const auto at = status.find("Threads:\t");
    return app && at != std::string::npos && std::atoi(status.c_str() + at + 9) > 8;
  }, 30s);
  if (!running) return -1;
  const double before = cpu_seconds(app);
  kill(t.proc.pid, SIGSTOP);
  // Or it ended first (a zombie, cudatrace's child: its CPU time stays).
  const bool filled = wait_until(
      [&] { return cpu_seconds(app) < 0 || process_state(app) == 'Z' || cpu_seconds(app) > before + 2; }, 60s);
  kill(t.proc.pid, SIGCONT);
  const int status = t.proc.wait(300s);
  return filled ? status : -1;
}

// Issue 38, item 7: 8 threads calling as fast as they can into a 1 MiB ring
// that cudatrace does not read for a while. Lines are lost, but each lost
// call is counted by API in BPF: the lines and those counts are every call,
// the end line says so, and `report --summary` counts exactly what the
// program did.
TEST_F(Faults, CountsStayExactWhenTheRingLosesLines) {
  constexpr long kThreads = 8, kIterations = 50000;
  Tracer t({"--json", "--ring-mb", "1", "--", FAKE_APP, "threads", std::to_string(kThreads),
            std::to_string(kIterations)});
  ASSERT_EQ(run_with_a_stopped_reader(t), 0) << read_file(t.err);
  const std::vector<json> lines = t.lines();
  const json& end = end_of(lines);
  ASSERT_GT(end["lost_detail"]["ring_buffer"].get<long>(), 0) << "the ring must overflow for this test";
  EXPECT_EQ(end["counts_exact"], true) << end.dump();
  std::map<std::string, long> counted;
  for (const json& c : records(lines, "call")) ++counted[c["api"]];
  long lost = 0;
  for (const auto& [api, st] : end["lost_detail"]["ring_buffer_calls"].items()) {
    counted[api] += st["calls"].get<long>();
    lost += st["calls"].get<long>();
  }
  EXPECT_EQ(lost, end["lost_detail"]["ring_buffer"].get<long>());
  for (const char* api : {"cudaMalloc", "cudaFree", "cuMemAlloc_v2"}) EXPECT_EQ(counted[api], kThreads * kIterations) << api;

  const Result report = run(reporter() + " --summary --json " + t.out);
  ASSERT_EQ(report.status, 0) << report.err;
  const std::vector<json> summaries = records(parse_lines(report.out), "summary");
  ASSERT_EQ(summaries.size(), 1u) << report.out;
  std::map<std::string, long> reported;
  for (const json& a : summaries[0]["apis"]) reported[a["name"]] = a["calls"];
  for (const char* api : {"cudaMalloc", "cudaFree", "cuMemAlloc_v2"}) EXPECT_EQ(reported[api], kThreads * kIterations) << api;

  Tracer text({"--ring-mb", "1", "--", FAKE_APP, "threads", "8", "50000"});
  ASSERT_EQ(run_with_a_stopped_reader(text), 0) << read_file(text.err);
  const std::string err = read_file(text.err);
  EXPECT_NE(err.find("cudatrace: the calls the ring buffer lost, counted by API: "), std::string::npos) << err;
  EXPECT_NE(err.find("(every call is counted: the trace's lines and these)"), std::string::npos) << err;
}

// Issue 47, item 3: summary mode builds the memory tables from the records
// of allocations and frees. 8 threads each allocate and free 50,000 times
// into a 1 MiB ring that cudatrace does not read for a while: the API table
// stays exact (BPF counts it), the tables built from records say they are
// incomplete, and no allocation is listed as never freed (its free may be a
// lost record; every one was freed).
TEST_F(Faults, SummaryUnderRingLossCallsNothingExactOrLeakedThatIsNot) {
  constexpr long kThreads = 8, kIterations = 50000;
  const std::vector<std::string> app = {"--", FAKE_APP, "threads", std::to_string(kThreads), std::to_string(kIterations)};
  std::vector<std::string> args = {"--summary", "--json", "--ring-mb", "1"};
  args.insert(args.end(), app.begin(), app.end());
  Tracer t(args);
  ASSERT_EQ(run_with_a_stopped_reader(t), 0) << read_file(t.err);
  const std::vector<json> lines = t.lines();
  const json& end = end_of(lines);
  const long lost = end["lost_detail"]["ring_buffer"].get<long>();
  ASSERT_GT(lost, 0) << "the ring must overflow for this test";
  const std::vector<json> summaries = records(lines, "summary");
  ASSERT_EQ(summaries.size(), 1u) << read_file(t.out);
  const json& s = summaries[0];
  for (const json& a : s["apis"])
    if (a["name"] == "cudaMalloc" || a["name"] == "cudaFree") EXPECT_EQ(a["calls"], kThreads * kIterations) << a;
  EXPECT_EQ(s.value("records_lost", 0L), end["lost"].get<long>()) << s.dump();
  const json incomplete = s.value("incomplete", json::array());
  for (const char* part : {"memory", "leaks", "insights"})
    EXPECT_NE(std::find(incomplete.begin(), incomplete.end(), part), incomplete.end()) << part << ": " << s.dump();
  // Launches and copies are counted in BPF: exact.
  EXPECT_EQ(std::find(incomplete.begin(), incomplete.end(), "kernels"), incomplete.end()) << s.dump();
  EXPECT_FALSE(s.contains("leaks")) << s["leaks"].dump();
  for (const json& m : s["memory"]) EXPECT_LT(m["allocs"].get<long>(), kThreads * kIterations) << m;

  std::vector<std::string> text_args = {"--summary", "--ring-mb", "1"};
  text_args.insert(text_args.end(), app.begin(), app.end());
  Tracer text(text_args);
  ASSERT_EQ(run_with_a_stopped_reader(text), 0) << read_file(text.err);
  const std::string out = read_file(text.out);
  std::smatch said;
  ASSERT_TRUE(std::regex_search(out, said, std::regex("\nDevice memory:\n(.|\n)*?\n([0-9,]+) call records lost: "
                                                      "this table is incomplete\n")))
      << out;
  EXPECT_NE(out.find("\nAllocations never freed: not listed: " + said[2].str() +
                     " call records were lost, perhaps frees of allocations that would be listed\n"),
            std::string::npos) << out;
  EXPECT_EQ(out.find("Address"), std::string::npos) << "no leak listed: " << out;
}

// ---- 4. Mount namespaces -----------------------------------------------------

// The target runs from a tmpfs mounted in its own mount namespace: its
// libcudart exists only through /proc/PID/root.
TEST_F(Faults, LibraryReachableOnlyThroughProcPidRoot) {
  const std::string dir = temp_path("ns");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  const fs::path fixtures = fs::path(FAKE_APP).parent_path();
  Child app = Child::start({dir + "/fake_app", "wait-then-basic"}, [&] {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", dir.c_str(), "tmpfs", 0, "mode=0755") != 0)
      _exit(126);
    std::error_code ec;
    fs::create_directories(dir + "/fakecudart", ec);
    fs::create_directories(dir + "/fakecuda", ec);
    fs::copy_file(FAKE_APP, dir + "/fake_app", ec);
    fs::copy_file(fixtures / "fakecudart/libcudart.so.13", dir + "/fakecudart/libcudart.so.13", ec);
    fs::copy_file(fixtures / "fakecuda/libcuda.so.1", dir + "/fakecuda/libcuda.so.1", ec);
    if (ec) _exit(126);
  });
  const std::string ready = app.read_line();
  ASSERT_EQ(ready.rfind("ready", 0), 0u) << "could not set up the namespace";
  ASSERT_FALSE(fs::exists(dir + "/fakecudart/libcudart.so.13"));  // not from here
  Tracer t({"--json", "-f", "mem,xfer,launch,stream,event,device,query", "--layer", "runtime", "-p",
            std::to_string(app.pid)});
  const bool attached = t.attached();
  app.go();
  EXPECT_EQ(app.wait(), 0);
  EXPECT_EQ(t.proc.wait(), 0);
  rmdir(dir.c_str());
  ASSERT_TRUE(attached) << read_file(t.err);
  const auto calls = records(t.lines(), "call");
  ASSERT_EQ(calls.size(), 17u);
  EXPECT_EQ(calls[0]["api"], "cudaGetDeviceCount");
  EXPECT_EQ(calls[0]["args"]["count"], 4);
}

// ---- 5. Bad input -------------------------------------------------------------

// A copy of `from` with one byte of its ELF header changed.
std::string patched_elf(const std::string& from, const std::string& tag, std::size_t offset, unsigned char value) {
  const std::string path = temp_path(tag);
  fs::copy_file(from, path, fs::copy_options::overwrite_existing);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.put(static_cast<char>(value));
  fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
  return path;
}

void expect_one_clear_error(const Result& r, int status, const std::string& says, const std::string& what) {
  EXPECT_EQ(r.status, status) << what << ": " << r.err;
  EXPECT_NE(r.err.find(says), std::string::npos) << what << ": " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
  EXPECT_EQ(r.err.rfind("cudatrace: ", 0), 0u) << what << ": " << r.err;
  EXPECT_TRUE(r.out.empty()) << what << ": " << r.out;
}

TEST_F(Faults, BadInputGetsOneClearLineAndNonZeroExit) {
  constexpr std::size_t kEiClass = 4, kEMachine = 18;
  const std::string elf32 = patched_elf(FAKE_CUDART_LIB, "elf32.so", kEiClass, 1 /* ELFCLASS32 */);
  const std::string arm64 = patched_elf(FAKE_CUDART_LIB, "arm64.so", kEMachine, 183 /* EM_AARCH64 */);
  const std::string arm64_app = patched_elf(FAKE_APP, "arm64-app", kEMachine, 183);
  const std::string out_file = temp_path("never-written");
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"--lib " FAULT_APP_STRIPPED " -- true", 3, "no traced CUDA API symbol in it"},
      {"--lib " + elf32 + " -- true", 3, "not an x86-64 ELF64 file"},
      {"--lib " + arm64 + " -- true", 3, "not an x86-64 ELF64 file"},
      {"-- " + arm64_app, 3, "not an x86-64 program"},
      {"--min-us ten -- true", 2, "--min-us"},
      {"--ring-mb -1 -- true", 2, "--ring-mb"},
      {"--ring-mb 2048 -- true", 2, "power of two"},
      {"-p abc", 2, "--pid"},
      {"--tid -5 -p 1", 2, "invalid TID"},
      {"--min-us=-3 -- true", 2, "--min-us: takes a decimal number, not '-3'"},
      {"--tid=abc -- true", 2, "--tid"},
      {"--dlopen-stop sometimes -- true", 2, "--dlopen-stop must be auto, always or never"},
      {"--no-dlopen-stop --dlopen-stop=always -- true", 2, "--no-dlopen-stop contradicts"},
      {"-o /tmp -- true", 6, "cannot write /tmp: Is a directory"},
      {"-o " + out_file + " -p 4194000", 3, "no such process"},
  };
  for (const auto& [args, status, says] : cases) expect_one_clear_error(run(tracer() + " " + args), status, says, args);
  for (const std::string& f : {elf32, arm64, arm64_app}) std::remove(f.c_str());
  EXPECT_FALSE(fs::exists(out_file)) << "-o file left behind by a failed start";
}

// Values that used to be taken silently, or to mean something else than
// what was written (issue 25): each is one line and status 2, nothing run.
TEST_F(Faults, ValuesThatMeanNothingAreRefusedWithOneLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"-p 0", "invalid PID '0': -p/--pid takes a process id from 1 to 4194303"},
      {"-p 99999999999999999999", "invalid PID '99999999999999999999'"},  // was echoed as 9223372036854775807
      {"-p 12abc", "invalid PID '12abc'"},
      {"-i 0 --summary -- true", "--interval: takes a number of seconds from 1 to 4294967295, not '0'"},
      {"-c 0 -i 1 --summary -- true", "--count: takes a number of reports from 1 to 4294967295, not '0'"},
      // Issue 47: out of range is said with the range, not as "not a decimal number" or CLI11's words.
      {"--min-us 18446744073709551615 -- true",
       "--min-us: takes a number of microseconds from 0 to 1000000000000, not '18446744073709551615'"},
      {"--min-us 99999999999999999999999 -- true", "from 0 to 1000000000000, not '99999999999999999999999'"},
      {"-i 99999999999 --summary -- true", "--interval: takes a number of seconds from 1 to 4294967295, not '99999999999'"},
      {"--buffer-mb 65537 -- true", "--buffer-mb: takes a number of MiB from 1 to 65536, not '65537'"},
      // Issue 47: an empty --opt= took the next argument as its value ("--output= --json" wrote ./--json).
      {"--output= --json -- true", "--output: --output= needs a value, not an empty string"},
      {"--output= -- true", "--output: --output= needs a value, not an empty string"},
      {"--perfetto= -- true", "--perfetto: --perfetto= needs a value, not an empty string"},
      {"-o --json -- true", "--output: takes a FILE, not the option '--json' (for a file of that name, write ./--json)"},
      {"--perfetto --summary -- true", "--perfetto: takes a FILE, not the option '--summary'"},
      {"--lib --json -- true", "--lib: takes a PATH, not the option '--json'"},
      {"--max-overhead nan -- true", "--max-overhead takes a percentage from 0.01 to 100, not 'nan'"},
      {"--max-overhead inf -- true", "not 'inf'"},
      {"--max-overhead -1 -- true", "not '-1'"},
      {"-o '' -- true", "--output: needs a value, not an empty string"},  // was standard output
      {"-f '' -- true", "--filter: needs a value, not an empty string"},  // was the default groups
      {"--perfetto '' -- true", "--perfetto: needs a value, not an empty string"},
      {"--all-processes --prometheus 999.1.1.1:19410",  // civetweb listened on 231.1.1.1
       "--prometheus: HOST must be an IPv4 address such as 127.0.0.1, or empty for every address (no host names or "
       "IPv6), not '999.1.1.1'"},
      {"--all-processes --prometheus :99999",
       "--prometheus needs HOST:PORT with a port from 0 (any free port) to 65535"},
      // Issue 38, item 8: numbers are decimal, in cudatrace's own words.
      {"--ring-mb 020 -- true", "--ring-mb must be a power of two"},  // twenty, not octal sixteen
      {"--ring-mb 0x10 -- true", "--ring-mb: takes a decimal number, not '0x10'"},
      {"--ring-mb +16 -- true", "--ring-mb: takes a decimal number, not '+16'"},
      {"--ring-mb ' 16' -- true", "--ring-mb: takes a decimal number, not ' 16'"},
      {"--ring-mb '16 ' -- true", "--ring-mb: takes a decimal number, not '16 '"},
      {"--buffer-mb 1e3 -- true", "--buffer-mb: takes a decimal number, not '1e3'"},
      {"--min-us 0x10 -- true", "--min-us: takes a decimal number, not '0x10'"},
      {"-i 0x1 --summary -- true", "--interval: takes a decimal number, not '0x1'"},
      {"--max-overhead 1e1 -- true", "--max-overhead takes a percentage from 0.01 to 100, not '1e1'"},
      {"--max-overhead ' 5' -- true", "not ' 5'"},
      // A selection of nothing is said, not traced silently.
      {"--layer nccl -f mem -- true", "-f mem --layer nccl selects no API"},
  };
  for (const auto& [args, says] : cases) expect_one_clear_error(run(tracer() + " " + args), 2, says, args);
  EXPECT_EQ(run(tracer() + " --ring-mb 016 -o /dev/null -- true").status, 0) << "leading zeros: still decimal";
  // A name with a line break stays on its line.
  expect_one_clear_error(run(tracer() + " -- '/nonexistent/a\nb'"), 3, "/nonexistent/a\\x0ab", "newline in a command");
  expect_one_clear_error(run(reporter() + " '/nonexistent/a\nb'"), 7, "cannot read /nonexistent/a\\x0ab",
                         "newline in a trace's path");
  expect_one_clear_error(run(reporter() + " -f '' /dev/null"), 2, "--filter: needs a value, not an empty string",
                         "report -f ''");
  expect_one_clear_error(run(reporter() + " --perfetto= /dev/null"), 2,
                         "--perfetto: --perfetto= needs a value, not an empty string", "report --perfetto=");
  expect_one_clear_error(run(reporter() + " --perfetto --json /dev/null"), 2,
                         "--perfetto: takes a FILE, not the option '--json'", "report --perfetto --json");
  for (const std::string name : {"--json", "--"}) EXPECT_FALSE(fs::exists(name)) << name << " written by an empty --opt=";
}

// Whatever keeps the command from running is one line and status 3 (as
// --help says), before anything runs: not found, not executable, a
// directory, not a program; an exec that fails all the same says why too.
TEST_F(Faults, CommandsThatCannotRunGetOneLineAndStatusThree) {
  const std::string junk = temp_path("not-a-program");
  std::ofstream(junk) << "this is no program\n";
  chmod(junk.c_str(), 0755);
  // A program whose ELF interpreter (dynamic loader) does not exist.
  std::string bytes = read_file(FAKE_APP);
  const std::string loader = "/lib64/ld-linux-x86-64.so.2";
  ASSERT_NE(bytes.find(loader), std::string::npos);
  bytes[bytes.find(loader) + loader.size() - 1] = '9';
  const std::string no_loader = temp_path("no-loader");
  std::ofstream(no_loader, std::ios::binary) << bytes;
  chmod(no_loader.c_str(), 0755);
  // A program open for writing: only its exec finds out (ETXTBSY).
  const std::string busy = temp_path("busy");
  fs::copy_file(FAKE_APP, busy);
  const int writer = open(busy.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(writer, 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/etc/passwd", "cannot run /etc/passwd: it is not executable"},  // was "command not found"
      {"/tmp", "cannot run /tmp: it is a directory"},                  // was status 127
      {junk, "cannot run " + junk + ": not a program (neither an ELF executable nor a script starting with #!)"},
      {"definitely-not-a-command-xyz", "command not found: definitely-not-a-command-xyz"},
      {no_loader, "cannot run " + no_loader + ": its ELF interpreter /lib64/ld-linux-x86-64.so.9 does not exist"},
      {busy, "cannot run " + busy + ": Text file busy"},
  };
  for (const auto& [command, says] : cases)
    expect_one_clear_error(run(tracer() + " --json -- " + command), 3, says, command);
  close(writer);
  for (const std::string& f : {junk, no_loader, busy}) std::remove(f.c_str());
}

// -p on what cudatrace cannot trace says what it is, not "no CUDA found
// in the 0 files it maps".
TEST_F(Faults, PidThatCannotBeTracedSaysWhy) {
  // A kernel thread: PF_KTHREAD (0x200000) in its stat flags, the 9th field.
  pid_t kthread = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string stat = read_file(e.path() / "stat");
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 2));
    std::string field;
    for (int i = 3; i < 9 && fields >> field;) ++i;
    unsigned long flags = 0;
    if (fields >> flags && (flags & 0x200000)) {
      kthread = std::stoi(e.path().filename());
      break;
    }
  }
  if (kthread)
    expect_one_clear_error(run(tracer() + " -p " + std::to_string(kthread)), 3, "is a kernel thread: it runs no "
                           "user-space code to trace", "kernel thread");
  // A zombie: a child that exited and was not waited for.
  const pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  ASSERT_TRUE(wait_until([&] { return process_state(zombie) == 'Z'; }, 5s));
  expect_one_clear_error(run(tracer() + " -p " + std::to_string(zombie)), 3,
                         "process " + std::to_string(zombie) + " (fault_tests) has exited: its parent has not reaped "
                         "it yet, and nothing of it is left to trace", "zombie");
  waitpid(zombie, nullptr, 0);
  // A process whose maps root may not read (PID 1 of a sandbox's outer user namespace, here).
  if (access("/proc/1/maps", R_OK) == 0 && run("cat /proc/1/maps").status == 0) return;
  expect_one_clear_error(run(tracer() + " -p 1"), 4, "cannot read /proc/1/maps: Permission denied: cudatrace may "
                         "not inspect process 1", "-p 1");
}

// A port in use is refused at once with the system's reason, not after the
// BPF programs are loaded with civetweb's "null context" (3.4 s).
TEST_F(Faults, PrometheusPortInUseFailsAtOnce) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string taken = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  const auto start = std::chrono::steady_clock::now();
  const Result r = run(tracer() + " --all-processes --prometheus " + taken);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);  // (it took 3.4 s, after loading BPF)
  expect_one_clear_error(r, 6, "cannot serve Prometheus metrics on " + taken + ": Address already in use", taken);
  close(fd);
}

// /metrics answered 30 ms after start while tracing began 0.8 s later, and
// past 64 connections at once the rest were reset. Now a scrape before
// tracing gets 503 with Retry-After, then 200 with the time tracing began,
// and 2,000 scrapes at once are every one answered.
TEST_F(Faults, PrometheusAnswersEveryScrapeAnd503UntilTracing) {
  const int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = http::loopback(0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(probe);  // a free port, for the tracer to take
  const int port = ntohs(addr.sin_port);
  const std::string err = temp_path("prometheus-err");
  const auto unix_now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  const double started = unix_now();
  std::vector<std::string> argv = tracer_argv();
  argv.insert(argv.end(), {"--all-processes", "--prometheus", "127.0.0.1:" + std::to_string(port)});
  Child exporter = Child::start(argv, [&err] {
    const int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, STDERR_FILENO);
  });
  const std::string scrape = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  int unavailable = 0;
  double first_unavailable = 0;
  std::string ok;
  ASSERT_TRUE(wait_until(
      [&] {
        const double asked = unix_now();
        const std::string r = http::http_exchange(port, scrape);
        if (r.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0) == 0) {
          EXPECT_NE(r.find("\r\nRetry-After: 1\r\n"), std::string::npos) << r;
          if (!unavailable++) first_unavailable = asked;
        } else if (r.rfind("HTTP/1.1 200 OK\r\n", 0) == 0) {
          ok = r;
        } else {
          EXPECT_TRUE(r.empty()) << "neither 503 nor 200: " << r;  // (not listening yet)
        }
        return !ok.empty();
      },
      60s))
      << read_file(err);
  // Loading the BPF programs takes seconds in exporter mode: the first scrapes came before tracing began.
  EXPECT_GT(unavailable, 0) << read_file(err);
  std::smatch since;
  const std::string body = http::body_of(ok);
  ASSERT_TRUE(std::regex_search(body, since, std::regex("\ncudatrace_tracing_since_seconds ([0-9.e+]+)\n"))) << body;
  const double began = std::stod(since[1]);
  EXPECT_GT(began, first_unavailable) << "tracing began after the first 503";
  EXPECT_GT(began, started);
  EXPECT_LT(began, unix_now());
  EXPECT_TRUE(wait_until([&] { return read_file(err).find("serving Prometheus metrics") != std::string::npos; }));

  const auto scraped = std::chrono::steady_clock::now();
  const std::vector<std::string> answers = http::many_exchanges(port, 2000, scrape, 60s * time_scale());
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - scraped);
  std::map<std::string, int> statuses;
  for (const std::string& a : answers) ++statuses[a.substr(0, a.find('\r'))];
  EXPECT_EQ(statuses["HTTP/1.1 200 OK"], 2000) << testing::PrintToString(statuses);
  std::printf("2,000 concurrent scrapes of cudatrace in %lld ms: %s\n", static_cast<long long>(took.count()),
              testing::PrintToString(statuses).c_str());
  kill(exporter.pid, SIGTERM);
  EXPECT_EQ(exporter.wait(20s), 0) << read_file(err);
  std::remove(err.c_str());
}

// Without .symtab a program with the fake runtime linked in has no symbol to
// probe; with it, the same program is traced (so the failure is the strip).
// (A stripped program with the toolkit's real runtime is traced: its code is
// recognised, see Trace.RealLibcudartStaticallyLinkedAndStripped.)
// -p waits for a CUDA library the (dynamically linked) program might load
// later, and ends with it, having traced nothing.
TEST_F(Faults, StrippedProgramWithStaticRuntime) {
  Tracer traced({"--json", "-f", "device,query", "--", FAULT_APP_STATIC, "wait-then-calls", "3"});
  traced.proc.go();
  ASSERT_EQ(traced.proc.wait(), 0) << read_file(traced.err);
  EXPECT_EQ(records(traced.lines(), "call", "cudaGetDevice").size(), 3u);

  Child app = Child::start({FAULT_APP_STRIPPED, "wait-then-calls", "3"});
  ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
  Tracer stripped({"--json", "-p", std::to_string(app.pid)});
  ASSERT_TRUE(stripped.waiting()) << read_file(stripped.err);
  app.go();
  EXPECT_EQ(app.wait(), 0);
  EXPECT_EQ(stripped.proc.wait(), 0) << read_file(stripped.err);
  EXPECT_EQ(records(stripped.lines(), "call").size(), 0u);
}

// A process that cannot load a library later (no dynamic loader) and has no
// CUDA API in it: one line and status 3, as before.
TEST_F(Faults, PidWithoutCudaOrADynamicLoaderIsAnError) {
  Child app = Child::start({STATIC_APP});
  ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
  expect_one_clear_error(run(tracer() + " -p " + std::to_string(app.pid)), 3,
                         "no CUDA runtime or driver API found in process " + std::to_string(app.pid), "-p static");
  app.go();
  EXPECT_EQ(app.wait(), 0);
}

TEST_F(Faults, NotRootGetsOneLine) {
  if (run("setpriv --reuid=65534 --regid=65534 --clear-groups true").status != 0) GTEST_SKIP() << "no setpriv";
  const std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups " + tracer();
  expect_one_clear_error(run(as_nobody + " -- " FAKE_APP " basic"), 4, "needs root", "command");
  expect_one_clear_error(run(as_nobody + " -p 1"), 4, "needs root", "-p");
}

// Root whose capabilities a container or a bounding set took: told so before
// anything is tried (the kernel's EPERM would otherwise look like a missing
// kernel feature or a verifier refusal).
TEST_F(Faults, RootWithoutBpfCapabilitiesGetsOneLine) {
  const std::string no_caps = "setpriv --bounding-set -bpf,-perfmon,-sys_admin ";
  if (run(no_caps + "true").status != 0) GTEST_SKIP() << "no setpriv";
  expect_one_clear_error(run(no_caps + tracer() + " -- " FAKE_APP " basic"), 4,
                         "runs as root without CAP_BPF and CAP_PERFMON", "without all three");
  expect_one_clear_error(run("setpriv --bounding-set -bpf,-sys_admin " + tracer() + " -- " FAKE_APP " basic"), 4,
                         "runs as root without CAP_BPF and CAP_PERFMON", "with CAP_PERFMON only");
}

// Text: the header cannot be written, so nothing runs: one line. JSON has no
// header: the calls are made and lost, and stderr says how many were
// written and how many lost, as text mode does (JSON said only "No space").
TEST_F(Faults, FullDiskGetsOneLineInBothFormats) {
  // (--layer runtime -f device: the fake libraries export every API asked for, so no warning either.)
  const Result text = run(tracer() + " --layer runtime -f device -o /dev/full -- " FAKE_APP " loop 10");
  expect_one_clear_error(text, 6, "writing /dev/full: No space left on device", "text");
  const Result json = run(tracer() + " --json --layer runtime -f query -o /dev/full -- " FAKE_APP " loop 10");
  EXPECT_EQ(json.status, 6) << json.err;
  EXPECT_EQ(json.err.rfind("cudatrace: writing /dev/full: No space left on device\n"
                           "cudatrace: 0 calls traced, 10 lost, 0 unfinished\n"
                           "cudatrace: lost 10 records that could not be written (writing /dev/full: No space left "
                           "on device)\n", 0), 0u) << json.err;
  EXPECT_TRUE(json.out.empty()) << json.out;
}

// A disk that fills up while tracing (a 64 KiB tmpfs, mounted in a mount
// namespace of its own): every output that fails exits 6 and says which,
// the timeline is not left half written, and the lost records are not
// blamed on a slow consumer. `report --perfetto` likewise.
TEST_F(Faults, DiskFillingUpWhileTracingExitsSixForEveryOutput) {
  const std::string dir = temp_path("full");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  const std::string traced = " --layer runtime -f query -- " FAKE_APP " loop 3000";
  const std::string trace = temp_path("full-source.jsonl");
  ASSERT_EQ(run(tracer() + " --json -o " + trace + traced).status, 0);
  // One shell in the namespace: each step prints its status and the file's size.
  // Each step runs to its end, however slow the machine: only a hang is cut
  // short (timeout's 124), so that it fails instead of waiting for ever.
  const Result r = run("timeout 600 unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs " + dir + " || exit 99\n" +
                       tracer() +
                       " --perfetto " + dir + "/t.json -o /dev/null" + traced + "; echo timeline $? $(stat -c %s " +
                       dir + "/t.json)\n" + tracer() + " -o " + dir + "/t.txt" + traced + "; echo text $?\n" +
                       "rm " + dir + "/t.txt; " + tracer() + " --json -o " + dir + "/t.jsonl" + traced +
                       "; echo json $? $(wc -l <" + dir + "/t.jsonl)\n" + "rm " + dir + "/t.jsonl; " +
                       reporter() + " -f all --perfetto " + dir + "/r.json " + trace +
                       " >/dev/null; echo report $? $(stat -c %s " + dir + "/r.json)'");
  rmdir(dir.c_str());
  std::remove(trace.c_str());
  ASSERT_NE(r.status, 99) << "cannot mount a tmpfs: " << r.err;
  ASSERT_NE(r.status, 124) << "did not end in 10 minutes: " << r.out << r.err;
  EXPECT_NE(r.out.find("timeline 6 0\n"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("cudatrace: writing " + dir + "/t.json: No space left on device; the timeline is incomplete, "
                       "so the file was emptied\n"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("text 6\n"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("cudatrace: writing " + dir + "/t.txt: No space left on device\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("records that could not be written (writing " + dir + "/t.txt: No space left on device)"),
            std::string::npos) << r.err;
  // JSON says it too: the calls whose lines were written whole, and the rest lost.
  std::smatch json;
  ASSERT_TRUE(std::regex_search(r.out, json, std::regex("json 6 ([0-9]+)\n"))) << r.out << r.err;
  std::smatch counts;
  const std::regex json_end("cudatrace: ([0-9]+) calls traced, ([0-9]+) lost, 0 unfinished\n"
                            "cudatrace: lost [0-9]+ records that could not be written \\(writing " +
                            dir + "/t.jsonl: No space left on device\\)\n");
  ASSERT_TRUE(std::regex_search(r.err, counts, json_end)) << r.err;
  EXPECT_EQ(counts[1], json[1]) << "written: the whole lines in the file";
  EXPECT_EQ(std::stoul(counts[1]) + std::stoul(counts[2]), 3000u) << r.err;
  EXPECT_EQ(r.err.find("consumer"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--buffer-mb"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("report 6 0\n"), std::string::npos) << r.out << r.err;
}

// Whether `f` (a pipe) has something to read within `limit`.
bool readable_within(FILE* f, std::chrono::milliseconds limit) {
  pollfd p{fileno(f), POLLIN, 0};
  return poll(&p, 1, static_cast<int>((limit * time_scale()).count())) == 1;
}

// Issue 47, item 4: cudatrace stopped tracing at the write error of a disk
// that filled up, and the calls made after it were neither written nor
// counted. The program fills a 1 MiB disk with its first 20,000 calls and
// makes 20,000 more once cudatrace has said that writing failed: every call
// is in the file, whole, or counted as lost. `report` of such a file, its
// last line cut, reports the whole lines and warns of the cut one.
TEST_F(Faults, DiskFullWhileTracingCountsEveryCallToTheEnd) {
  constexpr long kBefore = 20000, kAfter = 20000;
  const std::string dir = temp_path("disk-full"), copy = temp_path("disk-full-trace"), err_path = temp_path("disk-full-err");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  // The tmpfs lives in a mount namespace of the shell's own; the shell copies
  // the trace out once cudatrace has exited, and exits with its status.
  const std::string script = "mount -t tmpfs -o size=1m tmpfs " + dir + " || exit 99\n" + tracer() + " -o " + dir +
                             "/t.jsonl --json --layer runtime -f query -- " FAULT_APP " calls-wait-calls " +
                             std::to_string(kBefore) + " " + std::to_string(kAfter) + "\nstatus=$?\ncp " + dir +
                             "/t.jsonl " + copy + "\nexit $status";
  Child traced = Child::start({"/usr/bin/unshare", "-m", "sh", "-c", script}, [&err_path] {
    dup2(open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), STDERR_FILENO);
  });
  // The first calls fill the disk; the rest come once cudatrace has said so.
  const bool ready = readable_within(traced.out, 60s) && traced.read_line().rfind("ready", 0) == 0;
  const bool said = ready && wait_until([&] {
    return read_file(err_path).find("No space left on device") != std::string::npos;
  }, 30s);
  traced.go();
  const int status = wait_or_fail(traced, 60s, "cudatrace on a full disk");
  const std::string trace = read_file(copy), err = read_file(err_path);
  for (const std::string& f : {copy, err_path}) std::remove(f.c_str());
  rmdir(dir.c_str());
  ASSERT_NE(status, 99) << "cannot mount a tmpfs: " << err;
  ASSERT_TRUE(ready) << err;
  ASSERT_TRUE(said) << "the first calls must fill the disk: " << err;
  EXPECT_EQ(status, 6) << err;
  std::smatch counts;
  ASSERT_TRUE(std::regex_search(err, counts, std::regex("cudatrace: ([0-9]+) calls traced, ([0-9]+) lost, 0 unfinished\n")))
      << err;
  EXPECT_NE(err.find(" records that could not be written (writing " + dir + "/t.jsonl: No space left on device)\n"),
            std::string::npos) << err;
  const auto whole_lines = std::count(trace.begin(), trace.end(), '\n');
  EXPECT_EQ(std::stol(counts[1]), whole_lines) << "written: the whole lines in the file";
  EXPECT_EQ(std::stol(counts[1]) + std::stol(counts[2]), kBefore + kAfter) << err;

  // The whole lines, and half a line after them, as a disk that fills up leaves them.
  ASSERT_GT(whole_lines, 0);
  const std::string cut = temp_path("cut.jsonl");
  std::ofstream(cut) << trace.substr(0, trace.rfind('\n') + 1) << trace.substr(0, trace.find('\n') / 2);
  const Result report = run(reporter() + " --summary --json -f query " + cut);
  std::remove(cut.c_str());
  EXPECT_EQ(report.status, 0) << report.err;
  EXPECT_EQ(report.err, "cudatrace: warning: " + cut + ":" + std::to_string(whole_lines + 1) +
                            ": the last line is cut short (no end line: writing the trace stopped in the middle of a "
                            "line, on a full disk say); this report is of the " + std::to_string(whole_lines) +
                            " lines before it\n");
  const std::vector<json> summaries = records(parse_lines(report.out), "summary");
  ASSERT_EQ(summaries.size(), 1u) << report.out;
  ASSERT_EQ(summaries[0]["apis"].size(), 1u) << report.out;
  EXPECT_EQ(summaries[0]["apis"][0]["calls"].get<long>(), whole_lines) << report.out;
}

// A timeline that cannot be written at all is found before anything runs.
TEST_F(Faults, TimelineOnAFullDeviceGetsOneLineAndStatusSix) {
  expect_one_clear_error(run(tracer() + " --json -o /dev/null --perfetto /dev/full -- " FAKE_APP " loop 10"), 6,
                         "writing /dev/full: No space left on device", "live");
  const std::string trace = temp_path("devfull-source.jsonl");
  ASSERT_EQ(run(tracer() + " --json -o " + trace + " --layer runtime -f query -- " FAKE_APP " loop 10").status, 0);
  expect_one_clear_error(run(reporter() + " --summary --perfetto /dev/full " + trace + " >/dev/null"), 6,
                         "writing /dev/full: No space left on device", "report");
  std::remove(trace.c_str());
}

// The trace and the timeline into one file made a file that was neither:
// refused before anything runs, whatever names the two are given.
TEST_F(Faults, TraceAndTimelineInOneFileAreRefused) {
  const std::string dir = temp_path("one-file");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  const std::string f = dir + "/trace", hard = dir + "/hard", link = dir + "/link";
  std::ofstream(f) << "precious\n";
  ASSERT_EQ(::link(f.c_str(), hard.c_str()), 0);
  ASSERT_EQ(symlink(f.c_str(), link.c_str()), 0);
  const std::string fresh = dir + "/fresh";
  const std::string cmd = " -- " FAKE_APP " loop 2";
  for (const auto& [args, said] : std::vector<std::pair<std::string, std::string>>{
           {"-o " + f + " --perfetto " + f, "--perfetto " + f + " is the file the trace goes to (-o " + f + ")"},
           {"-o " + f + " --perfetto " + hard, "--perfetto " + hard + " is the file the trace goes to"},
           {"-o " + link + " --perfetto " + dir + "/../" + fs::path(dir).filename().string() + "/trace",
            "is the file the trace goes to"},
           {"-o " + fresh + " --perfetto " + dir + "/./fresh", "is the file the trace goes to"},
           {"--json --perfetto " + hard + cmd + " >" + f, "is the file the trace goes to (standard output)"},
       }) {
    const Result r = run("( " + tracer() + " " + args + (args.find(" -- ") == std::string::npos ? cmd : "") + " )");
    expect_one_clear_error(r, 2, said, args);
    // (With "> f" the shell truncated it.)
    EXPECT_EQ(read_file(f), args.find('>') == std::string::npos ? "precious\n" : "") << args;
    std::ofstream(f) << "precious\n";
  }
  EXPECT_FALSE(fs::exists(fresh));
  expect_one_clear_error(run(reporter() + " --perfetto " + link + " " + f), 2,
                         "--perfetto " + link + " is the trace being read: it would be overwritten", "report");
  EXPECT_EQ(read_file(f), "precious\n");
  fs::remove_all(dir);
}

// `report FIFO` with no writer waited in open() for ever. Now it waits for
// a writer for 10 s (the tracer writing it opens it once attached), then
// says so; a FIFO whose writer comes is read as any trace.
TEST_F(Faults, ReportOfAFifoWaitsForAWriterForABoundedTime) {
  const std::string lonely = temp_path("lonely-fifo"), fed = temp_path("fed-fifo"), err = temp_path("lonely-err");
  ASSERT_EQ(mkfifo(lonely.c_str(), 0600), 0);
  ASSERT_EQ(mkfifo(fed.c_str(), 0600), 0);
  const auto quiet = [](const std::string& err_path) {
    return [err_path] {
      const int null_fd = open("/dev/null", O_WRONLY);
      dup2(null_fd, STDOUT_FILENO);
      const int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, STDERR_FILENO);
    };
  };
  const auto start = std::chrono::steady_clock::now();
  Child waiting = Child::start({CUDATRACE_BIN, "report", lonely}, quiet(err));
  // Meanwhile, the other FIFO: its report starts first, the trace into it later.
  Child reading = Child::start({CUDATRACE_BIN, "report", "--summary", fed}, quiet("/dev/null"));
  std::this_thread::sleep_for(500ms);
  const Result live = run(tracer() + " --json -o " + fed + " --layer runtime -f query -- " FAKE_APP " loop 5");
  EXPECT_EQ(live.status, 0) << live.err;
  EXPECT_EQ(wait_or_fail(reading, 20s, "report of a FIFO written by cudatrace"), 0);
  EXPECT_EQ(wait_or_fail(waiting, 20s, "report of a FIFO without a writer"), 7);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 9s);
  EXPECT_LT(waited, 15s);
  EXPECT_EQ(read_file(err),
            "cudatrace: cannot read " + lonely + ": it is a FIFO and no process opened it for writing within 10 s\n");
  for (const std::string& f : {lonely, fed, err}) std::remove(f.c_str());
}

// The peak RSS of process `pid` since its exec (VmHWM), 0 before its exec
// or once it is gone. (wait4's ru_maxrss is no use here: a forked child
// carries the peak of the test process it was copied from across its exec.)
long peak_rss_kb_after_exec(pid_t pid, const std::string& program) {
  const std::string proc = "/proc/" + std::to_string(pid);
  if (read_file(proc + "/comm") != program + "\n") return 0;
  std::istringstream status(read_file(proc + "/status"));
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

// `cudatrace report ARGS` (stdout to /dev/null): its status, stderr and the
// highest peak RSS seen while it ran (looked at every millisecond: a report
// that grows does so for longer); killed (a failure) once that passes
// `max_rss_kb` (the old report grew by 0.5 GB a second) or after `limit`.
struct Measured {
  int status = -1;
  std::string err;
  long peak_rss_kb = 0;
};
Measured report_measured(const std::vector<std::string>& args, long max_rss_kb, std::chrono::seconds limit = 30s) {
  const std::string err = temp_path("measured-err");
  std::vector<std::string> argv = {CUDATRACE_BIN, "report"};
  argv.insert(argv.end(), args.begin(), args.end());
  Child report = Child::start(argv, [&err] {
    dup2(open("/dev/null", O_WRONLY), STDOUT_FILENO);
    dup2(open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), STDERR_FILENO);
  });
  Measured m;
  int status = 0;
  const auto end = std::chrono::steady_clock::now() + limit * time_scale();
  while (waitpid(report.pid, &status, WNOHANG) != report.pid) {
    m.peak_rss_kb = std::max(m.peak_rss_kb, peak_rss_kb_after_exec(report.pid, "cudatrace"));
    if (m.peak_rss_kb > max_rss_kb || std::chrono::steady_clock::now() > end) {
      ADD_FAILURE() << "report " << args.back() << ": " << m.peak_rss_kb << " KiB after "
                    << (m.peak_rss_kb > max_rss_kb ? "less than " : "") << limit.count() << " s";
      return m;  // (the Child kills it)
    }
    std::this_thread::sleep_for(1ms);
  }
  report.pid = -1;  // waited for
  m.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  m.err = read_file(err);
  std::remove(err.c_str());
  return m;
}

// `report /dev/zero` grew to 3.4 GB in 6 s, one 100 MB line peaked at 643
// MB: a line is read up to 1 MiB, then refused with its number, and memory
// stays small whatever the input.
TEST_F(Faults, ReportMemoryStaysBoundedWhateverTheInput) {
  const std::string long_line = temp_path("long-line.jsonl"), nuls = temp_path("nuls.jsonl");
  {
    std::ofstream out(long_line, std::ios::binary);
    out << R"({"type":"call","comm":")" << std::string(100 << 20, 'a') << "\"}\n";
    std::ofstream(nuls, std::ios::binary) << std::string(64 << 20, '\0');
  }
  for (const std::string& input : {std::string("/dev/zero"), long_line, nuls}) {
    const Measured m = report_measured({input}, 64 << 10);
    EXPECT_EQ(m.status, 7) << input;
    EXPECT_EQ(m.err, "cudatrace: " + input + ":1: a line longer than 1 MiB: not a line of a cudatrace trace\n");
    std::printf("report %s: highest peak RSS seen %.1f MiB\n", input.c_str(), m.peak_rss_kb / 1024.0);
  }
  std::remove(long_line.c_str());
  std::remove(nuls.c_str());
}

// Calls are written when they return: a trace is in order of return. One
// out of that order is put in order within a window (a reversed trace is
// the trace); beyond it, refused with its line. An end line that does not
// count the lines held is said (a trace of 34 calls held 1,020,000 lines).
TEST_F(Faults, ReportPutsCallsInOrderOrRefusesWhatItCannot) {
  const std::string trace = temp_path("order.jsonl"), edited = temp_path("order-edited.jsonl");
  ASSERT_EQ(run(tracer() + " --json -o " + trace + " --layer runtime -- " FAKE_APP " async").status, 0);
  std::vector<std::string> calls_of_trace, others;  // the call lines, and the warnings and the end line
  for (const std::string& line : lines_of(read_file(trace)))
    (json::parse(line)["type"] == "call" ? calls_of_trace : others).push_back(line);
  ASSERT_GT(calls_of_trace.size(), 20u);
  const auto write_trace = [&](const std::vector<std::string>& calls_written) {
    std::ofstream out(edited);
    for (const std::string& l : calls_written) out << l << "\n";
    for (const std::string& l : others) out << l << "\n";
  };
  const std::vector<std::string> reversed(calls_of_trace.rbegin(), calls_of_trace.rend());
  write_trace(reversed);
  for (const std::string options : {"", "--summary --insights ", "--json "}) {
    const Result original = run(reporter() + " " + options + trace), turned = run(reporter() + " " + options + edited);
    EXPECT_EQ(original.status, 0) << original.err;
    EXPECT_EQ(turned.status, 0) << turned.err;
    EXPECT_EQ(turned.out, original.out) << options;
    EXPECT_EQ(turned.err, original.err) << options;
  }
  // The first half moved 10 s later and 2 s apart (longer than the window:
  // reported as it is read), then the second half, 10 s before it.
  std::vector<std::string> shifted = calls_of_trace;
  for (std::size_t i = 0; i < shifted.size() / 2; ++i) {
    json call = json::parse(shifted[i]);
    call["ts_ns"] = call["ts_ns"].get<std::uint64_t>() + (10 + 2 * i) * 1000000000ull;
    shifted[i] = call.dump();
  }
  write_trace(shifted);
  // (What was reported before it stays: a report is written as the trace is read.)
  const Result refused = run(reporter() + " " + edited);
  EXPECT_EQ(refused.status, 7);
  EXPECT_EQ(refused.err.rfind("cudatrace: " + edited + ":" + std::to_string(shifted.size() / 2 + 1) +
                                  ": out of order: this call returned ",
                              0),
            0u) << refused.err;
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
  // Every call three times.
  std::vector<std::string> tripled;
  for (int i = 0; i < 3; ++i) tripled.insert(tripled.end(), calls_of_trace.begin(), calls_of_trace.end());
  write_trace(tripled);
  const Result counted = run(reporter() + " --summary " + edited);
  EXPECT_EQ(counted.status, 0) << counted.err;
  const std::string n = std::to_string(calls_of_trace.size()), n3 = std::to_string(3 * calls_of_trace.size());
  EXPECT_NE(counted.err.find("cudatrace: warning: " + edited + ": its end line counts " + n +
                             " calls and 0 unfinished, but it holds " + n3 +
                             " and 0: lines were added or removed since cudatrace wrote it"),
            std::string::npos) << counted.err;
  std::remove(trace.c_str());
  std::remove(edited.c_str());
}

// ---- 6. Hostile data -------------------------------------------------------------

TEST_F(Faults, HostileArgumentsKeepJsonValidAndTextOneLinePerCall) {
  // --every-layer: the launch's runtime record (libhostile_cuda.so makes no driver call).
  const std::string all = " --every-layer -f mem,xfer,launch,stream,event,device,module -- " HOSTILE_APP;
  const Result r = run(tracer() + " --json" + all);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto c = records(parse_lines(r.out), "call");
  ASSERT_EQ(c.size(), 12u) << r.out;
  const std::string comm = "h\"\\\n\xef\xbf\xbd(\x7f";  // \xc3( is not UTF-8
  for (const json& j : c) {
    EXPECT_EQ(j["comm"], comm);
    EXPECT_EQ(j["ret"], 0);
  }
  constexpr std::uint64_t kMax = UINT64_MAX;
  EXPECT_TRUE(c[0]["args"]["devPtr"].is_null());  // NULL
  EXPECT_TRUE(c[1]["args"]["devPtr"].is_null());  // (void **)1
  EXPECT_TRUE(c[2]["args"]["devPtr"].is_null());  // unmapped page
  EXPECT_EQ(c[3]["args"]["devPtr"], "0x1234");    // readable, left as it was
  EXPECT_EQ(c[3]["args"]["size"].get<std::uint64_t>(), kMax);
  EXPECT_TRUE(c[4]["args"]["devPtr"].is_null());
  EXPECT_TRUE(c[4]["args"]["pitch"].is_null());
  EXPECT_EQ(c[4]["args"]["height"].get<std::uint64_t>(), kMax);
  EXPECT_TRUE(c[5]["args"]["ms"].is_null());  // NaN has no JSON form
  EXPECT_TRUE(c[6]["args"]["ms"].is_null());
  EXPECT_EQ(c[7]["args"]["kind"], 12345);
  EXPECT_EQ(c[7]["args"]["count"].get<std::uint64_t>(), kMax);
  EXPECT_EQ(c[8]["args"]["grid"], json({4294967295u, 4294967295u, 4294967295u}));
  EXPECT_EQ(c[8]["args"]["stream"], "0xffffffffffffffff");
  EXPECT_EQ(c[8]["kernel"], "?");
  EXPECT_TRUE(c[9]["args"]["name"].is_null());
  EXPECT_EQ(c[10]["args"]["name"], "q\"b\\\n\t\x01\xef\xbf\xbd\xef\xbf\xbd end");
  const std::string long_name = c[11]["args"]["name"];
  EXPECT_GE(long_name.size(), 1000u);
  EXPECT_EQ(long_name.find_first_not_of('k'), std::string::npos);

  const Result text = run(tracer() + all);
  ASSERT_EQ(text.status, 0) << text.err;
  std::stringstream lines(text.out);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    if (n++ == 0) continue;  // header
    EXPECT_EQ(line.find_first_of(std::string("\r\0", 2)), std::string::npos) << line;
    // Its time since the start first (beyond 1 s on a slow machine).
    EXPECT_TRUE(std::regex_search(line, std::regex("^[0-9]+\\.[0-9]{6} "))) << "not a call line: " << line;
    EXPECT_NE(line.find(R"(h"\x5c\x0a\xc3(\x7f)"), std::string::npos) << line;
  }
  EXPECT_EQ(n, 1 + 12) << text.out;
}

TEST_F(Faults, CommWithNewlineAndInvalidUtf8OnEveryThread) {
  const Result r = run(tracer() + " --json -f device,query -- " FAULT_APP " hostile-comm 3");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto c = records(parse_lines(r.out), "call");
  ASSERT_EQ(c.size(), 6u) << r.out;
  std::set<long> tids;
  for (const json& j : c) {
    EXPECT_EQ(j["comm"], "q\"b\\\n\t\xef\xbf\xbd\xef\xbf\xbd\x01");
    tids.insert(j["tid"].get<long>());
  }
  EXPECT_EQ(tids.size(), 2u);
  const Result text = run(tracer() + " -f device,query -- " FAULT_APP " hostile-comm 3");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_EQ(std::count(text.out.begin(), text.out.end(), '\n'), 1 + 6) << text.out;
}

// Names from the traced system reach stderr escaped as the trace's text
// does: a program whose name (its comm) and a library whose directory hold
// ESC sequences, BEL, CR, BS, a newline, 0x9b and DEL, traced with -v. On
// stderr nothing but printable ASCII, newlines and cudatrace's own "≈".
TEST_F(Faults, NamesFromTheTracedSystemAreEscapedOnStderr) {
  const std::string hostile = "e\x1b[2J\a\r\b\n\x9b\x7f";  // (/proc/PID/maps writes a newline in a path as \012)
  const std::string hostile_dir = "d\x1b]0;t\a\r\b\x9b\x7f";
  const std::string dir = temp_path("names");
  const fs::path runtime(FAKE_CUDART_LIB);
  fs::create_directories(dir + "/" + hostile_dir);
  fs::create_directory_symlink(runtime.parent_path().parent_path() / "fakecuda", dir + "/fakecuda");
  const std::string lib = dir + "/" + hostile_dir + "/" + runtime.filename().string();
  fs::copy_file(runtime, lib);
  const std::string program = dir + "/" + hostile;  // exec'd under this name: its comm
  ASSERT_EQ(symlink(DLOPEN_APP, program.c_str()), 0);
  Tracer t({"-v", "-f", "device,query", "--layer", "runtime", "--", program, "late", "0", "3", lib});
  t.proc.go();
  EXPECT_EQ(wait_or_fail(t.proc, 20s, "cudatrace"), 0) << read_file(t.err);
  const std::string err = read_file(t.err);
  EXPECT_NE(err.find(R"(/d\x1b]0;t\x07\x0d\x08\x9b\x7f/)" + runtime.filename().string() + ": "), std::string::npos)
      << err;  // -v's path
  EXPECT_NE(err.find(R"(CPU time to e\x1b[2J\x07\x0d\x08\x0a\x9b\x7f (PID )"), std::string::npos) << err;  // the comm
  std::string rest = err;
  for (auto at = rest.find("\u2248"); at != std::string::npos; at = rest.find("\u2248")) rest.erase(at, 3);
  for (const char c : rest) {
    const auto u = static_cast<unsigned char>(c);
    EXPECT_TRUE(c == '\n' || (u >= 0x20 && u < 0x7f)) << "raw byte " << int(u) << " on stderr:\n" << err;
  }
  EXPECT_NE(err.find("cudatrace: 3 calls traced"), std::string::npos) << err;
  fs::remove_all(dir);
}

// ---- 8. Security -------------------------------------------------------------------

TEST_F(Faults, OutputSymlinkInAWorldWritableDirectoryIsRefused) {
  const std::string dir = temp_path("sticky"), victim = temp_path("victim");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(dir.c_str(), 01777), 0);
  std::ofstream(victim) << "precious\n";
  const std::string link = dir + "/trace.json";
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  const std::string traced = " --json -f device,query -- " FAKE_APP " loop 2";

  expect_one_clear_error(run(tracer() + " -o " + link + traced), 6,
                         "refusing to write " + link + ": it is a symbolic link in the world-writable directory", "");
  EXPECT_EQ(read_file(victim), "precious\n");

  EXPECT_EQ(run(tracer() + " --output-follow-symlinks -o " + link + traced).status, 0);
  EXPECT_EQ(records(parse_lines(read_file(victim)), "call").size(), 2u);

  // Elsewhere a symbolic link is followed as usual.
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  std::ofstream(victim) << "precious\n";
  EXPECT_EQ(run(tracer() + " -o " + link + traced).status, 0);
  EXPECT_EQ(records(parse_lines(read_file(victim)), "call").size(), 2u);
  std::remove(link.c_str());
  std::remove(victim.c_str());
  rmdir(dir.c_str());
}

// --perfetto is opened as -o is, live and in `report`.
TEST_F(Faults, TimelineSymlinkInAWorldWritableDirectoryIsRefused) {
  const std::string dir = temp_path("sticky-timeline"), victim = temp_path("timeline-victim");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(dir.c_str(), 01777), 0);
  std::ofstream(victim) << "precious\n";
  const std::string link = dir + "/ct_trap.json", trace = temp_path("timeline-trace.jsonl");
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  const std::string traced = " -f device,query -- " FAKE_APP " loop 2";
  ASSERT_EQ(run(tracer() + " --json -o " + trace + traced).status, 0);
  const std::string refused = "refusing to write " + link + ": it is a symbolic link in the world-writable directory";
  expect_one_clear_error(run(tracer() + " -o /dev/null --perfetto " + link + traced), 6, refused, "live");
  expect_one_clear_error(run(reporter() + " --perfetto " + link + " " + trace + " >/dev/null"), 6, refused,
                         "report");
  EXPECT_EQ(read_file(victim), "precious\n");
  EXPECT_EQ(run(tracer() + " --output-follow-symlinks -o /dev/null --perfetto " + link + traced).status, 0);
  EXPECT_NE(read_file(victim).find("traceEvents"), std::string::npos);
  std::ofstream(victim) << "precious\n";
  EXPECT_EQ(run(reporter() + " --output-follow-symlinks --perfetto " + link + " " + trace + " >/dev/null").status, 0);
  EXPECT_NE(read_file(victim).find("traceEvents"), std::string::npos);
  for (const std::string& f : {link, victim, trace}) std::remove(f.c_str());
  rmdir(dir.c_str());
}

mode_t file_mode(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

TEST_F(Faults, OutputIsPrivateWhenRootTracesAnotherUsersProcess) {
  if (run("setpriv --reuid=65534 --regid=65534 --clear-groups " FAULT_APP " wait-then-calls 0 </dev/null").status != 0)
    GTEST_SKIP() << "cannot run the fixture as nobody";
  const mode_t old_umask = umask(022);
  const std::string fresh = temp_path("private-new"), existing = temp_path("private-old"),
                    own = temp_path("own-process");
  std::ofstream(existing) << "old\n";
  chmod(existing.c_str(), 0644);
  const std::string timeline = temp_path("private-timeline.json"), report_timeline = temp_path("report-timeline.json");
  for (const std::string& out : {fresh, existing}) {
    Child app = Child::start({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", FAULT_APP,
                              "wait-then-calls", "2"});
    ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
    Tracer t({"--json", "-f", "mem,xfer,launch,stream,event,device,query", "--perfetto", timeline, "-p",
              std::to_string(app.pid)},
             out);
    ASSERT_TRUE(t.attached()) << read_file(t.err);
    EXPECT_EQ(file_mode(out), 0600u) << out;
    EXPECT_EQ(file_mode(timeline), 0600u);
    app.go();
    EXPECT_EQ(app.wait(), 0);
    EXPECT_EQ(t.proc.wait(), 0);
    EXPECT_EQ(file_mode(out), 0600u) << out;
    EXPECT_EQ(records(parse_lines(read_file(out)), "call", "cudaGetDevice").size(), 2u) << out;
    // The timeline `report` makes of that trace is no easier to read than the trace.
    std::remove(report_timeline.c_str());
    EXPECT_EQ(run(reporter() + " --perfetto " + report_timeline + " " + out + " >/dev/null").status, 0);
    EXPECT_EQ(file_mode(report_timeline), 0600u);
  }
  // Root's own process: an ordinary file.
  Child app = Child::start({FAULT_APP, "wait-then-calls", "0"});
  ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
  Tracer t({"-f", "mem,xfer,launch,stream,event,device,query", "-p", std::to_string(app.pid)}, own);
  ASSERT_TRUE(t.attached()) << read_file(t.err);
  EXPECT_EQ(file_mode(own), 0644u);
  app.go();
  EXPECT_EQ(app.wait(), 0);
  EXPECT_EQ(t.proc.wait(), 0);
  umask(old_umask);
  for (const std::string& f : {fresh, existing, own, timeline, report_timeline}) std::remove(f.c_str());
}

// cudatrace runs only the command it is given: it has no way to run
// anything else (no shell, no popen, no dlopen of a target's files).
TEST_F(Faults, TracerImportsNoWayToRunOtherPrograms) {
  const Result r = run("nm -D --undefined-only " CUDATRACE_BIN);
  ASSERT_EQ(r.status, 0) << r.err;
  std::set<std::string> imported;
  std::stringstream ss(r.out);
  std::string kind, name;
  while (ss >> kind >> name) imported.insert(name.substr(0, name.find('@')));
  ASSERT_TRUE(imported.count("execv")) << r.out;  // the test sees imports: command mode uses execv
  for (const char* f : {"system", "popen", "execve", "execvp", "execvpe", "execl", "execlp", "execle", "fexecve",
                        "posix_spawn", "posix_spawnp", "dlopen", "dlmopen"})
    EXPECT_FALSE(imported.count(f)) << f;
}

// The machine's keeper of perf-event uprobes (uprobe_keeper.h) can be alive
// and deaf: one killed stays in its exit for minutes, destroying its events
// one grace period at a time, with its socket still open. A socket nobody
// reads stands in for it. cudatrace says so, keeps a keeper of its own, and
// traces as if nothing were wrong: it once waited for an answer forever.
TEST_F(Faults, AKeeperOfPerfEventsThatDoesNotAnswerHoldsNothingUp) {
  if (const char* mode = std::getenv("CUDATRACE_TEST_ATTACH"); mode && *mode)
    GTEST_SKIP() << "runs --attach perf itself: once is enough";
  const Result multi = run(tracer() + " --attach multi -f query -- /bin/true");
  if (multi.err.find("has no uprobe_multi links") != std::string::npos)
    GTEST_SKIP() << "before Linux 6.6 every earlier test leaves perf events, whose destroys make this one slow";
  // In a directory of its own (CUDATRACE_RUN_DIR), not the machine's
  // /run/cudatrace, whose keeper may be busy for minutes after earlier runs.
  std::string run_dir = temp_path("run-XXXXXX");
  ASSERT_NE(mkdtemp(run_dir.data()), nullptr);
  const std::string socket_path = run_dir + "/uprobes-1.sock";
  const int deaf = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(bind(deaf, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  ASSERT_EQ(listen(deaf, 64), 0);
  const auto start = std::chrono::steady_clock::now();
  const Result r = run("CUDATRACE_RUN_DIR=" + run_dir + " timeout 120 " CUDATRACE_BIN " --attach perf" +
                       std::string(kWithQuery) + " --json --layer runtime -- " FAKE_APP " threads 2 5");
  const auto took = std::chrono::steady_clock::now() - start;
  close(deaf);
  fs::remove_all(run_dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("keeper (ct-uprobes, " + socket_path + ") did not answer in 2 s; this run starts its own"),
            std::string::npos)
      << r.err;
  // Asked once: the measurement's probes and the trace's both go to the run's own keeper.
  EXPECT_EQ(r.err.find("did not answer"), r.err.rfind("did not answer")) << r.err;
  std::map<std::string, int> calls;
  for (const json& c : records(parse_lines(r.out), "call")) ++calls[c["api"].get<std::string>()];
  EXPECT_EQ(calls["cudaMalloc"], 10) << r.out.substr(0, 2000);
  // Never for ever; seconds, unless the machine's keeper is destroying (event_mutex).
  EXPECT_LT(took, 100s) << "waited for the deaf keeper";
}

// Issue 25: SIGKILL of cudatrace while the program loads a library it never
// mapped before every 3, 20 or 200 ms, in both modes and both link kinds.
// The dying tracer's probes stay for seconds while the kernel closes its
// links: a load then must not stop the program (ct_map_change sees
// tracer_dying and undoes its stop), and a stop made just before the kill is
// continued by the watchdog within a second (once the tracer's last thread
// begins to exit, issue 47). After that,
// the program must never be stopped and must keep loading. Every wait is
// bounded. CUDATRACE_SIGKILL_RUNS (default 1) runs each case that many times
// (docs/reliability.md: 50 each).
TEST_F(Faults, SigkillWhileLibrariesLoadNeverLeavesTheProgramStopped) {
  if (const char* mode = std::getenv("CUDATRACE_TEST_ATTACH"); mode && *mode)
    GTEST_SKIP() << "runs both link kinds itself: once is enough";
  const char* runs_env = std::getenv("CUDATRACE_SIGKILL_RUNS");
  const int runs = runs_env ? std::max(1, std::atoi(runs_env)) : 1;
  std::vector<std::string> attaches = {"perf"};
  // uprobe_multi links came in Linux 6.6: before, --attach multi is refused with its line.
  const Result multi = run(tracer() + " --attach multi -f query -- /bin/true");
  if (multi.err.find("has no uprobe_multi links") == std::string::npos)
    attaches.insert(attaches.begin(), "multi");
  else
    EXPECT_EQ(multi.status, 5) << multi.err;
  int case_no = 0;
  for (const int ms : {3, 20, 200})
    for (const bool command : {false, true})
      for (const std::string& attach : attaches)
        for (int run = 0; run < runs; ++run, ++case_no) {
          SCOPED_TRACE("every " + std::to_string(ms) + " ms, " + (command ? "command" : "-p") + ", --attach " +
                       attach + ", run " + std::to_string(run));
          const std::string dir = temp_path("fresh");
          fs::create_directories(dir);
          fs::create_directory_symlink(fs::path(FAKE_CUDART_LIB).parent_path().parent_path() / "fakecuda",
                                       dir + "/fakecuda");
          const std::vector<std::string> app_args = {DLOPEN_APP, "fresh", std::to_string(ms), FAKE_CUDART_LIB, dir};
          const auto number = [&dir](const char* name) {
            return std::atol(read_file(dir + "/" + name).c_str());
          };
          // Few probes a copy: with perf-event uprobes each costs an event.
          std::vector<std::string> args = {"--json", "-f", "query", "--layer", "runtime", "--attach", attach};
          Child app = command ? Child() : Child::start(app_args);
          const auto go = [&dir] { std::ofstream(dir + "/go").put('\n'); };
          if (command) {
            go();
            args.push_back("--");
            args.insert(args.end(), app_args.begin(), app_args.end());
          } else {
            ASSERT_TRUE(wait_until([&] { return number("pid") > 0; })) << "the program does not start";
            args.insert(args.end(), {"-p", std::to_string(app.pid)});
          }
          // -p: kill cudatrace alone, with its children (kill -9 $C $(pgrep -P $C)), or its whole
          // process group, as an operator or a container runtime does (issue 38).
          const int kill_how = command ? 0 : case_no % 3;
          Tracer t(args, temp_path("trace"), kill_how == 2);
          if (!command) {
            // No runtime loaded yet. Perf-event uprobes are made one by one under the kernel's
            // event_mutex, each destroy there taking a grace period (uprobe_keeper.h): allowed longer.
            const auto from = std::chrono::steady_clock::now();
            ASSERT_TRUE(t.waiting(attach == "perf" ? 30s : 10s))
                << "after " << std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count()
                << " s; " << where_they_wait(t.proc.pid);
            go();
          }
          ASSERT_TRUE(wait_until([&] { return number("loads") > 0 && read_file(t.out).find("cudaGetDevice") !=
                                                                         std::string::npos; },
                                 20s))
              << read_file(t.err);
          const pid_t pid = static_cast<pid_t>(number("pid"));
          // A kill at a different point of the load cycle in each case.
          std::this_thread::sleep_for(std::chrono::milliseconds(50 + (case_no * 37) % 400));
          SCOPED_TRACE(kill_how == 0 ? "cudatrace killed" : kill_how == 1 ? "with its children" : "its group");
          const std::vector<pid_t> children = kill_how == 1 ? children_of(t.proc.pid) : std::vector<pid_t>{};
          const auto killed = std::chrono::steady_clock::now();
          ASSERT_EQ(kill(kill_how == 2 ? -t.proc.pid : t.proc.pid, SIGKILL), 0);
          for (const pid_t child : children) kill(child, SIGKILL);
          // A stop at the kill is undone within a second (issue 47), not once the links are closed.
          while (process_state(pid) == 'T' && std::chrono::steady_clock::now() - killed < 60s)
            std::this_thread::sleep_for(1ms);
          const std::chrono::duration<double> stopped = std::chrono::steady_clock::now() - killed;
          EXPECT_LT(stopped.count(), 1.0) << "stopped for " << stopped.count() << " s after the kill";
          EXPECT_EQ(t.proc.wait(60s), 128 + SIGKILL) << "cudatrace did not exit";
          // The watchdog continues what was stopped once cudatrace has gone.
          const long loads = number("loads");
          EXPECT_TRUE(wait_until([&] { return number("loads") > loads + 1 || number("loads") >= 5000; }, 10s))
              << "the program stopped loading: state " << process_state(pid);
          EXPECT_NE(process_state(pid), 'T');
          kill(pid, SIGKILL);
          if (!command) app.wait(5s);
          fs::remove_all(dir);
        }
}

}  // namespace
