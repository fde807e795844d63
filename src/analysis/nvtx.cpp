#include "cudatrace/analysis/nvtx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <set>

#include "cudatrace/analysis/summary.h"

namespace cudatrace {

// The bytes of libcudatrace_nvtx.so, generated at build time (cmake/embed.cmake).
extern const unsigned char kNvtxInjectionLibrary[];
extern const std::size_t kNvtxInjectionLibrarySize;

namespace {

std::string message_of(const Call& c) {
  const NamedValue* v = arg_of_type(c, ArgType::String);
  if (v && std::holds_alternative<std::string_view>(v->value)) return std::string(std::get<std::string_view>(v->value));
  return "?";  // the message could not be read
}

}  // namespace

std::optional<NvtxClosed> NvtxTracker::on_call(const Call& c) {
  const std::uint64_t domain = arg_value(c, ArgType::Handle).value_or(0);
  switch (c.api->effect()) {
    case Effect::NvtxPush:
      threads_[c.tid].push_back({message_of(c), domain, 0, c.ts_ns});
      break;
    case Effect::NvtxPop: {
      auto it = threads_.find(c.tid);
      if (it == threads_.end()) break;
      std::vector<NvtxRange>& stack = it->second;
      // NVTX keeps one stack per domain: pop the innermost range of this one.
      auto open = std::find_if(stack.rbegin(), stack.rend(), [&](const NvtxRange& x) { return x.domain == domain; });
      if (open == stack.rend()) break;
      NvtxClosed closed{std::move(*open), c.pid, c.tid, c.end_ns(), false};
      stack.erase(std::next(open).base());
      if (stack.empty()) threads_.erase(it);
      return closed;
    }
    case Effect::NvtxStart:
      processes_[c.pid].push_back({message_of(c), domain, arg_value(c, ArgType::Size).value_or(0), c.ts_ns});
      break;
    case Effect::NvtxEnd: {
      auto it = processes_.find(c.pid);
      if (it == processes_.end()) break;
      const std::uint64_t id = arg_value(c, ArgType::Size).value_or(0);
      auto open = std::find_if(it->second.begin(), it->second.end(), [&](const NvtxRange& x) { return x.id == id; });
      if (open == it->second.end()) break;
      NvtxClosed closed{std::move(*open), c.pid, c.tid, c.end_ns(), true};
      it->second.erase(open);
      if (it->second.empty()) processes_.erase(it);
      return closed;
    }
    default:  // marks change no range
      break;
  }
  return std::nullopt;
}

void NvtxTracker::annotate(Call& c) const {
  c.nvtx = c.nvtx_process = nullptr;
  if (c.api->layer() == Layer::Nvtx) return;
  if (auto it = threads_.find(c.tid); it != threads_.end()) c.nvtx = &it->second;
  if (auto it = processes_.find(c.pid); it != processes_.end()) c.nvtx_process = &it->second;
}

void RangeSummary::on_call(const Call& c) {
  // Outermost calls only: a runtime call's nested driver calls are part of
  // it. (An outermost call recorded at entry, an asynchronous operation by
  // default, counts with no time of its own.)
  if (c.unfinished || c.depth != 0 || c.api->layer() == Layer::Nvtx) return;
  const std::uint64_t launches = c.api->effect() == Effect::Launch;
  const std::uint64_t bytes = c.api->effect() == Effect::Copy ? transfer_bytes(c) : 0;
  if (!c.nvtx) {
    outside_.calls++;
    outside_.api_ns += c.dur_ns;
    outside_.launches += launches;
    outside_.bytes += bytes;
    return;
  }
  Stats& self = ranges_[c.nvtx->back().message];
  self.calls++;
  self.api_ns += c.dur_ns;
  self.launches += launches;
  self.bytes += bytes;
  // Each name once per call, however often it is open on the stack.
  std::set<std::string_view> seen;
  for (const NvtxRange& r : *c.nvtx) {
    if (!seen.insert(r.message).second) continue;
    Stats& s = ranges_[r.message];
    s.total_calls++;
    s.total_api_ns += c.dur_ns;
    s.total_launches += launches;
  }
}

std::unique_ptr<NvtxInjection> NvtxInjection::create(std::string& error) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/cudatrace-nvtx-XXXXXX";
  if (!mkdtemp(dir.data())) {
    error = "cannot create a directory for the NVTX injection library: " + dir + ": " + std::strerror(errno);
    return nullptr;
  }
  // Readable by a command that changes its user; writable by root only.
  chmod(dir.c_str(), 0755);
  std::string path = dir + "/libcudatrace_nvtx.so";
  if (!write_nvtx_library(path, error)) {
    rmdir(dir.c_str());
    return nullptr;
  }
  return std::unique_ptr<NvtxInjection>(new NvtxInjection(std::move(dir), std::move(path)));
}

NvtxInjection::~NvtxInjection() {
  unlink(path_.c_str());
  rmdir(dir_.c_str());
}

bool write_nvtx_library(const std::string& path, std::string& error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0755);
  if (fd < 0) {
    error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  const unsigned char* p = kNvtxInjectionLibrary;
  std::size_t left = kNvtxInjectionLibrarySize;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = "writing " + path + ": " + std::strerror(errno);
      close(fd);
      unlink(path.c_str());
      return false;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  fchmod(fd, 0755);  // whatever the umask
  close(fd);
  return true;
}

}  // namespace cudatrace
