// Continues processes left stopped if cudatrace dies without cleaning up.
//
// When a traced process loads a library, the BPF side stops it (SIGSTOP)
// until cudatrace has attached probes there and sends SIGCONT. If cudatrace
// is killed (SIGKILL, OOM) in that window, nobody would ever continue it.
// The watchdog is a small process of its own session (not cudatrace's child,
// nor in its process group: a kill of those leaves it) that waits for cudatrace to have
// wholly exited (a pidfd: after its last link is closed), then reads what is
// left unread in the ring buffer and continues every process that a loader
// notification says was stopped. While cudatrace is dying, its probes stop
// no one (the BPF side knows, see ct_map_change).
// A notification is consumed only after cudatrace has sent its SIGCONT, so
// none is missed.
#pragma once

#include <sys/types.h>

namespace cudatrace {

// Forks the watchdog. It keeps only `ring_fd` (the BPF ring buffer map) and
// closes every other descriptor at once, so it holds no probe or output open.
// Returns its pid, or -1 (with errno) if it could not be started.
pid_t start_watchdog(int ring_fd);

}  // namespace cudatrace
