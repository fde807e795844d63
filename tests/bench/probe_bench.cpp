// Attaches the reference programs of probe_bench.bpf.c (empty "floor" pairs,
// empty uprobe sessions that keep ("floor-session") or skip
// ("floor-session-entry") every return, "floor-entry" entry probes alone
// (no return probe, any kernel), "floor-perf" pairs attached as
// perf-event uprobes (--attach perf), or "naive" two-records-per-call) to
// the CUDA symbols of the given files, the way cudatrace attaches its own,
// runs a command and reports what the programs saw. Used by scripts/bench.py only.
//   probe_bench MODE --lib FILE [--lib FILE...] -- COMMAND [ARGS...]
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cudatrace/record/probes.h"
#include "probe_bench.skel.h"

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "probe_bench: %s\n", msg.c_str());
  return 1;
}

int count_record(void* ctx, void*, std::size_t) {
  ++*static_cast<std::uint64_t*>(ctx);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return fail("usage: probe_bench MODE --lib FILE... -- COMMAND [ARGS...]");
  const std::string mode = argv[1];
  const bool session = mode == "floor-session" || mode == "floor-session-entry";
  const bool perf = mode == "floor-perf";
  const bool entry_only = mode == "floor-entry";
  if (mode != "floor" && mode != "naive" && !session && !perf && !entry_only)
    return fail("mode must be floor, floor-entry, floor-perf, floor-session, floor-session-entry or naive");
  std::vector<std::string> libs;
  int i = 2;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    if (std::strcmp(argv[i], "--lib") != 0 || i + 1 >= argc) return fail("expected --lib FILE or --");
    libs.push_back(argv[++i]);
  }
  if (i + 1 >= argc) return fail("no command after --");
  char** command = argv + i + 1;

  probe_bench_bpf* skel = probe_bench_bpf__open();
  if (!skel) return fail("cannot open the BPF object");
  for (bpf_program* p : {skel->progs.floor_enter, skel->progs.floor_exit, skel->progs.naive_enter,
                         skel->progs.naive_exit})
    cudatrace::Probes::prepare(p, perf ? cudatrace::AttachMode::PerfPair : cudatrace::AttachMode::MultiPair);
  bpf_program* session_prog = mode == "floor-session" ? skel->progs.floor_session : skel->progs.floor_session_entry;
  if (session) {
    if (cudatrace::Probes::detect_mode() != cudatrace::AttachMode::MultiSession)
      return fail("this kernel has no uprobe sessions (Linux 6.13)");
    cudatrace::Probes::prepare_session(session_prog);
  } else {
    bpf_program__set_autoload(skel->progs.floor_session, false);
    bpf_program__set_autoload(skel->progs.floor_session_entry, false);
  }
  if (probe_bench_bpf__load(skel)) return fail("cannot load the BPF programs");

  const bool naive = mode == "naive";
  cudatrace::Selection all;
  for (bool& g : all.group) g = true;
  const auto attach_start = std::chrono::steady_clock::now();
  auto probes = std::make_unique<cudatrace::Probes>(
      naive ? skel->progs.naive_enter : skel->progs.floor_enter,
      naive ? skel->progs.naive_exit : entry_only ? nullptr : skel->progs.floor_exit, nullptr, all,
      [](const std::string& w) { std::fprintf(stderr, "probe_bench: warning: %s\n", w.c_str()); });
  if (session) probes->use_session(session_prog);
  if (perf) probes->use_perf_events();
  for (const std::string& lib : libs) {
    cudatrace::Probes::FileResult r;
    std::string error;
    if (!probes->attach_file(lib, -1, r, error)) return fail(error);
  }
  const double attach_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - attach_start).count();

  std::uint64_t records = 0;
  std::atomic<bool> done{false};
  ring_buffer* rb = ring_buffer__new(bpf_map__fd(skel->maps.naive_events), count_record, &records, nullptr);
  if (!rb) return fail("cannot open the ring buffer");
  std::thread reader([&] {
    while (!done) ring_buffer__poll(rb, 100);
    ring_buffer__consume(rb);
  });

  const pid_t child = fork();
  if (child == 0) {
    execvp(command[0], command);
    std::fprintf(stderr, "probe_bench: cannot run %s: %s\n", command[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  done = true;
  reader.join();

  const __u32 zero = 0;
  __u64 lost = 0;
  bpf_map_lookup_elem(bpf_map__fd(skel->maps.naive_lost), &zero, &lost);
  std::fprintf(stderr, "probe_bench: mode=%s probes=%zu attach_ms=%.1f records=%llu lost=%llu\n", mode.c_str(),
               probes->probe_count(), attach_ms, (unsigned long long)records, (unsigned long long)lost);
  probes.reset();
  ring_buffer__free(rb);
  probe_bench_bpf__destroy(skel);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
