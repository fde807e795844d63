#include "cudatrace/kernel_names.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

#include "cudatrace/decode.h"

namespace cudatrace {

std::string KernelNames::demangle(const std::string& mangled) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status),
                                                  &std::free);
  return status == 0 && out ? std::string(out.get()) : mangled;
}

const KernelNames::Name* KernelNames::named(const Pooled& mangled) {
  auto it = demangled_of_.find(&mangled);
  if (it != demangled_of_.end()) {
    demangled_.splice(demangled_.begin(), demangled_, it->second);
  } else {
    demangled_.emplace_front(&mangled, demangle(mangled.first));
    demangled_of_.emplace(&mangled, demangled_.begin());
    if (demangled_.size() > kMaxDemangled) {
      demangled_of_.erase(demangled_.back().first);
      demangled_.pop_back();
    }
  }
  current_ = Name{mangled.first, demangled_.front().second};
  return &current_;
}

void KernelNames::release(Pooled* mangled) {
  if (--mangled->second) return;
  if (auto it = demangled_of_.find(mangled); it != demangled_of_.end()) {
    demangled_.erase(it->second);
    demangled_of_.erase(it);
  }
  pool_.erase(mangled->first);
}

const KernelNames::Name* KernelNames::remember(std::uint32_t pid, std::uint64_t handle, std::string_view mangled) {
  if (!handle || mangled.empty()) return nullptr;
  const Key key{pid, handle};
  unknown_.erase(key);
  Pooled* pooled = &*pool_.try_emplace(std::string(mangled), 0).first;
  ++pooled->second;
  auto [it, inserted] = names_.try_emplace(key, pooled);
  if (!inserted) {
    release(it->second);  // after the new reference: the same name stays pooled
    it->second = pooled;
  }
  return named(*pooled);
}

const KernelNames::Name* KernelNames::find(std::uint32_t pid, std::uint64_t handle) {
  const Key key{pid, handle};
  if (auto it = names_.find(key); it != names_.end()) return named(*it->second);
  if (!symbolize_ || !handle || unknown_.count(key)) return nullptr;
  std::string sym = symbolize_(pid, handle);
  if (sym.empty()) {
    if (unknown_.size() >= kMaxUnknown) unknown_.clear();  // a cache: at worst a handle is looked up again
    unknown_.emplace(key, true);
    return nullptr;
  }
  return remember(pid, handle, sym);
}

void KernelNames::learn(const Call& call) {
  if (call.api->group() != Group::Module || call.unfinished) return;
  const std::uint32_t pid = call.rec->pid;
  const bool registration = call.api->spec->returns == Returns::Void;
  if (!registration && call.failed()) return;
  const std::uint64_t out = arg_value(call, ArgType::OutFunc).value_or(0);
  const std::uint64_t func = arg_value(call, ArgType::Func).value_or(0);
  const NamedValue* str = arg_of_type(call, ArgType::String);
  const auto* name = str ? std::get_if<std::string_view>(&str->value) : nullptr;
  if (registration) {
    // __cudaRegisterFunction(handle, hostFun, deviceFun): the host stub's kernel.
    if (name) remember(pid, func, *name);
  } else if (name) {
    // cuModuleGetFunction / cuLibraryGetKernel / cudaLibraryGetKernel: looked up by name.
    remember(pid, out, *name);
  } else if (const Name* known = find(pid, func)) {
    // __cudaGetKernel / cudaGetKernel / cuKernelGetFunction: a new handle for a known one.
    // (The view points into the pool, which keeps the name while `func` uses it.)
    remember(pid, out, known->mangled);
  }
}

template <typename Map>
static void erase_pid(Map& m, std::uint32_t pid) {
  for (auto it = m.begin(); it != m.end();) it = it->first.pid == pid ? m.erase(it) : std::next(it);
}

void KernelNames::forget(std::uint32_t pid) {
  for (auto it = names_.begin(); it != names_.end();) {
    if (it->first.pid != pid) {
      ++it;
      continue;
    }
    release(it->second);
    it = names_.erase(it);
  }
  erase_pid(unknown_, pid);
}

}  // namespace cudatrace
