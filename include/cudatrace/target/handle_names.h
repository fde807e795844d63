// Names of kernel handles made before cudatrace came (-p, --all-processes),
// read from the driver's own object behind the handle.
//
// A CUfunction, CUkernel or cudaKernel_t is a pointer to an object the driver
// keeps in the process's memory, and that object points to the kernel's
// mangled name. Where, differs between driver versions, so it is never
// assumed: it is learnt per process from handles whose names cudatrace knows
// (a host stub's handle variable, a lookup it traced), as the one word of the
// object that points to exactly that name in (nearly) all of them and to
// another kernel's name in none. Only then
// is an unknown handle named, and only by a NUL-terminated identifier found
// there: where the layout is not learnt, or the word points to anything else,
// the handle stays unnamed. A wrong name is worse than none.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace cudatrace {

class HandleNames {
 public:
  // The words of the object that are tried: the first 32 (256 bytes).
  static constexpr std::size_t kWords = 32;
  // Known handles that must agree on a word before it is used...
  static constexpr std::uint32_t kMinAgreeing = 3;
  // ...and the most known handles it is tried on (each costs a few reads).
  static constexpr std::uint32_t kMaxTried = 64;
  static constexpr std::size_t kMaxName = 4096;

  // A handle of `pid` whose name is known. Returns true when this learnt
  // the layout (unknown handles may have a name now).
  bool learn(pid_t pid, std::uint64_t handle, std::string_view mangled);
  // The mangled name the driver keeps for `handle`, or "" (layout not learnt,
  // or no identifier where the name should be).
  std::string name_of(pid_t pid, std::uint64_t handle) const;
  // The byte offset of the name's pointer in the driver's object, or -1.
  int learnt_offset(pid_t pid) const;
  void forget(pid_t pid) { layouts_.erase(pid); }

 private:
  struct Layout {
    std::array<std::uint32_t, kWords> agreeing{}, disagreeing{};
    std::array<bool, kWords> contradicted{};  // pointed to another kernel's name
    std::uint32_t tried = 0;
    int word = -1;  // learnt: the word that points to the name
  };
  std::unordered_map<pid_t, Layout> layouts_;
};

// True for a name a kernel can have: letters, digits, '_', '$', '.'.
inline bool kernel_identifier(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           c == '.';
  });
}

}  // namespace cudatrace
