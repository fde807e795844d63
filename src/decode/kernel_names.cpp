#include "cudatrace/decode/kernel_names.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "cudatrace/decode/decode.h"

namespace cudatrace {
namespace {

bool identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
}

// Length of the operator name at `i` ("operator()", "operator<<=", "operator
// new[]", "operator unsigned long"), 0 if there is none: its brackets and
// spaces must not count as template brackets, parameter lists or separators.
std::size_t operator_length(std::string_view s, std::size_t i) {
  constexpr std::string_view kKeyword = "operator";
  if (s.compare(i, kKeyword.size(), kKeyword) != 0 || (i > 0 && identifier_char(s[i - 1]))) return 0;
  std::size_t j = i + kKeyword.size();
  if (j < s.size() && identifier_char(s[j])) return 0;  // an identifier such as "operators"
  if (s.compare(j, 2, "()") == 0 || s.compare(j, 2, "[]") == 0) return j + 2 - i;
  const std::size_t symbols = j;
  while (j < s.size() && s[j] && std::strchr("<>=!+-*/%^&|~,", s[j])) ++j;
  if (j > symbols) return j - i;
  // new, delete, conversions, literals: up to the parameter list.
  while (j < s.size() && s[j] != '(') ++j;
  return j - i;
}

}  // namespace

std::string_view kernel_base_name(std::string_view s) {
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  constexpr std::size_t kNone = std::string_view::npos;
  struct Group {
    std::size_t begin = kNone, end = kNone;  // the opening bracket, one past the closing one
  };
  Group params, templ;                 // the last top-level (...) and <...>
  std::vector<std::size_t> scopes;     // one past each top-level "::"
  std::vector<std::size_t> spaces;     // top-level spaces (the return type's end)
  std::vector<char> open;              // brackets open at this point
  std::size_t group_begin = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (const std::size_t op = operator_length(s, i)) {
      i += op;
      continue;
    }
    const char c = s[i];
    if (c == '-' && i + 1 < s.size() && s[i + 1] == '>') {  // "->" in an expression
      i += 2;
      continue;
    }
    // Inside parentheses '<' and '>' are text: a comparison the demangler
    // writes as "((a)>(b))", or a template in a parameter list, whose
    // brackets balance anyway.
    if ((c == '<' || c == '>') && !open.empty() && open.back() == '(') {
      ++i;
      continue;
    }
    if (c == '(' || c == '<' || c == '[' || c == '{') {
      if (open.empty()) group_begin = i;
      open.push_back(c);
    } else if (c == ')' || c == '>' || c == ']' || c == '}') {
      const char opener = c == ')' ? '(' : c == '>' ? '<' : c == ']' ? '[' : '{';
      // A closer without its opener (a '>' comparison in an expression) is text.
      auto match = std::find(open.rbegin(), open.rend(), opener);
      if (match != open.rend()) {
        open.erase(std::prev(match.base()), open.end());
        if (open.empty()) {
          if (c == ')') params = {group_begin, i + 1};
          if (c == '>') templ = {group_begin, i + 1};
        }
      }
    } else if (open.empty() && c == ':' && i + 1 < s.size() && s[i + 1] == ':') {
      scopes.push_back(i + 2);
      ++i;
    } else if (open.empty() && c == ' ') {
      spaces.push_back(i);
    }
    ++i;
  }
  // The parameter list is the last top-level (...) that no scope follows
  // ("(anonymous namespace)::f" has none).
  std::size_t end = s.size();
  if (params.begin != kNone && (scopes.empty() || scopes.back() < params.end)) end = params.begin;
  while (end > 0 && s[end - 1] == ' ') --end;
  if (templ.begin != kNone && templ.end == end) end = templ.begin;
  while (end > 0 && s[end - 1] == ' ') --end;
  std::size_t begin = 0, scope_begin = 0;
  bool after_scope = false;
  for (std::size_t p : scopes)
    if (p < end && p > begin) begin = p, scope_begin = p, after_scope = true;
  for (std::size_t p : spaces)
    if (p < end && p + 1 > begin) begin = p + 1, after_scope = false;
  std::string_view base = s.substr(begin, end - begin);
  // "{lambda(float)#1}::operator()": a call operator alone or a lambda alone says nothing.
  if (after_scope && begin >= 2 && (base == "operator()" || base.front() == '{')) {
    std::size_t outer = 0;
    for (std::size_t p : scopes)
      if (p < scope_begin && p > outer) outer = p;
    for (std::size_t p : spaces)
      if (p + 2 < scope_begin && p + 1 > outer) outer = p + 1;
    base = s.substr(outer, end - outer);
  }
  return base.empty() ? s : base;
}

const std::string& KernelNames::short_name(const std::string& demangled) {
  if (auto it = short_names_.find(demangled); it != short_names_.end()) return it->second;
  std::string name(kernel_base_name(demangled));
  if (const unsigned uses = ++base_name_uses_[name]; uses > 1) name += "#" + std::to_string(uses);
  return short_names_.emplace(demangled, std::move(name)).first->second;
}

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
    std::string demangled = demangle(mangled.first);
    const std::string* short_form = &short_name(demangled);
    demangled_.push_front({&mangled, std::move(demangled), short_form});
    demangled_of_.emplace(&mangled, demangled_.begin());
    if (demangled_.size() > kMaxDemangled) {
      demangled_of_.erase(demangled_.back().mangled);
      demangled_.pop_back();
    }
  }
  const Demangled& d = demangled_.front();
  current_ = Name{mangled.first, d.name, *d.short_name};
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

// Not demangled nor given a short name here: registration learns every kernel
// of a library (PyTorch: tens of thousands), and short names are numbered in
// the order kernels are first launched.
const KernelNames::Pooled* KernelNames::remember(std::uint32_t pid, std::uint64_t handle, std::string_view mangled) {
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
  return pooled;
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
  const Pooled* pooled = remember(pid, handle, sym);
  return pooled ? named(*pooled) : nullptr;
}

void KernelNames::learn(const Call& call) {
  if (!names_kernels(*call.api->spec) || call.unfinished) return;
  const std::uint32_t pid = call.pid;
  const bool registration = call.api->spec->returns == Returns::Void;
  if (!registration && call.failed()) return;
  const std::uint64_t out = arg_value(call, ArgType::OutFunc).value_or(0);
  const std::uint64_t func = arg_value(call, ArgType::Func).value_or(0);
  const NamedValue* str = arg_of_type(call, ArgType::String);
  const auto* name = str ? std::get_if<std::string_view>(&str->value) : nullptr;
  switch (call.api->effect()) {
    case Effect::ModuleLoad:
      // A handle an unload freed while it was not traced (-p, or not probed).
      forget_module(pid, arg_value(call, ArgType::OutHandle).value_or(0));
      return;
    case Effect::ModuleUnload:
      forget_module(pid, arg_value(call, ArgType::Handle).value_or(0));
      return;
    default:
      break;
  }
  std::uint64_t module = 0;
  if (registration) {
    // __cudaRegisterFunction(handle, hostFun, deviceFun): the host stub's kernel.
    if (name) remember(pid, func, *name);
    return;
  }
  const Pooled* named_out = nullptr;
  if (name) {
    // cuModuleGetFunction / cuLibraryGetKernel / cudaLibraryGetKernel: looked up by name in a module.
    named_out = remember(pid, out, *name);
    module = arg_value(call, ArgType::Handle).value_or(0);
  } else if (const Name* known = find(pid, func)) {
    // __cudaGetKernel / cudaGetKernel / cuKernelGetFunction: a new handle for a known one.
    // (The view points into the pool, which keeps the name while `func` uses it.)
    named_out = remember(pid, out, known->mangled);
    if (const auto it = module_of_.find({pid, func}); it != module_of_.end()) module = it->second;
  }
  if (named_out && learn_handle_ && learn_handle_(pid, out, named_out->first)) forget_unknown();
  if (!module || !out) return;
  if (std::uint64_t& of = module_of_[{pid, out}]; of != module) {
    of = module;
    module_handles_[{pid, module}].push_back(out);
  }
}

void KernelNames::forget_handle(const Key& key) {
  if (const auto it = names_.find(key); it != names_.end()) {
    release(it->second);
    names_.erase(it);
  }
  module_of_.erase(key);
}

void KernelNames::forget_module(std::uint32_t pid, std::uint64_t module) {
  const auto it = module_handles_.find({pid, module});
  if (!module || it == module_handles_.end()) return;
  for (const std::uint64_t handle : it->second)
    if (const auto of = module_of_.find({pid, handle}); of != module_of_.end() && of->second == module)
      forget_handle({pid, handle});
  module_handles_.erase(it);
}

template <typename Map>
static void erase_pids(Map& m, const std::unordered_set<std::uint32_t>& pids) {
  for (auto it = m.begin(); it != m.end();) it = pids.count(it->first.pid) ? m.erase(it) : std::next(it);
}

void KernelNames::forget(const std::unordered_set<std::uint32_t>& pids) {
  for (auto it = names_.begin(); it != names_.end();) {
    if (!pids.count(it->first.pid)) {
      ++it;
      continue;
    }
    release(it->second);
    it = names_.erase(it);
  }
  erase_pids(unknown_, pids);
  erase_pids(module_handles_, pids);
  erase_pids(module_of_, pids);
}

}  // namespace cudatrace
