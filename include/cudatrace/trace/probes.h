// Attaches the generic entry/return programs to every selected API that a
// file defines, with the API's cookie. Each file's ELF is parsed once. One
// uprobe_multi link per file and direction carries all its probes, so
// attaching and detaching cost one kernel round trip each, not one per
// probe. Links are owned here and detached on destruction.
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

struct bpf_program;

namespace cudatrace {

// How a call's entry and return are probed; chosen once per session.
enum class AttachMode : std::uint8_t {
  MultiPair,     // uprobe_multi links (Linux 6.6): ct_enter on entry, ct_exit on return
  MultiSession,  // one uprobe_multi session link (Linux 6.13): ct_session on both;
                 // an entry may leave its return unprobed (one trap instead of two)
};

class Probes {
 public:
  using Warn = std::function<void(const std::string&)>;
  Probes(bpf_program* enter, bpf_program* exit, bpf_program* map_change, Selection selection, Warn warn);
  ~Probes();

  struct FileResult {
    int apis = 0;   // APIs attached in this file (0: none of ours)
    bool runtime = false, driver = false;
  };
  // Attaches to `path` (openable from here). pid -1: every process mapping
  // it; else only that process. A file already handled for `pid` returns
  // the earlier result. On error returns false and sets `error`.
  bool attach_file(const std::string& path, pid_t pid, FileResult& result, std::string& error);
  // Attaches the map-change program to the dynamic loader's _dl_debug_state.
  bool attach_loader(const std::string& path, pid_t pid, std::string& error);
  // Attaches the entry program (and the return program if `with_return`) to
  // the function at file `offset` of `path` with `cookie`: for measuring
  // what a probe hit costs (overhead.h).
  bool attach_function(const std::string& path, pid_t pid, std::uint64_t offset, std::uint64_t cookie,
                       bool with_return, std::string& error);

  std::size_t probe_count() const { return probes_.load(); }

  // --max-overhead (budget.h): from now on the hot APIs (is_hot_api) of
  // each file get links of their own, which set_hot_attached detaches and
  // attaches again; the others' links stay. A file attached while the hot
  // links are detached gets its hot links at the next attach.
  void split_hot() { split_hot_ = true; }
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
  static void prepare(bpf_program* prog);
  static void prepare_session(bpf_program* prog);
  // MultiSession when this kernel accepts a uprobe session link (found by
  // trying one on a scratch file), else MultiPair.
  static AttachMode detect_mode();
  // From now on attach `session` (prepared with prepare_session) instead of
  // the entry/return pair.
  void use_session(bpf_program* session) {
    session_ = session;
    mode_ = AttachMode::MultiSession;
  }
  AttachMode mode() const { return mode_; }

 private:
  struct FileSymbols {
    std::vector<std::pair<const Api*, std::uint64_t>> offsets;  // API, file offset
  };
  const FileSymbols* symbols_of(const std::string& path, std::string& error, std::tuple<dev_t, ino_t>& key);
  enum class MultiLink : std::uint8_t { Entry, Return, Session };
  // The new link goes to `links`, or the links kept until the end when null.
  bool attach_multi(bpf_program* prog, const std::string& path, pid_t pid, const std::vector<std::uint64_t>& offsets,
                    const std::vector<std::uint64_t>& cookies, MultiLink kind, std::string& error,
                    std::vector<int>* links = nullptr);
  // Return probes first, as attach_file does; a session link instead where
  // the mode has them and `session`.
  bool attach_pair(const std::string& path, pid_t pid, const std::vector<std::uint64_t>& offsets,
                   const std::vector<std::uint64_t>& cookies, std::string& error, std::vector<int>* links = nullptr,
                   bool session = true);
  // A file's hot probes, attached and detached as a group. The file is held
  // open: re-attaching goes through /proc/self/fd even after every process
  // that mapped it (through its /proc/PID/root path) has gone.
  struct HotGroup {
    int file_fd = -1;
    pid_t pid = -1;
    std::string name;  // for warnings
    std::vector<std::uint64_t> offsets, cookies;
    std::vector<const Api*> apis;
    std::vector<int> links;  // in attach order; empty while detached
    std::uint64_t since_ns = 0;        // CLOCK_MONOTONIC, first attach
    std::uint64_t attached_at_ns = 0;  // end of the last attach; 0 while detached
    std::uint64_t attached_ns = 0;     // attached before that
  };
  bool attach_hot(HotGroup& g, std::string& error);
  void detach_hot(HotGroup& g);

  bpf_program *enter_, *exit_, *map_change_, *session_ = nullptr;
  AttachMode mode_ = AttachMode::MultiPair;
  Selection selection_;
  Warn warn_;
  std::map<std::tuple<dev_t, ino_t>, FileSymbols> symbols_;
  std::map<std::tuple<dev_t, ino_t, pid_t>, FileResult> attached_;
  std::set<std::tuple<dev_t, ino_t, pid_t>> loaders_;
  std::vector<int> link_fds_;
  std::atomic<std::size_t> probes_{0};  // set_hot_attached counts from several threads
  bool split_hot_ = false, hot_attached_ = true;
  std::vector<HotGroup> hot_;
};

}  // namespace cudatrace
