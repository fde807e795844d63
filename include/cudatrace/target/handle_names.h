// Names of kernel handles made before cudatrace came (-p, --all-processes),
// read from the driver's own object behind the handle.
//
// A CUfunction, CUkernel or cudaKernel_t is a pointer to an object the driver
// keeps in the process's memory, and that object points to the kernel's
// mangled name. Where, differs between driver versions, so it is never
// assumed: it is learnt per process from handles whose names cudatrace knows
// (a host stub's handle variable, a lookup it traced), as the one word of the
// object that points to exactly that name in (nearly) all of them and to
// another kernel's name in none. A service whose every handle was made
// before attach (Triton's and XLA's modules are loaded at start-up) shows no
// known handle: there, the unknown handles its launches use teach it, as the
// one word that points to a kernel-like name in (nearly) every one of them,
// a different name in each; where two words differently do, nothing is
// learnt. Only then is an unknown handle named, and only by a NUL-terminated
// identifier found there: where the layout is not learnt, or the word points
// to anything else, the handle stays unnamed. A wrong name is worse than none.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace cudatrace {

class HandleNames {
 public:
  // The words of the object that are tried: the first 32 (256 bytes).
  static constexpr std::size_t kWords = 32;
  // Known handles that must agree on a word before it is used...
  static constexpr std::uint32_t kMinAgreeing = 3;
  // ...and the most known (or unknown) handles read (each costs a few reads).
  static constexpr std::uint32_t kMaxTried = 256;
  // Unknown handles are read in the first 8 words only: past a small
  // object lie its heap neighbours, whose name words would be a second
  // reading of every handle (another kernel's name).
  static constexpr std::size_t kEvidentWords = 8;
  static constexpr std::size_t kMaxName = 4096;

  // A handle of `pid` whose name is known. Returns true when this learnt
  // the layout (unknown handles may have a name now).
  bool learn(pid_t pid, std::uint64_t handle, std::string_view mangled);
  // A handle of `pid` with no name known (another handle each call). Returns
  // true when this learnt the layout.
  bool observe(pid_t pid, std::uint64_t handle);
  // The mangled name the driver keeps for `handle`, or "" (layout not learnt,
  // or no identifier where the name should be).
  std::string name_of(pid_t pid, std::uint64_t handle) const;
  // The byte offset of the name's pointer in the driver's object, or -1.
  int learnt_offset(pid_t pid) const;
  void forget(pid_t pid) { layouts_.erase(pid); }
  // For -v, per process that tried: what was learnt and from what, or why
  // nothing was ("pid 12: kernel handles: ...").
  std::vector<std::string> describe() const;

 private:
  struct Layout {
    std::array<std::uint32_t, kWords> agreeing{}, disagreeing{};
    std::array<bool, kWords> contradicted{};  // pointed to another kernel's name
    std::uint32_t tried = 0;
    // Unknown handles (observe): per word, those it gave a kernel-like name,
    // those it did not, the first kMinAgreeing different names (hashed), and
    // a digest of what it gave each handle (two words of one digest said the
    // same every time: they are one).
    std::array<std::uint32_t, kEvidentWords> named_unknown{}, unnamed_unknown{};
    std::array<std::unordered_set<std::size_t>, kEvidentWords> unknown_names;
    std::array<std::uint64_t, kEvidentWords> digest{};
    std::uint32_t observed = 0;
    int word = -1;  // learnt: the word that points to the name
  };
  static int chosen_word(const Layout& layout);
  static int known_word(const Layout& layout);
  static int self_evident_word(const Layout& layout);
  std::unordered_map<pid_t, Layout> layouts_;
};

// True for a name a kernel can have: letters, digits, '_', '$', '.'.
inline bool kernel_identifier(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           c == '.';
  });
}

// What an unknown handle's word must point to before it counts as a name:
// an identifier that starts like one and is not a few stray bytes.
inline bool kernel_like_name(std::string_view s) {
  return s.size() >= 3 && kernel_identifier(s) && ((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_');
}

}  // namespace cudatrace
