#include "cudatrace/target/handle_names.h"

#include <array>
#include <functional>
#include <vector>

#include "cudatrace/target/symbolizer.h"

namespace cudatrace {

namespace {

// The first `count` words of the object at `handle`.
std::vector<std::uint64_t> object_words(pid_t pid, std::uint64_t handle, std::size_t count) {
  std::vector<std::uint64_t> addrs(count);
  for (std::size_t i = 0; i < addrs.size(); ++i) addrs[i] = handle + 8 * i;
  return read_process_words(pid, addrs);
}

}  // namespace

bool HandleNames::learn(pid_t pid, std::uint64_t handle, std::string_view mangled) {
  Layout& layout = layouts_[pid];
  if (!handle || mangled.empty() || layout.tried >= kMaxTried) return false;
  ++layout.tried;
  const std::vector<std::uint64_t> words = object_words(pid, handle, kWords);
  std::array<std::string, kWords> texts;
  std::array<bool, kWords> read{};
  bool named_somewhere = false;
  for (std::size_t i = 0; i < kWords; ++i) {
    read[i] = words[i] && read_process_string(pid, words[i], kMaxName, texts[i]);
    named_somewhere |= read[i] && texts[i] == mangled;
  }
  for (std::size_t i = 0; i < kWords; ++i) {
    if (read[i] && texts[i] == mangled)
      ++layout.agreeing[i];
    else if (read[i] && kernel_identifier(texts[i]))
      layout.contradicted[i] = true;  // another name: this word would name kernels wrongly
    else if (named_somewhere)
      ++layout.disagreeing[i];
    // (A handle whose object points to its name nowhere is no driver object
    // of this kind, a static runtime's own handle, as JAX's libraries hold:
    // only a word that names another kernel counts against it.)
  }
  const int before = layout.word;
  layout.word = chosen_word(layout);
  return before < 0 && layout.word >= 0;
}

// Known handles teach first; unknown ones only where known ones do not.
int HandleNames::chosen_word(const Layout& layout) {
  const int known = known_word(layout);
  return known >= 0 ? known : self_evident_word(layout);
}

// The word that names the most known handles, (nearly) all of them and no
// other name: a handle whose module was unloaded before it was read may
// have nothing there any more.
int HandleNames::known_word(const Layout& layout) {
  int best = -1;
  for (std::size_t i = 0; i < kWords; ++i) {
    const std::uint32_t agree = layout.agreeing[i];
    if (agree >= kMinAgreeing && !layout.contradicted[i] && layout.disagreeing[i] * 16 <= agree &&
        (best < 0 || agree > layout.agreeing[best]))
      best = static_cast<int>(i);
  }
  return best;
}

bool HandleNames::observe(pid_t pid, std::uint64_t handle) {
  Layout& layout = layouts_[pid];
  if (!handle || layout.word >= 0 || layout.observed >= kMaxTried) return false;
  ++layout.observed;
  const std::vector<std::uint64_t> words = object_words(pid, handle, kEvidentWords);
  std::string text;
  for (std::size_t i = 0; i < kEvidentWords; ++i) {
    const bool named = words[i] && read_process_string(pid, words[i], kMaxName, text) && kernel_like_name(text);
    const std::size_t hash = named ? std::hash<std::string>()(text) : 0;
    layout.digest[i] = layout.digest[i] * 1000003 + hash;
    if (!named) {
      ++layout.unnamed_unknown[i];
      continue;
    }
    ++layout.named_unknown[i];
    if (layout.unknown_names[i].size() < kMinAgreeing) layout.unknown_names[i].insert(hash);  // all it needs to know
  }
  layout.word = chosen_word(layout);
  return layout.word >= 0;
}

// The word that gave (nearly) every unknown handle a kernel-like name, at
// least kMinAgreeing different ones (not a field the kernels share), that no
// known handle contradicts; -1 unless every such word said the same.
int HandleNames::self_evident_word(const Layout& layout) {
  int found = -1;
  for (std::size_t i = 0; i < kEvidentWords; ++i) {
    const std::uint32_t named = layout.named_unknown[i];
    const bool evident = layout.unknown_names[i].size() >= kMinAgreeing && layout.unnamed_unknown[i] * 16 <= named &&
                         !layout.contradicted[i] && layout.disagreeing[i] * 16 <= layout.agreeing[i] + named;
    if (!evident) continue;
    if (found >= 0 && layout.digest[i] != layout.digest[found]) return -1;  // two readings: trust neither
    if (found < 0) found = static_cast<int>(i);
  }
  return found;
}

std::string HandleNames::name_of(pid_t pid, std::uint64_t handle) const {
  const auto it = layouts_.find(pid);
  if (it == layouts_.end() || it->second.word < 0 || !handle) return {};
  const std::uint64_t at = read_process_words(pid, {handle + 8 * std::uint64_t(it->second.word)})[0];
  std::string name;
  if (!at || !read_process_string(pid, at, kMaxName, name) || !kernel_identifier(name)) return {};
  return name;
}

std::vector<std::string> HandleNames::describe() const {
  std::vector<std::string> lines;
  for (const auto& [pid, layout] : layouts_) {
    if (!layout.tried && !layout.observed) continue;
    std::string line = "pid " + std::to_string(pid) + ": kernel handles made before attach: ";
    const int known = known_word(layout);
    if (layout.word >= 0)
      line += "named by the pointer at byte " + std::to_string(layout.word * 8) + " of the driver's object, learnt from " +
              (known >= 0 ? std::to_string(layout.agreeing[known]) + " known handles"
                          : std::to_string(layout.named_unknown[layout.word]) + " unknown ones");
    else
      line += "no layout learnt";
    line += " (" + std::to_string(layout.tried) + " known, " + std::to_string(layout.observed) + " unknown handles read";
    for (std::size_t i = 0; i < kEvidentWords; ++i)
      if (layout.named_unknown[i] || layout.agreeing[i])
        line += "; byte " + std::to_string(i * 8) + ": " + std::to_string(layout.agreeing[i]) + " known names, " +
                std::to_string(layout.named_unknown[i]) + " unknown named (" +
                std::to_string(layout.unknown_names[i].size()) +
                (layout.unknown_names[i].size() >= kMinAgreeing ? "+" : "") + " different)" +
                (layout.contradicted[i] ? ", contradicted" : "");
    lines.push_back(line + ")");
  }
  return lines;
}

int HandleNames::learnt_offset(pid_t pid) const {
  const auto it = layouts_.find(pid);
  return it == layouts_.end() || it->second.word < 0 ? -1 : it->second.word * 8;
}

}  // namespace cudatrace
