// Keeps perf-event uprobes (--attach perf) in a separate process, so that
// destroying them never holds cudatrace or the traced process up, and so
// that consecutive runs reuse them instead of destroying and re-creating.
//
// Why: destroying a perf-event uprobe waits for RCU grace periods inside
// the kernel's global event_mutex (perf_uprobe_destroy): one probe after
// another, whatever the number of threads closing them, and every
// perf_event_open of a uprobe waits for that mutex too. 3.6 ms a probe on
// a quiet machine; about 105 ms on the loaded 2-CPU build VM, where Linux
// 6.12+ adds an RCU Tasks Trace grace period per probe (uprobe_unregister_sync).
// Closing a BPF link on a perf event, by contrast, costs no grace period
// while another descriptor keeps the event open.
//
// So the keeper holds one reference to every event cudatrace makes; the
// links (cudatrace's) close at once when cudatrace ends or dies. The events
// are then kept idle for kIdleMs, and a later cudatrace asking for the same
// (file, offset, direction) gets the same event back; so they are bound to
// no process (the BPF programs filter), or none could be reused, and each -p
// run would leave a backlog of destroys whose stale probes slow down every
// process mapping the library until it is worked off. The keeper destroys events only
// while no cudatrace is attaching (attaching() windows), one at a time, so
// an attach waits for at most one destroy. It exits when it holds nothing.
//
// One keeper per machine, reached through /run/cudatrace (root only; its
// peers must be root); where that is not usable (not root), or its keeper
// does not answer (one killed is stuck in its exit, destroying its events
// with its socket still open), a private keeper serves this cudatrace alone.
// Every answer is awaited for kAnswerMs at most: a keeper that stops
// answering is no longer used, and cudatrace makes its events itself.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cudatrace {

struct UprobeKey {
  std::uint64_t dev = 0, ino = 0, offset = 0;
  bool retprobe = false;
  bool operator==(const UprobeKey& o) const {
    return dev == o.dev && ino == o.ino && offset == o.offset && retprobe == o.retprobe;
  }
};

class UprobeKeeper {
 public:
  // How long an idle event is kept for reuse.
  static constexpr int kIdleMs = 10000;
  // How long an answer may take: a keeper answers between two destroys,
  // each one grace period (about 105 ms on a loaded 2-CPU VM).
  static constexpr int kAnswerMs = 2000;

  // Connects to the machine's keeper, starting it if there is none (or
  // starts a private one). nullptr with `error` set if neither works;
  // `notice` says why the machine's keeper was passed over, if it was.
  static std::unique_ptr<UprobeKeeper> connect(std::string& error, std::string& notice);
  // The client side of a socket connected to a keeper (owned from now on).
  static std::unique_ptr<UprobeKeeper> over(int sock);
  // A descriptor of an idle event for `key` (now this cudatrace's to use),
  // or -1 (none, or no answer in kAnswerMs: see answering()).
  int take(const UprobeKey& key);
  // False once the keeper left a question unanswered for kAnswerMs.
  bool answering() const { return answering_; }
  // Gives the keeper a reference to the event `fd` made for `key`; `fd`
  // stays open here. False if the keeper could not take it.
  bool give(const UprobeKey& key, int fd);
  // The event for `key` that this cudatrace took or gave is idle again (its
  // link is closed): take() hands it back out.
  void release(const UprobeKey& key);
  // While a window is open, the keeper destroys nothing.
  void attaching(bool open);
  // Closes the connection: the events given or taken become idle.
  ~UprobeKeeper();

  UprobeKeeper(const UprobeKeeper&) = delete;
  UprobeKeeper& operator=(const UprobeKeeper&) = delete;

 private:
  explicit UprobeKeeper(int sock) : sock_(sock) {}
  int sock_;
  bool answering_ = true;
};

// The keeper's main loop on `listener` (a listening socket; -1 for a private
// keeper) and connected `clients`. Runs in the keeper process; returns when
// it holds nothing and has no client. Public for the unit test, which runs
// it in a thread.
void run_uprobe_keeper(int listener, const std::vector<int>& clients, int idle_ms);

}  // namespace cudatrace
