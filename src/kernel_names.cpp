#include "cudatrace/kernel_names.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

#include "cudatrace/decode.h"

namespace cudatrace {
namespace {

// The value of the first argument of `call` with type `t`.
const Value* arg_of_type(const Call& call, ArgType t) {
  const auto& spec_args = call.api->spec->args;
  for (std::size_t i = 0; i < spec_args.size() && i < call.args.size(); ++i)
    if (spec_args[i].type == t) return &call.args[i].value;
  return nullptr;
}

std::uint64_t handle_of(const Value* v) {
  if (!v) return 0;
  if (const auto* h = std::get_if<Hex>(v)) return h->v;
  return 0;
}

}  // namespace

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
  const std::uint64_t out = handle_of(arg_of_type(call, ArgType::OutFunc));
  const std::uint64_t func = handle_of(arg_of_type(call, ArgType::Func));
  const Value* str = arg_of_type(call, ArgType::String);
  const auto* name = str ? std::get_if<std::string_view>(str) : nullptr;
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
