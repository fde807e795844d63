// Attaches the generic entry/return programs to every selected API that a
// file defines, with the API's cookie. Each file's ELF is parsed once; every
// link is owned here and detached on destruction.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cudatrace/api_table.h"

struct bpf_program;
struct bpf_link;

namespace cudatrace {

struct Selection {
  bool group[kGroupCount] = {};
  bool layer[2] = {true, true};  // indexed by Layer
  bool wants(const Api& a) const {
    return group[static_cast<int>(a.group())] && layer[static_cast<int>(a.layer())];
  }
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

  std::size_t link_count() const { return links_.size(); }

 private:
  struct FileSymbols {
    std::vector<std::pair<const Api*, std::uint64_t>> offsets;  // API, file offset
  };
  const FileSymbols* symbols_of(const std::string& path, std::string& error, std::tuple<dev_t, ino_t>& key);
  bool attach_one(bpf_program* prog, const std::string& path, pid_t pid, std::uint64_t offset, std::uint64_t cookie,
                  bool retprobe, std::string& error);

  bpf_program *enter_, *exit_, *map_change_;
  Selection selection_;
  Warn warn_;
  std::map<std::tuple<dev_t, ino_t>, FileSymbols> symbols_;
  std::map<std::tuple<dev_t, ino_t, pid_t>, FileResult> attached_;
  std::set<std::tuple<dev_t, ino_t, pid_t>> loaders_;
  struct LinkDeleter {
    void operator()(bpf_link* l) const;
  };
  std::vector<std::unique_ptr<bpf_link, LinkDeleter>> links_;
};

}  // namespace cudatrace
