// Kernel names per process, learnt from the calls that register or look up
// kernels (the "module" group), with ELF symbols of host stubs as the fallback.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace cudatrace {

struct Call;

class KernelNames {
 public:
  struct Name {
    std::string mangled;
    std::string demangled;
  };
  // Maps a host address in process `pid` to the ELF symbol covering it, or "".
  using Symbolizer = std::function<std::string(std::uint32_t pid, std::uint64_t addr)>;

  void set_symbolizer(Symbolizer s) { symbolize_ = std::move(s); }

  // Learns from a completed module-group call (registration or lookup).
  void learn(const Call& call);
  // The name of a launched function handle, or nullptr when unknown.
  const Name* find(std::uint32_t pid, std::uint64_t handle);
  // Forgets a process (exit or exec: its handles are meaningless afterwards).
  void forget(std::uint32_t pid);

  static std::string demangle(const std::string& mangled);

 private:
  struct Key {
    std::uint32_t pid;
    std::uint64_t handle;
    bool operator==(const Key& o) const { return pid == o.pid && handle == o.handle; }
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const { return std::hash<std::uint64_t>()(k.handle * 31 + k.pid); }
  };
  const Name* remember(std::uint32_t pid, std::uint64_t handle, std::string mangled);

  std::unordered_map<Key, Name, KeyHash> names_;
  // Negative cache of symbolization misses, so a hot unknown handle costs one lookup.
  std::unordered_map<Key, bool, KeyHash> unknown_;
  Symbolizer symbolize_;
};

}  // namespace cudatrace
