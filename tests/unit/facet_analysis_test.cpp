// The facets' analyses reach the pipeline and the summary writers through
// the facets (analysis/facet_analysis.h, render/summary_parts.h).
#include <gtest/gtest.h>

#include <set>
#include <string_view>

#include "cudatrace/analysis/facet_analysis.h"
#include "cudatrace/analysis/memory.h"
#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/analysis/span_summary.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/otel.h"
#include "cudatrace/render/summary_parts.h"

namespace cudatrace {
namespace {

// Every analysis a facet names exists once, and its part has writers under its name.
TEST(FacetAnalysis, EveryNamedAnalysisHasAKindAndWriters) {
  std::set<std::string_view> kinds;
  for (const FacetAnalysisKind& k : facet_analysis_kinds()) {
    EXPECT_TRUE(kinds.insert(k.name).second) << k.name << " twice";
    EXPECT_EQ(summary_part_writer(k.name).name, k.name);
  }
  std::size_t named = 0;
  for (const Facet* f : call_facets())
    for (std::string_view name : f->analyses()) {
      EXPECT_EQ(kinds.count(name), 1u) << name;
      ++named;
    }
  EXPECT_EQ(named, kinds.size()) << "an analysis no facet names is never made";
}

// The pipeline makes the facets' analyses its options ask for.
TEST(FacetAnalysis, MadeAsThePipelinesOptionsAsk) {
  PipelineOptions all;
  all.tables = all.by_span = true;
  EXPECT_EQ(Pipeline(all).facet_analyses().size(), facet_analysis_kinds().size())
      << "with --summary and --by-span: every analysis";

  PipelineOptions trace;
  ASSERT_EQ(Pipeline(trace).facet_analyses().size(), 1u);
  MemoryTracker memory;
  EXPECT_EQ(Pipeline(trace).facet_analyses()[0]->part({memory, true, 0}), nullptr)
      << "a trace keeps the processes' resources, and has none before a call";
}

// The processes' resources: each publication copied once, an unpublished context (a saved trace's process
// without a "process" line) not at all, and a process forgotten publishes afresh.
TEST(FacetAnalysis, ProcessResourcesKeepEachPublicationOnce) {
  ProcessResources resources;
  ProcessContext first, unpublished;
  first.resource = {{"service.name", "checkout"}};
  first.generation = next_context_generation();
  unpublished.published = false;
  Call c;
  c.pid = 7;
  call_span(c).process = &unpublished;
  resources.on_any_call(c);
  MemoryTracker memory;
  EXPECT_EQ(resources.part({memory, false, 0}), nullptr);
  call_span(c).process = &first;
  resources.on_any_call(c);
  first.resource = {{"service.name", "changed in place"}};  // the same publication: not read again
  resources.on_any_call(c);
  ASSERT_NE(resources.part({memory, false, 0}), nullptr);
  EXPECT_EQ(resources.processes().at(7)[0].second, "checkout");
  first.generation = next_context_generation();  // published again
  resources.on_any_call(c);
  EXPECT_EQ(resources.processes().at(7)[0].second, "changed in place");
  EXPECT_EQ(resources.unlisted(), 0u);
}

}  // namespace
}  // namespace cudatrace
