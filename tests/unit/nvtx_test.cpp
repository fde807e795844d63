// NVTX range stacks (nvtx.h) from hand-built records of the nvtx layer.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cudatrace/analysis/nvtx.h"
#include "cudatrace/render/json_format.h"
#include "cudatrace/render/text.h"

#include "record_builder.h"

namespace {

using namespace cudatrace;
using namespace cudatrace_test;

// Feeds records to a tracker and annotates the CUDA calls, as the driver does.
struct Feed {
  NvtxTracker tracker;
  RangeSummary summary;
  RecBuf buf;
  Call call;
  std::vector<NvtxClosed> closed;

  // An NVTX call on thread `tid` of process 100.
  void nvtx(std::string_view symbol, std::uint32_t tid, const char* message, std::uint64_t domain = 0,
            std::uint64_t id = 0, std::uint64_t ts = 1000) {
    init_rec(buf, symbol, 100);
    buf.rec.tid = tid;
    buf.rec.ts_ns = ts;
    buf.rec.dur_ns = 0;
    const Api* api = api_by_symbol(symbol);
    ASSERT_NE(api, nullptr);
    const bool has_message = api->payload_index >= 0;
    if (has_message) set_string_payload(buf, message);
    // Arguments in table order: message (pointer), domain, id; or domain; or id.
    int slot = 0;
    if (has_message) buf.rec.args[slot++] = 0x1000;
    if (symbol != "nvtxRangeEnd") buf.rec.args[slot++] = domain;
    if (symbol == "nvtxRangeStart" || symbol == "nvtxRangeEnd") buf.rec.args[slot++] = id;
    ASSERT_TRUE(decode_call(buf.rec, nullptr, call));
    tracker.annotate(call);
    EXPECT_EQ(call.nvtx, nullptr);  // NVTX calls carry no stack of their own
    if (auto c = tracker.on_call(call)) closed.push_back(*c);
  }

  // A cudaMalloc (or `symbol`) on thread `tid`: returns its thread stack.
  std::vector<std::string> cuda(std::uint32_t tid, std::string_view symbol = "cudaMalloc", std::uint8_t depth = 0,
                                std::int64_t ret = 0) {
    init_rec(buf, symbol, 100);
    buf.rec.tid = tid;
    buf.rec.depth = depth;
    buf.rec.ret = ret;
    EXPECT_TRUE(decode_call(buf.rec, nullptr, call));
    tracker.annotate(call);
    summary.on_call(call);
    std::vector<std::string> out;
    if (call.nvtx)
      for (const NvtxRange& r : *call.nvtx) out.push_back(r.message);
    return out;
  }
  std::vector<std::string> process_ranges() const {
    std::vector<std::string> out;
    if (call.nvtx_process)
      for (const NvtxRange& r : *call.nvtx_process) out.push_back(r.message);
    return out;
  }
};

using S = std::vector<std::string>;

TEST(NvtxTracker, PushAndPopPerThread) {
  Feed f;
  EXPECT_EQ(f.cuda(1), S{});
  EXPECT_EQ(f.call.nvtx, nullptr);
  f.nvtx("nvtxRangePush", 1, "step 1");
  f.nvtx("nvtxRangePush", 1, "forward");
  f.nvtx("nvtxRangePush", 2, "worker");
  EXPECT_EQ(f.cuda(1), (S{"step 1", "forward"}));
  EXPECT_EQ(f.cuda(2), (S{"worker"}));
  f.nvtx("nvtxRangePop", 1, "", 0, 0, 5000);
  EXPECT_EQ(f.cuda(1), (S{"step 1"}));
  ASSERT_EQ(f.closed.size(), 1u);
  EXPECT_EQ(f.closed[0].range.message, "forward");
  EXPECT_EQ(f.closed[0].end_ns, 5000u);
  EXPECT_FALSE(f.closed[0].process_wide);
  f.nvtx("nvtxRangePop", 1, "");
  EXPECT_EQ(f.cuda(1), S{});
  EXPECT_EQ(f.call.nvtx, nullptr);  // an empty stack is no stack
}

TEST(NvtxTracker, ADomainsPopClosesThatDomainsInnermostRange) {
  Feed f;
  f.nvtx("nvtxRangePush", 1, "outer");
  f.nvtx("nvtxRangePush", 1, "in domain", 0xabc);
  f.nvtx("nvtxRangePush", 1, "inner");
  f.nvtx("nvtxRangePop", 1, "", 0xabc);
  EXPECT_EQ(f.cuda(1), (S{"outer", "inner"}));
  f.nvtx("nvtxRangePop", 1, "", 0xdef);  // nothing open in that domain
  EXPECT_EQ(f.cuda(1), (S{"outer", "inner"}));
}

TEST(NvtxTracker, APopWithNothingOpenClosesNothing) {
  // Its push came before tracing started (-p).
  Feed f;
  f.nvtx("nvtxRangePop", 1, "");
  EXPECT_TRUE(f.closed.empty());
  EXPECT_EQ(f.cuda(1), S{});
}

TEST(NvtxTracker, StartEndRangesArePerProcessAndEndOnAnyThread) {
  Feed f;
  f.nvtx("nvtxRangeStart", 1, "load", 0, 7);
  f.nvtx("nvtxRangeStart", 1, "save", 0, 8);
  EXPECT_EQ(f.cuda(2), S{});
  EXPECT_EQ(f.process_ranges(), (S{"load", "save"}));
  f.nvtx("nvtxRangeEnd", 2, "", 0, 7);
  f.cuda(1);
  EXPECT_EQ(f.process_ranges(), (S{"save"}));
  ASSERT_EQ(f.closed.size(), 1u);
  EXPECT_TRUE(f.closed[0].process_wide);
  EXPECT_EQ(f.closed[0].range.id, 7u);
  f.nvtx("nvtxRangeEnd", 2, "", 0, 99);  // unknown id
  EXPECT_EQ(f.closed.size(), 1u);
}

TEST(NvtxTracker, MarksChangeNothing) {
  Feed f;
  f.nvtx("nvtxRangePush", 1, "a");
  f.nvtx("nvtxMark", 1, "checkpoint");
  EXPECT_EQ(f.cuda(1), (S{"a"}));
  EXPECT_TRUE(f.closed.empty());
}

TEST(NvtxOutput, JsonAndText) {
  Feed f;
  f.nvtx("nvtxRangePush", 1, "step \"1\"");
  f.nvtx("nvtxRangePush", 1, "aten::linear");
  f.nvtx("nvtxRangeStart", 1, "load", 0, 3);
  f.cuda(1);
  fmt::memory_buffer json, text;
  append_nvtx_json(json, f.call);
  append_nvtx_text(text, f.call);
  EXPECT_EQ(fmt::to_string(json), R"(,"nvtx":["step \"1\"","aten::linear"],"nvtx_process":["load"])");
  EXPECT_EQ(fmt::to_string(text), R"( nvtx[2]="aten::linear")");
  f.cuda(2);
  json.clear();
  text.clear();
  append_nvtx_json(json, f.call);
  append_nvtx_text(text, f.call);
  EXPECT_EQ(fmt::to_string(json), R"(,"nvtx_process":["load"])");
  EXPECT_EQ(fmt::to_string(text), "");
}

// The JSON summary's --by-range line (it follows the summary line).
std::string ranges_line(const RangeSummary& ranges) {
  SummarySnapshot s;
  s.final = true;
  s.by_range = &ranges;
  fmt::memory_buffer out;
  append_summary_json(out, s);
  const std::string both = fmt::to_string(out);
  return both.substr(both.find('\n') + 1);
}

TEST(RangeSummary, SelfTotalAndOutside) {
  Feed f;
  f.cuda(1);  // outside
  f.nvtx("nvtxRangePush", 1, "step");
  f.cuda(1, "cudaLaunchKernel");
  f.cuda(1, "cuLaunchKernel", 1);  // nested: part of the launch above
  f.nvtx("nvtxRangePush", 1, "step");  // the same name twice on the stack
  f.cuda(1, "cudaLaunchKernel");
  EXPECT_EQ(ranges_line(f.summary),
            "{\"type\":\"nvtx_ranges\",\"ranges\":[{\"name\":\"step\",\"calls\":2,\"api_ns\":5000,\"launches\":2,"
            "\"bytes\":0,\"total_calls\":2,\"total_api_ns\":5000,\"total_launches\":2}],"
            "\"outside\":{\"calls\":1,\"api_ns\":2500,\"launches\":0,\"bytes\":0}}\n");
}

// A launch that failed is a call of the range, not a launch of it.
TEST(RangeSummary, FailedLaunchesAreCallsNotLaunches) {
  Feed f;
  f.nvtx("nvtxRangePush", 1, "step");
  f.cuda(1, "cudaLaunchKernel", 0, 209);  // cudaErrorNoKernelImageForDevice
  f.cuda(1, "cudaLaunchKernel");
  f.cuda(1, "cudaMalloc");
  f.cuda(1, "cuMemAlloc_v2", 1);  // nested: part of the cudaMalloc
  EXPECT_EQ(ranges_line(f.summary),
            "{\"type\":\"nvtx_ranges\",\"ranges\":[{\"name\":\"step\",\"calls\":3,\"api_ns\":7500,\"launches\":1,"
            "\"bytes\":0,\"total_calls\":3,\"total_api_ns\":7500,\"total_launches\":1}],"
            "\"outside\":{\"calls\":0,\"api_ns\":0,\"launches\":0,\"bytes\":0}}\n");
}

}  // namespace
