// The facet analyses' kinds (facet_analysis.h).
#include "cudatrace/analysis/facet_analysis.h"

namespace cudatrace {

// Each made in its analysis's file.
std::unique_ptr<FacetAnalysis> make_py_sites(const PipelineOptions& opts);
std::unique_ptr<FacetAnalysis> make_span_summary(const PipelineOptions& opts);
std::unique_ptr<FacetAnalysis> make_process_resources(const PipelineOptions& opts);

const std::vector<FacetAnalysisKind>& facet_analysis_kinds() {
  static const std::vector<FacetAnalysisKind> all = {
      {"py_sites", make_py_sites}, {"processes", make_process_resources}, {"spans", make_span_summary}};
  return all;
}

}  // namespace cudatrace
