// Stream capture and graphs in the stream model (streams_graphs.cpp): what
// is captured does not run, what a graph launch runs, the summary's kernels
// in graphs, and the annotations.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cudatrace/analysis/memory.h"
#include "cudatrace/analysis/streams.h"
#include "cudatrace/analysis/summary.h"
#include "cudatrace/render/json_format.h"
#include "cudatrace/render/text.h"
#include "json_checker.h"
#include "stream_feed.h"

namespace {

using namespace cudatrace;
using cudatrace_test::CallSpec;
using cudatrace_test::JsonParser;
using cudatrace_test::JsonValue;
using cudatrace_test::StreamFeed;

constexpr std::uint64_t kS1 = 0x5010, kS2 = 0x5020;
constexpr std::uint64_t kE1 = 0xe010, kE2 = 0xe020;
constexpr std::uint64_t kK1 = 0xa1, kK2 = 0xa2, kK3 = 0xa3;
constexpr std::uint64_t kGraph = 0x6010, kExec = 0x7010;

class Graphs : public ::testing::Test {
 protected:
  void SetUp() override {
    f.feed("cudaStreamCreate", {{"pStream", kS1}});
    f.feed("cudaStreamCreate", {{"pStream", kS2}});
  }
  void launch(std::uint64_t kernel, std::uint64_t stream) {
    f.feed("cudaLaunchKernel", {{"func", kernel}, {"stream", stream}});
  }
  void begin_capture(std::uint64_t stream) { f.feed("cudaStreamBeginCapture", {{"stream", stream}, {"mode", 0}}); }
  void end_capture(std::uint64_t stream, std::uint64_t graph, std::int64_t ret = 0) {
    CallSpec s;
    s.symbol = "cudaStreamEndCapture";
    s.args = {{"stream", stream}, {"pGraph", graph}};
    s.ret = ret;
    f.feed(s);
  }
  void instantiate(std::uint64_t exec, std::uint64_t graph) {
    f.feed("cudaGraphInstantiate", {{"pGraphExec", exec}, {"graph", graph}, {"flags", 0}});
  }
  void graph_launch(std::uint64_t exec, std::uint64_t stream) {
    f.feed("cudaGraphLaunch", {{"graphExec", exec}, {"stream", stream}});
  }
  std::string sync_stream(std::uint64_t stream) {
    f.feed("cudaStreamSynchronize", {{"stream", stream}});
    return f.waited_text();
  }
  // The last call's graph annotation without its leading space; "" if none.
  std::string graph_text() {
    if (!f.call().graph) return "";
    fmt::memory_buffer b;
    append_graph_text(b, *f.call().graph);
    return std::string(b.data() + 1, b.size() - 1);
  }
  // k1 twice and k2 captured on s1, into kGraph.
  void capture_k1_k1_k2() {
    begin_capture(kS1);
    launch(kK1, kS1);
    EXPECT_TRUE(f.call().captured);
    launch(kK1, kS1);
    launch(kK2, kS1);
    end_capture(kS1, kGraph);
  }

  StreamFeed f;
};

TEST_F(Graphs, CapturedWorkIsNotWaitedFor) {
  launch(kK3, kS1);  // before the capture: runs
  capture_k1_k1_k2();
  EXPECT_EQ(graph_text(), "captured: 3 kernels (k1 x2, k2)");
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 launch (k3)");
  launch(kK3, kS1);  // after the capture: runs again
  EXPECT_FALSE(f.call().captured);
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 launch (k3)");
}

TEST_F(Graphs, EachLaunchQueuesWhatTheGraphRuns) {
  capture_k1_k1_k2();
  instantiate(kExec, kGraph);
  EXPECT_EQ(f.id_of("pGraphExec"), "g1");
  EXPECT_EQ(graph_text(), "graph g1: 3 kernels (k1 x2, k2)");
  for (int i = 0; i < 4; ++i) {
    graph_launch(kExec, kS2);
    EXPECT_EQ(f.id_of("graphExec"), "g1");
    EXPECT_EQ(graph_text(), "graph g1: 3 kernels (k1 x2, k2)");
    EXPECT_FALSE(f.call().captured);
  }
  EXPECT_EQ(sync_stream(kS2), "waited: s2: 12 launches (k1 x8, k2 x4)");
  EXPECT_EQ(sync_stream(kS1), "waited: nothing");
}

TEST_F(Graphs, AStreamJoinsACaptureByWaitingForAnEventRecordedInIt) {
  f.feed("cudaEventCreate", {{"event", kE1}});
  f.feed("cudaEventCreate", {{"event", kE2}});
  begin_capture(kS1);
  launch(kK1, kS1);
  f.feed("cudaEventRecord", {{"event", kE1}, {"stream", kS1}});
  f.feed("cudaStreamWaitEvent", {{"stream", kS2}, {"event", kE1}, {"flags", 0}});  // fork
  launch(kK2, kS2);
  EXPECT_TRUE(f.call().captured);
  CallSpec memset;
  memset.symbol = "cudaMemsetAsync";
  memset.args = {{"devPtr", 0x7f0000}, {"value", 0}, {"count", 4096}, {"stream", kS2}};
  f.feed(memset);
  f.feed("cudaEventRecord", {{"event", kE2}, {"stream", kS2}});
  f.feed("cudaStreamWaitEvent", {{"stream", kS1}, {"event", kE2}, {"flags", 0}});  // join
  EXPECT_EQ(f.call().waited, nullptr);
  launch(kK3, kS1);
  end_capture(kS1, kGraph);
  EXPECT_EQ(graph_text(), "captured: 3 kernels (k1, k2, k3), 1 memset 4.0 KiB");
  launch(kK3, kS2);  // s2 left the capture with it
  EXPECT_FALSE(f.call().captured);
  f.feed("cudaDeviceSynchronize", {});
  EXPECT_EQ(f.waited_text(), "waited: s2: 1 launch (k3)");
  // An event recorded in an ended capture no longer makes a stream join it.
  f.feed("cudaStreamWaitEvent", {{"stream", kS2}, {"event", kE1}, {"flags", 0}});
  launch(kK1, kS2);
  EXPECT_FALSE(f.call().captured);
}

TEST_F(Graphs, AnInvalidatedCaptureHasEndedAllTheSame) {
  begin_capture(kS1);
  launch(kK1, kS1);
  end_capture(kS1, 0, 901);  // cudaErrorStreamCaptureInvalidated
  launch(kK2, kS1);
  EXPECT_FALSE(f.call().captured);
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 launch (k2)");
}

TEST_F(Graphs, AGraphBuiltOutOfSightHasUnknownContents) {
  graph_launch(kExec, kS1);  // instantiated before the trace
  EXPECT_EQ(graph_text(), "graph g1: contents unknown");
  instantiate(0x7020, 0x6020);  // a graph the trace did not see captured (node APIs)
  EXPECT_EQ(graph_text(), "graph g2: contents unknown");
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 launch (graph)");
}

TEST_F(Graphs, DestroyForgetsTheGraphs) {
  capture_k1_k1_k2();
  instantiate(kExec, kGraph);
  f.feed("cudaGraphExecDestroy", {{"graphExec", kExec}});
  EXPECT_EQ(f.id_of("graphExec"), "g1");
  f.feed("cudaGraphDestroy", {{"graph", kGraph}});
  graph_launch(kExec, kS1);  // a new executable graph with the destroyed one's handle, made out of sight
  EXPECT_EQ(graph_text(), "graph g2: contents unknown");
  instantiate(0x7020, kGraph);
  EXPECT_EQ(graph_text(), "graph g3: contents unknown");
}

TEST_F(Graphs, AGraphLaunchedInACaptureBecomesPartOfIt) {
  capture_k1_k1_k2();
  instantiate(kExec, kGraph);
  begin_capture(kS2);
  graph_launch(kExec, kS2);
  EXPECT_TRUE(f.call().captured);
  launch(kK3, kS2);
  end_capture(kS2, 0x6020);
  instantiate(0x7020, 0x6020);
  EXPECT_EQ(graph_text(), "graph g2: 4 kernels (k1 x2, k2, k3)");
}

// A graph kernel node's params, as the return probe reads them: func first,
// the driver v2 struct's kern at byte 56.
std::vector<std::uint8_t> node_params(std::uint64_t func, std::uint64_t kern = 0, std::size_t bytes = 56) {
  std::vector<std::uint8_t> p(bytes);
  std::memcpy(p.data(), &func, 8);
  if (bytes >= 64) std::memcpy(p.data() + 56, &kern, 8);
  return p;
}

TEST_F(Graphs, KernelNodesSayWhatAGraphBuiltByHandRuns) {
  f.feed("cudaGraphCreate", {{"pGraph", kGraph}, {"flags", 0}});
  for (std::uint64_t kernel : {kK1, kK2, kK1}) {
    CallSpec node;
    node.symbol = "cudaGraphAddKernelNode";
    node.args = {{"pGraphNode", 0x8010 + kernel}, {"graph", kGraph}};
    node.payload = node_params(kernel);
    f.feed(node);
    EXPECT_EQ(f.call().kernel_short, kernel == kK1 ? "k1" : "k2");
  }
  CallSpec driver_node;  // CUDA_KERNEL_NODE_PARAMS_v2 naming a CUkernel: func null, kern set
  driver_node.symbol = "cuGraphAddKernelNode_v2";
  driver_node.args = {{"phGraphNode", 0x8100}, {"hGraph", kGraph}};
  driver_node.payload = node_params(0, kK3, 72);
  f.feed(driver_node);
  EXPECT_EQ(f.call().kernel_short, "k3");
  instantiate(kExec, kGraph);
  EXPECT_EQ(graph_text(), "graph g1: 4 kernels (k1 x2, k2, k3)");
  graph_launch(kExec, kS1);
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 4 launches (k1 x2, k2, k3)");
}

TEST_F(Graphs, ANodeTheModelCannotReadMakesTheGraphUnknown) {
  f.feed("cudaGraphCreate", {{"pGraph", kGraph}, {"flags", 0}});
  CallSpec node;
  node.symbol = "cudaGraphAddKernelNode";
  node.args = {{"pGraphNode", 0x8010}, {"graph", kGraph}};
  node.payload = node_params(kK1);
  f.feed(node);
  f.feed("cudaGraphAddMemsetNode", {{"pGraphNode", 0x8020}, {"graph", kGraph}});
  instantiate(kExec, kGraph);
  EXPECT_EQ(graph_text(), "graph g1: contents unknown");

  f.feed("cudaGraphCreate", {{"pGraph", 0x6020}, {"flags", 0}});
  node.args = {{"pGraphNode", 0x8030}, {"graph", 0x6020}};
  node.flags = CT_FLAG_PAYLOAD_FAULT;  // the params could not be read
  f.feed(node);
  EXPECT_TRUE(f.call().kernel.empty());
  instantiate(0x7020, 0x6020);
  EXPECT_EQ(graph_text(), "graph g2: contents unknown");

  f.feed("cudaGraphCreate", {{"pGraph", 0x6030}, {"flags", 0}});
  instantiate(0x7030, 0x6030);
  EXPECT_EQ(graph_text(), "graph g3: nothing");
}

TEST_F(Graphs, TheSummaryCountsKernelsRunInGraphs) {
  MemoryTracker memory;
  Activity activity;
  launch(kK1, kS1);
  activity.on_call(f.call(), memory);
  capture_k1_k1_k2();
  instantiate(kExec, kGraph);
  for (int i = 0; i < 3; ++i) {
    graph_launch(kExec, kS1);
    activity.on_call(f.call(), memory);
  }
  begin_capture(kS1);
  launch(kK1, kS1);
  activity.on_call(f.call(), memory);  // captured: not run
  EXPECT_EQ(activity.kernels["k1"].launches, 1u);
  EXPECT_EQ(activity.kernels["k1"].in_graphs, 6u);
  EXPECT_EQ(activity.kernels["k2"].launches, 0u);
  EXPECT_EQ(activity.kernels["k2"].in_graphs, 3u);
  EXPECT_EQ(activity.kernels.size(), 2u);  // no "graph 0x..." row for a graph whose contents are known
}

TEST_F(Graphs, JsonSaysWhatTheGraphRuns) {
  capture_k1_k1_k2();
  instantiate(kExec, kGraph);
  graph_launch(kExec, kS1);
  fmt::memory_buffer b;
  append_graph_json(b, *f.call().graph);
  const std::string text = "{" + std::string(b.data() + 1, b.size() - 1) + "}";  // without the leading comma
  JsonValue v;
  std::string error;
  ASSERT_TRUE(JsonParser::parse(text, v, error)) << error << ": " << text;
  const JsonValue* g = v.get("graph");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->get("id")->text, "g1");
  EXPECT_TRUE(g->get("known")->boolean);
  const JsonValue* runs = g->get("runs");
  EXPECT_EQ(runs->get("launches")->text, "3");
  EXPECT_EQ(runs->get("kernels")->items.at(0).get("kernel")->text, "k1");
  EXPECT_EQ(runs->get("kernels")->items.at(0).get("count")->text, "2");
  EXPECT_FALSE(runs->has("stream"));

  graph_launch(0x7020, kS1);
  b.clear();
  append_graph_json(b, *f.call().graph);
  EXPECT_EQ(std::string(b.data(), b.size()), ",\"graph\":{\"id\":\"g2\",\"known\":false,\"runs\":null}");
}

}  // namespace
