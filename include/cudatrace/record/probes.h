// Attaches the generic entry/return programs to every selected API that a
// file defines, with the API's cookie. Each file's ELF is parsed once. Where
// the kernel has them (6.6), one uprobe_multi link per file and direction
// carries all its probes, so attaching and detaching cost one kernel round
// trip each, not one per probe; elsewhere (5.15) each probe is a perf-event
// uprobe with its own link, its event kept by an UprobeKeeper process
// (uprobe_keeper.h). Links are owned here and detached on destruction:
// closing one is cheap in every mode.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/decode/selection.h"
#include "cudatrace/target/prologue.h"
#include "cudatrace/record/uprobe_keeper.h"

struct bpf_program;

namespace cudatrace {

// How a call's entry and return are probed; chosen once, when the BPF object loads.
enum class AttachMode : std::uint8_t {
  MultiPair,     // uprobe_multi links (Linux 6.6): ct_enter on entry, ct_exit on return
  MultiSession,  // one uprobe_multi session link (Linux 6.13): ct_session on both;
                 // an entry may leave its return unprobed (one trap instead of two)
  PerfPair,      // one perf-event uprobe per function and direction (Linux 5.15; --attach perf)
};

// What one probe of a file is: the function's API, where it is placed and how.
struct PlannedProbe {
  const Api* api = nullptr;
  std::uint64_t entry = 0;  // the function's file offset
  ProbePlace place;         // the probe is at entry + place.offset
  bool attached = false;    // false: left out (not selected)
};

// One line: "libcuda.so.1: 120 probes, 118 on instructions the kernel
// emulates, 2 single-stepped (cuFoo +0 sub $imm,%rsp, ...)".
std::string probe_summary(const std::string& path, const std::vector<PlannedProbe>& planned);

class Probes {
 public:
  using Warn = std::function<void(const std::string&)>;
  // `warn`: what a user can act on; `note` (-v): what only explains, such as
  // the APIs a CUDA library of another version does not export. No note: not said.
  Probes(bpf_program* enter, bpf_program* exit, bpf_program* map_change, Selection selection, Warn warn,
         Warn note = nullptr);
  ~Probes();

  // A driver function left unprobed until code other than a CUDA runtime
  // may call it (defer_driver).
  struct Deferred {
    const Api* api = nullptr;
    std::uint64_t entry = 0;   // file offset of the function
    std::uint64_t probe = 0;   // file offset of its probe
    std::uint64_t cookie = 0;
  };
  struct FileResult {
    int apis = 0;   // APIs attached in this file (0: none of ours)
    bool runtime = false, driver = false;
    std::vector<Deferred> deferred;  // defer_driver: the driver functions left out
    bool runtime_library = false;    // a runtime library (libcudart.so): all its code is the runtime's
    std::vector<const Api*> imports;  // driver functions it imports (defer_driver)
  };
  // Attaches to `path` (openable from here). pid -1: every process mapping
  // it; else only that process. A file already handled for `pid` returns
  // the earlier result. On error returns false and sets `error`.
  bool attach_file(const std::string& path, pid_t pid, FileResult& result, std::string& error);
  // Called between the steps of probing a file (reading its symbols, each
  // perf event) and before each file: the call records ring is read
  // meanwhile. Probing a process's new files takes long (a PyTorch process
  // maps dozens at once; perf-event probes take seconds) while the other
  // processes' calls fill the ring.
  void read_while_attaching(std::function<void()> read) { read_meanwhile_ = std::move(read); }
  // Driver functions probed on demand (bpf_abi.h, ct_driver_fn_key): from
  // now on attach_file leaves each driver function selected out (listed in
  // FileResult::deferred), lists the driver functions a file imports, and
  // probes the driver's and the runtimes' lookups of them with
  // `lookup_enter`/`lookup_exit`; attach_lookups probes dlsym and dlvsym.
  void defer_driver(bpf_program* lookup_enter, bpf_program* lookup_exit) {
    lookup_enter_ = lookup_enter;
    lookup_exit_ = lookup_exit;
  }
  bool defers_driver() const { return lookup_enter_ != nullptr; }
  // Probes deferred functions of `path` (those already probed are skipped).
  bool attach_deferred(const std::string& path, pid_t pid, const std::vector<Deferred>& functions,
                       std::string& error);
  // dlsym and dlvsym, where `path` defines them (the C library). False with
  // an empty `error` where it does not.
  bool attach_lookups(const std::string& path, pid_t pid, std::string& error);
  // The probes attach_file would attach to `path` (it must be openable), in
  // file order; for --list-apis --lib and -v.
  bool plan_file(const std::string& path, std::vector<PlannedProbe>& out, std::string& error);
  // Attaches the map-change program to the dynamic loader's _dl_debug_state.
  bool attach_loader(const std::string& path, pid_t pid, std::string& error);
  // Attaches the entry program (and the return program if `with_return`) to
  // the function at file `offset` of `path` with `cookie`: for measuring
  // what a probe hit costs (cost.h).
  bool attach_function(const std::string& path, pid_t pid, std::uint64_t offset, std::uint64_t cookie,
                       bool with_return, std::string& error);

  std::size_t probe_count() const { return probes_.load(); }

  // --max-overhead (budget.h): from now on the hot APIs (is_hot_api) of
  // each file get links of their own, which set_hot_attached detaches and
  // attaches again; the others' links stay. A file attached while the hot
  // links are detached gets its hot links at the next attach. uprobe_multi
  // links only (HotGroup).
  // The hot links wait for the budget's first look: attached through the
  // start-up (symbols, static runtimes: seconds with PyTorch), they would
  // cost their full price before the budget runs.
  void split_hot() {
    split_hot_ = true;
    hot_attached_ = false;
  }
  bool hot_attached() const { return hot_attached_; }
  // A file that can no longer be attached (gone) is dropped, with a warning.
  // Returns the CPU time the switch took in the kernel, in ns.
  std::uint64_t set_hot_attached(bool attached);
  // Each hot API's share of the time its probes were in (a mean over the
  // files that have it): from the end of each attach to the start of each
  // detach (when the breakpoints go), over the time since its file was
  // attached first. By API id.
  std::map<std::uint16_t, double> hot_shares(std::uint64_t now_ns) const;
  // Must be called on the programs before the BPF object is loaded.
  static void prepare(bpf_program* prog, AttachMode mode = AttachMode::MultiPair);
  // Attaches `prog` (prepared with prepare) alone at `offset` of `path`,
  // once: true too when it already is.
  bool attach_program(bpf_program* prog, const std::string& path, pid_t pid, std::uint64_t offset,
                      std::string& error);
  static void prepare_session(bpf_program* prog);
  // MultiSession when this kernel accepts a uprobe session link (found by
  // trying one on a scratch file), else MultiPair.
  static AttachMode detect_mode();
  // From now on attach perf-event uprobes (kernels without uprobe_multi).
  // They fire in every process, whatever pid attach_* is given: the BPF
  // programs must filter (uprobe_keeper.h says why).
  void use_perf_events() { mode_ = AttachMode::PerfPair; }
  // False: uprobe_multi links are not limited to a pid given to attach_*
  // (kernels whose filter selects one thread), the BPF programs filter.
  void limit_multi_to_pid(bool limit) { multi_pid_filter_ = limit; }
  // From now on attach `session` (prepared with prepare_session) instead of
  // the entry/return pair.
  void use_session(bpf_program* session) {
    session_ = session;
    mode_ = AttachMode::MultiSession;
  }
  AttachMode mode() const { return mode_; }

 private:
  // What one attach made: closing `entry` before `ret` leaves no call
  // entered that could not be seen returning.
  struct Links {
    std::vector<int> entry, ret;  // entry: also session and loader links
    std::vector<UprobeKey> events;  // PerfPair: the keeper's events under them
    std::size_t probes = 0;
  };
  struct FileSymbols {
    struct Function {
      const Api* api;
      std::uint64_t offset;  // file offset of its entry
      ProbePlace place;
    };
    std::vector<Function> functions;
    std::vector<const Api*> imports;  // driver functions it imports
  };
  // The cookie of one probe of `f`, with its placement bit; false if it is
  // left out.
  bool planned_cookie(const FileSymbols::Function& f, std::uint64_t& cookie) const;
  const FileSymbols* symbols_of(const std::string& path, std::string& error, std::tuple<dev_t, ino_t>& key);
  enum class MultiLink : std::uint8_t { Entry, Return, Session };
  bool attach_multi(bpf_program* prog, const std::string& path, pid_t pid, const std::vector<std::uint64_t>& offsets,
                    const std::vector<std::uint64_t>& cookies, MultiLink kind, Links& into, std::string& error);
  // Entry or return probes, each a perf-event uprobe with its own link.
  bool attach_perf(bpf_program* prog, const std::string& path, const std::tuple<dev_t, ino_t>& file,
                   const std::vector<std::uint64_t>& offsets, const std::vector<std::uint64_t>& cookies, bool retprobe,
                   Links& into, std::string& error);
  // `entry` on every offset, and `ret` (unless null) on their returns,
  // attached first: a call entered between the two attaches then has neither
  // half, rather than an entry whose return never comes. The links go to `into`.
  bool attach_pairs(bpf_program* entry, bpf_program* ret, const std::string& path,
                    const std::tuple<dev_t, ino_t>& file, pid_t pid, const std::vector<std::uint64_t>& offsets,
                    const std::vector<std::uint64_t>& cookies, Links& into, std::string& error);
  // The generic programs on calls at `offsets`: one session link where the
  // kernel has sessions, else entry and return (attach_pairs).
  bool attach_calls(const std::string& path, const std::tuple<dev_t, ino_t>& file, pid_t pid,
                    const std::vector<std::uint64_t>& offsets, const std::vector<std::uint64_t>& cookies,
                    Links& into, std::string& error);
  void detach(Links& links);
  // A file's hot probes, attached and detached as a group. The file is held
  // open: re-attaching goes through /proc/self/fd even after every process
  // that mapped it (through its /proc/PID/root path) has gone. uprobe_multi
  // links only: cudatrace refuses --max-overhead with perf-event uprobes,
  // whose detached events would still trap (uprobe_keeper.h), and
  // set_hot_attached attaches from several threads at once.
  struct HotGroup {
    std::tuple<dev_t, ino_t, pid_t> key;  // as in file_links_
    int file_fd = -1;
    std::string name;  // for warnings
    std::vector<std::uint64_t> offsets, cookies;
    std::vector<const Api*> apis;
    Links links;  // empty while detached
    std::uint64_t since_ns = 0;        // CLOCK_MONOTONIC, first attach
    std::uint64_t attached_at_ns = 0;  // end of the last attach; 0 while detached
    std::uint64_t attached_ns = 0;     // attached before that
  };
  bool attach_hot(HotGroup& g, std::string& error);
  void detach_hot(HotGroup& g);
  // In parallel (probes.cpp says why).
  static void close_all(const std::vector<int>& fds);

  // Whether defer_driver leaves this API's driver function unprobed at first.
  static bool deferrable(const Api& a);
  // `path`'s file with `pid`: the key of the files attached once (loaders, lookups).
  static bool file_key(const std::string& path, pid_t pid, std::tuple<dev_t, ino_t, pid_t>& key,
                       std::string& error);
  // The lookup probes of a file (defer_driver): offsets and their ct_lookup_kind.
  bool attach_lookup_probes(const std::string& path, pid_t pid, const std::vector<std::uint64_t>& offsets,
                            const std::vector<std::uint64_t>& kinds, Links& links, std::string& error);

  bpf_program *enter_, *exit_, *map_change_, *session_ = nullptr;
  bpf_program *lookup_enter_ = nullptr, *lookup_exit_ = nullptr;
  std::set<std::tuple<dev_t, ino_t, pid_t, std::uint64_t>> deferred_probed_;  // by file, pid, probe offset
  std::set<std::tuple<dev_t, ino_t, pid_t>> lookups_;  // attach_lookups' files
  AttachMode mode_ = AttachMode::MultiPair;
  Selection selection_;
  Warn warn_, note_;
  std::function<void()> read_meanwhile_;
  std::map<std::tuple<dev_t, ino_t>, FileSymbols> symbols_;
  std::map<std::tuple<dev_t, ino_t, pid_t>, FileResult> attached_;
  std::set<std::tuple<dev_t, ino_t, pid_t>> loaders_;
  std::set<std::tuple<const bpf_program*, dev_t, ino_t, pid_t, std::uint64_t>> programs_;  // attach_program's
  std::map<std::tuple<dev_t, ino_t, pid_t>, Links> file_links_;  // attach_file's, by file and pid
  Links other_links_;  // attach_loader's and attach_function's
  std::unique_ptr<UprobeKeeper> keeper_;  // PerfPair: holds the perf events
  bool keeper_failed_ = false;
  bool multi_pid_filter_ = true;
  std::atomic<std::size_t> probes_{0};  // set_hot_attached counts from several threads
  bool split_hot_ = false, hot_attached_ = true;
  std::vector<HotGroup> hot_;
};

}  // namespace cudatrace
