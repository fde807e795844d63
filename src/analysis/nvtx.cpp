#include "cudatrace/analysis/nvtx.h"

#include <algorithm>
#include <iterator>
#include <set>

#include "cudatrace/analysis/summary.h"

namespace cudatrace {

namespace {

std::string message_of(const Call& c) {
  const NamedValue* v = role_arg(c, Role::Message);
  if (v && std::holds_alternative<std::string_view>(v->value)) return std::string(std::get<std::string_view>(v->value));
  return "?";  // the message could not be read
}

}  // namespace

std::optional<NvtxClosed> NvtxTracker::on_call(const Call& c) {
  const std::uint64_t domain = role_value(c, Role::Object).value_or(0);
  switch (c.api->effect()) {
    case Effect::NvtxPush:
      threads_[c.tid].push_back({message_of(c), domain, 0, c.ts_ns});
      break;
    case Effect::NvtxPop: {
      auto it = threads_.find(c.tid);
      if (it == threads_.end()) break;
      std::vector<NvtxRange>& stack = it->second;
      // NVTX keeps one stack per domain: pop the innermost range of this one.
      auto open = std::find_if(stack.rbegin(), stack.rend(), [&](const NvtxRange& x) { return x.domain == domain; });
      if (open == stack.rend()) break;
      NvtxClosed closed{std::move(*open), c.pid, c.tid, c.end_ns(), false};
      stack.erase(std::next(open).base());
      if (stack.empty()) threads_.erase(it);
      return closed;
    }
    case Effect::NvtxStart:
      processes_[c.pid].push_back({message_of(c), domain, role_value(c, Role::RangeId).value_or(0), c.ts_ns});
      break;
    case Effect::NvtxEnd: {
      auto it = processes_.find(c.pid);
      if (it == processes_.end()) break;
      const std::uint64_t id = role_value(c, Role::RangeId).value_or(0);
      auto open = std::find_if(it->second.begin(), it->second.end(), [&](const NvtxRange& x) { return x.id == id; });
      if (open == it->second.end()) break;
      NvtxClosed closed{std::move(*open), c.pid, c.tid, c.end_ns(), true};
      it->second.erase(open);
      if (it->second.empty()) processes_.erase(it);
      return closed;
    }
    default:  // marks change no range
      break;
  }
  return std::nullopt;
}

void NvtxTracker::annotate(Call& c) const {
  c.nvtx = c.nvtx_process = nullptr;
  if (c.api->layer() == Layer::Nvtx) return;
  if (auto it = threads_.find(c.tid); it != threads_.end()) c.nvtx = &it->second;
  if (auto it = processes_.find(c.pid); it != processes_.end()) c.nvtx_process = &it->second;
}

void RangeSummary::on_call(const Call& c) {
  // Outermost calls only: a runtime call's nested driver calls are part of
  // it. A failed launch or copy is a call, but no work.
  if (c.unfinished || c.depth != 0 || c.api->layer() == Layer::Nvtx) return;
  const std::uint64_t launches = c.counted() && c.api->effect() == Effect::Launch;
  const std::uint64_t bytes = c.counted() && c.api->effect() == Effect::Copy ? role_bytes(c) : 0;
  if (!c.nvtx) {
    outside_.calls++;
    outside_.api_ns += c.dur_ns;
    outside_.launches += launches;
    outside_.bytes += bytes;
    return;
  }
  Stats& self = ranges_[c.nvtx->back().message];
  self.calls++;
  self.api_ns += c.dur_ns;
  self.launches += launches;
  self.bytes += bytes;
  // Each name once per call, however often it is open on the stack.
  std::set<std::string_view> seen;
  for (const NvtxRange& r : *c.nvtx) {
    if (!seen.insert(r.message).second) continue;
    Stats& s = ranges_[r.message];
    s.total_calls++;
    s.total_api_ns += c.dur_ns;
    s.total_launches += launches;
  }
}

std::vector<std::pair<const std::string*, const RangeSummary::Stats*>> RangeSummary::by_total_time() const {
  std::vector<std::pair<const std::string*, const Stats*>> rows;
  for (const auto& [name, s] : ranges_) rows.push_back({&name, &s});
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second->total_api_ns > b.second->total_api_ns; });
  return rows;
}

}  // namespace cudatrace
