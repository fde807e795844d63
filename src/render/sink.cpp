#include "cudatrace/render/sink.h"

#include "cudatrace/render/output.h"
#include "cudatrace/render/output_writer.h"

namespace cudatrace {

void TraceSink::on_call(const Call& c, const CallAnalysis&) {
  if (drop_nvtx_ && c.api->layer() == Layer::Nvtx) return;
  if (c.unfinished) {
    ++stats_.unfinished;
    out_.unfinished(c);
  } else {
    ++stats_.calls;
    out_.call(c);
  }
  if (record_ends_) record_ends_->push_back(Chunk::record_end(out_.buffer().size(), c.unfinished));
}

void TraceSink::on_warning(const Call& c, const Warning& w) { out_.warning(c, w); }

void SummarySink::on_call(const Call& c, const CallAnalysis&) { stats_.unfinished += c.unfinished; }

void SummarySink::on_warning(const Call& c, const Warning& w) { out_.warning(c, w); }

}  // namespace cudatrace
