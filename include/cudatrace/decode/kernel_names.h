// Kernel names per process, learnt from the calls that register or look up
// kernels (the "module" group), with ELF symbols of host stubs as the fallback.
//
// A program can register tens of thousands of kernels (PyTorch does), with
// long template names: each mangled name is stored once however many
// processes or handles use it, demangled names only for the kMaxDemangled
// most recently used, and unknown handles are remembered up to
// kMaxUnknown at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace cudatrace {

struct Call;

// A kernel's own name, like Nsight Systems' "base" names: the demangled name
// without return type, enclosing scopes, template arguments and parameter
// list ("void at::native::reduce_kernel<512, 1, ...>(...)" -> "reduce_kernel").
// A call operator or a lambda keeps the scope it belongs to
// ("{lambda(float)#1}::operator()"). Plain names (C, cuBLAS's
// "sm90_xmma_gemm_...", or a name that did not demangle) come back whole.
// A view into `demangled`.
std::string_view kernel_base_name(std::string_view demangled);

class KernelNames {
 public:
  // Valid until the next call of find() or learn().
  struct Name {
    std::string_view mangled;
    std::string_view demangled;
    std::string_view short_name;  // short_name(demangled)
  };
  static constexpr std::size_t kMaxDemangled = 4096;
  static constexpr std::size_t kMaxUnknown = 65536;
  // Maps a host address in process `pid` to the ELF symbol covering it, or "".
  using Symbolizer = std::function<std::string(std::uint32_t pid, std::uint64_t addr)>;

  // Told each driver handle that a traced lookup names (not a host stub):
  // how the driver's objects hold names is learnt from them. Returns true
  // when that makes unknown handles worth looking up again.
  using HandleLearner = std::function<bool(std::uint32_t pid, std::uint64_t handle, std::string_view mangled)>;

  void set_symbolizer(Symbolizer s) { symbolize_ = std::move(s); }
  void set_handle_learner(HandleLearner l) { learn_handle_ = std::move(l); }
  // Handles found unnamed are looked up again (the symbolizer learnt more).
  void forget_unknown() { unknown_.clear(); }

  // Learns from a completed module-group call: a registration or lookup
  // names a handle; unloading a module or library (or a load that returns
  // a handle an unload freed unseen) forgets the names of the handles looked
  // up in it, which CUDA may give to other kernels afterwards.
  void learn(const Call& call);
  // The name of a launched function handle, or nullptr when unknown.
  const Name* find(std::uint32_t pid, std::uint64_t handle);
  // Names a handle of process `pid` (a launch read back from a --json trace).
  void add(std::uint32_t pid, std::uint64_t handle, std::string mangled) { remember(pid, handle, std::move(mangled)); }
  // Forgets a process (exit or exec: its handles are meaningless afterwards).
  void forget(std::uint32_t pid) { forget(std::unordered_set<std::uint32_t>{pid}); }
  // Forgets these processes, in one pass over the names.
  void forget(const std::unordered_set<std::uint32_t>& pids);

  static std::string demangle(const std::string& mangled);

  // The name text output and summaries show: kernel_base_name(demangled),
  // and when another kernel seen earlier in the run has the same base name,
  // that name and "#2", "#3", ... in the order the kernels were first seen.
  const std::string& short_name(const std::string& demangled);

 private:
  struct Key {
    std::uint32_t pid;
    std::uint64_t handle;
    bool operator==(const Key& o) const { return pid == o.pid && handle == o.handle; }
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const { return std::hash<std::uint64_t>()(k.handle * 31 + k.pid); }
  };
  using Pooled = std::pair<const std::string, std::uint32_t>;  // mangled name, handles using it
  const Pooled* remember(std::uint32_t pid, std::uint64_t handle, std::string_view mangled);
  void forget_handle(const Key& key);
  void forget_module(std::uint32_t pid, std::uint64_t module);
  const Name* named(const Pooled& mangled);
  void release(Pooled* mangled);

  std::unordered_map<std::string, std::uint32_t> pool_;
  std::unordered_map<Key, Pooled*, KeyHash> names_;
  // The handles looked up in each module or library (cuModuleGetFunction,
  // cuLibraryGetKernel, and the functions cuKernelGetFunction gave for them).
  std::unordered_map<Key, std::vector<std::uint64_t>, KeyHash> module_handles_;
  std::unordered_map<Key, std::uint64_t, KeyHash> module_of_;  // handle -> its module
  // Negative cache of symbolization misses, so a hot unknown handle costs one lookup.
  std::unordered_map<Key, bool, KeyHash> unknown_;
  struct Demangled {
    const Pooled* mangled;
    std::string name;
    const std::string* short_name;  // in short_names_: a launch does not hash the long name again
  };
  std::list<Demangled> demangled_;  // most recently used first
  std::unordered_map<const Pooled*, decltype(demangled_)::iterator> demangled_of_;
  Name current_;
  Symbolizer symbolize_;
  HandleLearner learn_handle_;
  std::unordered_map<std::string, std::string> short_names_;   // by demangled name
  std::unordered_map<std::string, unsigned> base_name_uses_;   // kernels seen per base name
};

}  // namespace cudatrace
