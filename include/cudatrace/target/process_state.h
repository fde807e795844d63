// What cudatrace reads about a target process besides its mappings: its
// place in job control, its owner, its initial environment.
#pragma once

#include <sys/types.h>

#include <string>

namespace cudatrace {

// A job of a job-control shell: its own process group, on the terminal of
// its parent. The shell waits for it with WUNTRACED, so a SIGSTOP makes it
// report the job "Stopped" and take the terminal back; after the SIGCONT the
// job runs on in the background.
bool is_shell_job(pid_t pid);

// Processes with nothing cudatrace could ever trace: a kernel thread (no
// user space) and a zombie (it has exited; its parent has not reaped it).
enum class ProcessKind { User, KernelThread, Zombie };
// Also its name (/proc/PID/stat); User when that cannot be read.
ProcessKind process_kind(pid_t pid, std::string& comm);

// Root tracing another user's process: that user's trace is for root only.
bool trace_is_private(pid_t pid);

// NVTX loads an injection only if NVTX_INJECTION64_PATH was in the process's
// initial environment.
bool started_with_nvtx_injection(pid_t pid);

}  // namespace cudatrace
