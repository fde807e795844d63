#include "cudatrace/analysis/pipeline.h"

#include <limits>

namespace cudatrace {

Pipeline::Pipeline(PipelineOptions opts) : opts_(std::move(opts)) {
  if (opts_.nvtx) nvtx_ = std::make_unique<NvtxTracker>();
  if (opts_.by_range) by_range_ = std::make_unique<RangeSummary>();
  if (opts_.gpu_time) gpu_time_ = std::make_unique<GpuTimeTracker>();
  for (const Facet* f : call_facets())
    for (std::string_view name : f->analyses())
      for (const FacetAnalysisKind& kind : facet_analysis_kinds())
        if (kind.name == name)
          if (std::unique_ptr<FacetAnalysis> a = kind.make(opts_)) facet_analyses_.push_back(std::move(a));
}

std::uint64_t Pipeline::live_device_bytes(std::uint32_t pid) const {
  std::uint64_t total = 0;
  for (auto it = memory_.devices().lower_bound({pid, std::numeric_limits<int>::min()});
       it != memory_.devices().end() && it->first.first == pid; ++it)
    total += it->second.live_bytes + it->second.managed_live_bytes;
  return total;
}

const CallAnalysis& Pipeline::on_call(Call& c) {
  analysis_.closed_range.reset();
  analysis_.device_bytes.reset();
  analysis_.streams = &streams_.on_call(c);
  for (const auto& a : facet_analyses_) a->on_any_call(c);
  if (gpu_time_) analysis_.gpu_windows = &gpu_time_->on_call(c, *analysis_.streams);
  if (nvtx_) {
    nvtx_->annotate(c);
    if (c.api->layer() == Layer::Nvtx) analysis_.closed_range = nvtx_->on_call(c);
  }
  c.nccl = nccl_.on_call(c);
  analysis_.first_failed_launch = launch_failures_.first_of_its_cause(c);
  analysis_.displayed = opts_.display.wants(*c.api);
  if (!analysis_.displayed) {
    // A later copy is judged by every allocation, also those -f hides (report -f launch).
    memory_.follow_page_locked(c);
    return analysis_;
  }
  // After the stream model: a copy is judged by the page-locked memory
  // before it (no call both copies and changes page-locked memory).
  const Effect effect = c.api->effect();
  const bool changes_device_memory =
      c.counted() && (effect == Effect::AllocDevice || effect == Effect::AllocManaged || effect == Effect::Free);
  const std::uint64_t before = changes_device_memory ? live_device_bytes(c.pid) : 0;
  memory_.on_call(c);
  if (changes_device_memory) {
    const std::uint64_t after = live_device_bytes(c.pid);
    if (effect != Effect::Free || after != before) analysis_.device_bytes = after;  // a free of what was seen
  }
  if (by_range_) by_range_->on_call(c);
  if (opts_.tables) {
    run_.on_call(c, memory_);
    window_.on_call(c, memory_);
  }
  for (const auto& a : facet_analyses_) a->on_displayed_call(c, memory_);
  return analysis_;
}

void Pipeline::on_activity(const Call& c, const ct_activity& counted) {
  run_.on_calls(c, memory_, counted);
  window_.on_calls(c, memory_, counted);
}

void Pipeline::forget_process(std::uint32_t pid) {
  streams_.forget_process(pid);
  if (gpu_time_) gpu_time_->forget_process(pid);
  memory_.forget_page_locked(pid);
  launch_failures_.forget_process(pid);
  for (const auto& a : facet_analyses_) a->forget_process(pid);
}

void Pipeline::forget_thread(std::uint32_t pid, std::uint32_t tid) { streams_.forget_thread(pid, tid); }

}  // namespace cudatrace
