#include "cudatrace/target/handle_names.h"

#include <vector>

#include "cudatrace/target/symbolizer.h"

namespace cudatrace {

namespace {

std::vector<std::uint64_t> object_words(pid_t pid, std::uint64_t handle) {
  std::vector<std::uint64_t> addrs(HandleNames::kWords);
  for (std::size_t i = 0; i < addrs.size(); ++i) addrs[i] = handle + 8 * i;
  return read_process_words(pid, addrs);
}

}  // namespace

bool HandleNames::learn(pid_t pid, std::uint64_t handle, std::string_view mangled) {
  Layout& layout = layouts_[pid];
  if (!handle || mangled.empty() || layout.tried >= kMaxTried) return false;
  ++layout.tried;
  const std::vector<std::uint64_t> words = object_words(pid, handle);
  std::string text;
  for (std::size_t i = 0; i < kWords; ++i) {
    const bool read = words[i] && read_process_string(pid, words[i], kMaxName, text);
    if (read && text == mangled)
      ++layout.agreeing[i];
    else if (read && kernel_identifier(text))
      layout.contradicted[i] = true;  // another name: this word would name kernels wrongly
    else
      ++layout.disagreeing[i];
  }
  // The word that names the most known handles, (nearly) all of them and no
  // other name: a handle whose module was unloaded before it was read may
  // have nothing there any more.
  int best = -1;
  for (std::size_t i = 0; i < kWords; ++i) {
    const std::uint32_t agree = layout.agreeing[i];
    if (agree >= kMinAgreeing && !layout.contradicted[i] && layout.disagreeing[i] * 16 <= agree &&
        (best < 0 || agree > layout.agreeing[best]))
      best = static_cast<int>(i);
  }
  const bool learnt_now = layout.word < 0 && best >= 0;
  layout.word = best;
  return learnt_now;
}

std::string HandleNames::name_of(pid_t pid, std::uint64_t handle) const {
  const auto it = layouts_.find(pid);
  if (it == layouts_.end() || it->second.word < 0 || !handle) return {};
  const std::uint64_t at = read_process_words(pid, {handle + 8 * std::uint64_t(it->second.word)})[0];
  std::string name;
  if (!at || !read_process_string(pid, at, kMaxName, name) || !kernel_identifier(name)) return {};
  return name;
}

int HandleNames::learnt_offset(pid_t pid) const {
  const auto it = layouts_.find(pid);
  return it == layouts_.end() || it->second.word < 0 ? -1 : it->second.word * 8;
}

}  // namespace cudatrace
