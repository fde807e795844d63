// Continues processes left stopped if cudatrace dies without cleaning up.
//
// When a traced process loads a library, the BPF side stops it (SIGSTOP)
// until cudatrace has attached probes there and sends SIGCONT. If cudatrace
// is killed (SIGKILL, OOM) in that window, nobody would ever continue it.
// The watchdog is a small process of its own session (not cudatrace's child,
// nor in its process group: a kill of those leaves it). It waits until
// every thread of cudatrace has begun to exit (the BPF thread-exit hook
// writes to the tracer_exit ring then, before the kernel closes cudatrace's
// links: seconds with --attach perf or on a busy host, one RCU grace period
// each), then reads what is left unread in the ring buffer and continues
// every process that a loader notification says was stopped. It reads on
// until cudatrace has wholly exited (a pidfd: after its last link is
// closed), for a notification made just before; one made while cudatrace is
// dying undid its own stop (see ct_map_change).
// A notification is consumed only after cudatrace has sent its SIGCONT, so
// none is missed.
#pragma once

#include <sys/types.h>

namespace cudatrace {

// Forks the watchdog. It keeps only `ring_fd` (the BPF ring buffer map of
// loader notifications) and `tracer_exit_fd` (BpfObject::tracer_exit_fd) and
// closes every other descriptor at once, so it holds no probe or output
// open. Returns its pid, or -1 (with errno) if it could not be started.
pid_t start_watchdog(int ring_fd, int tracer_exit_fd);

}  // namespace cudatrace
