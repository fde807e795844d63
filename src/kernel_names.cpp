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

const KernelNames::Name* KernelNames::remember(std::uint32_t pid, std::uint64_t handle, std::string mangled) {
  if (!handle || mangled.empty()) return nullptr;
  const Key key{pid, handle};
  unknown_.erase(key);
  Name& n = names_[key];
  if (n.mangled != mangled) {
    n.demangled = demangle(mangled);
    n.mangled = std::move(mangled);
  }
  return &n;
}

const KernelNames::Name* KernelNames::find(std::uint32_t pid, std::uint64_t handle) {
  const Key key{pid, handle};
  if (auto it = names_.find(key); it != names_.end()) return &it->second;
  if (!symbolize_ || !handle || unknown_.count(key)) return nullptr;
  std::string sym = symbolize_(pid, handle);
  if (sym.empty()) {
    unknown_.emplace(key, true);
    return nullptr;
  }
  return remember(pid, handle, std::move(sym));
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
    if (name) remember(pid, func, std::string(*name));
  } else if (name) {
    // cuModuleGetFunction / cuLibraryGetKernel / cudaLibraryGetKernel: looked up by name.
    remember(pid, out, std::string(*name));
  } else if (const Name* known = find(pid, func)) {
    // __cudaGetKernel / cudaGetKernel / cuKernelGetFunction: a new handle for a known one.
    std::string mangled = known->mangled;
    remember(pid, out, std::move(mangled));
  }
}

template <typename Map>
static void erase_pid(Map& m, std::uint32_t pid) {
  for (auto it = m.begin(); it != m.end();) it = it->first.pid == pid ? m.erase(it) : std::next(it);
}

void KernelNames::forget(std::uint32_t pid) {
  erase_pid(names_, pid);
  erase_pid(unknown_, pid);
}

}  // namespace cudatrace
