// decode -> pipeline -> sinks, as the session runs them, without root or BPF:
// hand-made records through the real analyses into a JSON Lines sink.
#include "cudatrace/analysis/pipeline.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cudatrace/render/output.h"
#include "cudatrace/render/output_writer.h"
#include "cudatrace/render/sink.h"
#include "json_checker.h"
#include "stream_feed.h"

namespace {

using namespace cudatrace;
using cudatrace_test::CallSpec;
using cudatrace_test::JsonParser;
using cudatrace_test::JsonValue;
using cudatrace_test::StreamFeed;

constexpr std::uint64_t kStream = 0x5010;

std::vector<JsonValue> lines(const fmt::memory_buffer& buf) {
  std::vector<JsonValue> out;
  std::string text = fmt::to_string(buf);
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = text.find('\n', start);
    JsonValue v;
    std::string error;
    EXPECT_TRUE(JsonParser::parse(text.substr(start, end - start), v, error)) << error;
    out.push_back(std::move(v));
    start = end + 1;
  }
  return out;
}

class PipelineToSinks : public ::testing::Test {
 protected:
  // As Session::on_call: the pipeline, then every sink for displayed calls.
  void put(const CallSpec& s) {
    feed_.feed(s);
    if (feed_.analysis().displayed) sink_.on_call(feed_.call(), feed_.analysis());
  }

  StreamFeed feed_;
  std::unique_ptr<Output> out_ = make_json_output();
  EndStats stats_;
  std::vector<std::uint32_t> record_ends_;
  TraceSink sink_{*out_, stats_, false, &record_ends_};
};

TEST_F(PipelineToSinks, EachCallAnalysedOnceAndWrittenWithItsAnnotations) {
  CallSpec create;
  create.symbol = "cudaStreamCreate";
  create.args = {{"pStream", kStream}};
  put(create);
  CallSpec pinned;
  pinned.symbol = "cudaMallocHost";
  pinned.args = {{"ptr", 0x4000000000}, {"size", 1 << 20}};
  put(pinned);
  CallSpec alloc;
  alloc.symbol = "cudaMalloc";
  alloc.args = {{"devPtr", 0xd000}, {"size", 4096}};
  put(alloc);
  EXPECT_EQ(feed_.analysis().device_bytes, std::optional<std::uint64_t>(4096)) << "live device memory after it";
  CallSpec from_pinned;
  from_pinned.symbol = "cudaMemcpyAsync";
  from_pinned.args = {{"dst", 0xd000}, {"src", 0x4000000000}, {"count", 4096}, {"kind", 1}, {"stream", kStream}};
  put(from_pinned);
  EXPECT_FALSE(feed_.analysis().streams->pageable_host_ptr) << "page-locked: the registry memory follows";
  CallSpec from_pageable = from_pinned;
  from_pageable.args[1].second = 0x7f0000;
  from_pageable.caller = 0x401000;
  put(from_pageable);
  ASSERT_TRUE(feed_.analysis().streams->pageable_host_ptr);
  EXPECT_EQ(*feed_.analysis().streams->pageable_host_ptr, 0x7f0000u);
  CallSpec sync;
  sync.symbol = "cudaStreamSynchronize";
  sync.args = {{"stream", kStream}};
  put(sync);

  EXPECT_EQ(stats_.calls, 6u);
  EXPECT_EQ(record_ends_.size(), 6u);
  EXPECT_EQ(record_ends_.back(), out_->buffer().size()) << "the last record ends the buffer";
  const std::vector<JsonValue> v = lines(out_->buffer());
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0].get("handle_ids")->get("pStream")->text, "s1");
  EXPECT_EQ(v[3].get("handle_ids")->get("stream")->text, "s1");
  const JsonValue* waited = v[5].get("waited_for");
  ASSERT_NE(waited, nullptr);
  EXPECT_EQ(waited->get("work")->items[0].get("copies")->get("HtoD")->get("count")->text, "2");
}

TEST(Pipeline, UndisplayedCallsFeedTheModelsButReachNoSink) {
  PipelineOptions only_streams;
  only_streams.display.group[static_cast<int>(Group::Stream)] = true;
  Pipeline pipeline(only_streams);
  StreamFeed decoder;  // decodes the records (its own pipeline's annotations are cleared)
  auto analyse = [&](const CallSpec& s) -> const CallAnalysis& {
    decoder.feed(s);
    Call& call = decoder.call();
    for (NamedValue& a : call.args) a.id = {};
    return pipeline.on_call(call);
  };
  CallSpec create;
  create.symbol = "cudaStreamCreate";
  create.args = {{"pStream", kStream}};
  EXPECT_TRUE(analyse(create).displayed);
  CallSpec alloc;
  alloc.symbol = "cudaMalloc";
  alloc.args = {{"devPtr", 0xd000}, {"size", 4096}};
  const CallAnalysis& a = analyse(alloc);
  EXPECT_FALSE(a.displayed);
  EXPECT_FALSE(a.device_bytes) << "memory accounting is for displayed calls";
  CallSpec launch;
  launch.symbol = "cudaLaunchKernel";
  launch.args = {{"func", 0xa1}, {"stream", kStream}};
  EXPECT_FALSE(analyse(launch).displayed);
  EXPECT_EQ(decoder.id_of("stream"), "s1") << "the stream model saw the undisplayed launch";
  EXPECT_TRUE(pipeline.memory().devices().empty());
}

TEST_F(PipelineToSinks, MinUsAndErrorsLeaveNvtxCallsOut) {
  TraceSink filtered(*out_, stats_, true, &record_ends_);
  CallSpec push;
  push.symbol = "cudatrace_nvtx_push";
  feed_.feed(push);
  filtered.on_call(feed_.call(), feed_.analysis());
  EXPECT_EQ(stats_.calls, 0u);
  EXPECT_EQ(out_->buffer().size(), 0u);
  EXPECT_TRUE(record_ends_.empty());
}

}  // namespace
