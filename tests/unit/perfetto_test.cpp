#include "cudatrace/render/perfetto.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "cudatrace/render/writer.h"
#include "json_checker.h"
#include "stream_feed.h"

namespace {

using namespace cudatrace;
using cudatrace_test::CallSpec;
using cudatrace_test::JsonParser;
using cudatrace_test::JsonValue;
using cudatrace_test::StreamFeed;

constexpr std::uint64_t kStart = 1'000'000;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The timeline written to `path`, opened as the driver opens it.
std::unique_ptr<Writer> open_timeline(const std::string& path, std::uint64_t start_ns, std::string& error) {
  const int fd = open_output_file(path, {}, error);
  return fd < 0 ? nullptr : make_perfetto_writer(fd, path, start_ns, error);
}

class Perfetto : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/tmp/cudatrace-perfetto-test-" + std::to_string(getpid()) + ".json";
    std::string error;
    writer_ = open_timeline(path_, kStart, error);
    ASSERT_NE(writer_, nullptr) << error;
  }
  void TearDown() override { std::remove(path_.c_str()); }

  void feed(std::string symbol, std::initializer_list<std::pair<std::string, std::uint64_t>> args,
            std::uint32_t tid = 100) {
    CallSpec s;
    s.symbol = std::move(symbol);
    s.args = args;
    s.tid = tid;
    put(s);
  }
  void put(const CallSpec& s) {
    feed_.feed(s);
    writer_->call(feed_.call(), feed_.analysis());
  }

  // Finishes the file and returns its events.
  std::vector<JsonValue> events() {
    std::string error;
    EXPECT_TRUE(writer_->finish(error)) << error;
    const std::string doc = slurp(path_);
    JsonValue root;
    EXPECT_TRUE(JsonParser::parse(doc, root, error)) << error << "\n" << doc;
    const JsonValue* ev = root.get("traceEvents");
    EXPECT_NE(ev, nullptr);
    return ev ? ev->items : std::vector<JsonValue>{};
  }

  static std::string str(const JsonValue& v, std::string_view key) {
    const JsonValue* m = v.get(key);
    return m ? m->text : "<missing>";
  }
  static std::vector<JsonValue> with(const std::vector<JsonValue>& evs, std::string_view ph,
                                     std::string_view name = "") {
    std::vector<JsonValue> out;
    for (const JsonValue& e : evs)
      if (str(e, "ph") == ph && (name.empty() || str(e, "name") == name)) out.push_back(e);
    return out;
  }

  std::string path_;
  std::unique_ptr<Writer> writer_;
  StreamFeed feed_;
};

TEST_F(Perfetto, EmptyTraceIsAValidDocument) {
  std::string error;
  ASSERT_TRUE(writer_->finish(error));
  const std::string doc = slurp(path_);
  JsonValue root;
  ASSERT_TRUE(JsonParser::parse(doc, root, error)) << error;
  EXPECT_EQ(root.get("traceEvents")->kind, JsonValue::Array);
  EXPECT_TRUE(root.get("traceEvents")->items.empty());
  EXPECT_EQ(str(root, "displayTimeUnit"), "ns");
  EXPECT_TRUE(writer_->finish(error)) << "finishing twice writes nothing more";
  EXPECT_EQ(slurp(path_), doc);
}

TEST_F(Perfetto, DestroyingTheWriterClosesTheDocument) {
  feed("cudaGetDeviceCount", {{"count", 4}});
  writer_.reset();
  EXPECT_TRUE(JsonParser::valid(slurp(path_)));
}

TEST_F(Perfetto, ApiSlicesWithNamesAndRelativeMicroseconds) {
  CallSpec s;
  s.symbol = "cudaMalloc";
  s.args = {{"devPtr", 0xd000}, {"size", 256}};
  s.ts_ns = kStart + 2'500'250;
  s.dur_ns = 1'500;
  s.tid = 101;
  put(s);
  const auto evs = events();
  const auto slices = with(evs, "X", "cudaMalloc");
  ASSERT_EQ(slices.size(), 1u);
  const JsonValue& x = slices[0];
  EXPECT_EQ(str(x, "ts"), "2500.250");
  EXPECT_EQ(str(x, "dur"), "1.500");
  EXPECT_EQ(str(x, "pid"), "100");
  EXPECT_EQ(str(x, "tid"), "101");
  EXPECT_EQ(str(x, "cat"), "runtime");
  EXPECT_EQ(str(*x.get("args"), "devPtr"), "0xd000");
  EXPECT_EQ(str(*x.get("args"), "size"), "256");
  EXPECT_EQ(str(*x.get("args"), "ret"), "cudaSuccess");
  const auto meta = with(evs, "M");
  ASSERT_EQ(meta.size(), 2u);
  EXPECT_EQ(str(meta[0], "name"), "process_name");
  EXPECT_EQ(str(*meta[0].get("args"), "name"), "app");
  EXPECT_EQ(str(meta[1], "name"), "thread_name");
  EXPECT_EQ(str(meta[1], "tid"), "101");
}

TEST_F(Perfetto, NestedDriverCallIsItsOwnSliceInsideTheRuntimeOne) {
  CallSpec drv;
  drv.symbol = "cuLaunchKernel";
  drv.args = {{"f", 0xa1}, {"hStream", 0}};
  drv.parent = "cudaLaunchKernel";
  drv.ts_ns = kStart + 2'000;
  drv.dur_ns = 1'000;
  put(drv);
  CallSpec rt;
  rt.symbol = "cudaLaunchKernel";
  rt.args = {{"func", 0xa1}, {"stream", 0}};
  rt.ts_ns = kStart + 1'000;
  rt.dur_ns = 3'000;
  put(rt);
  const auto evs = events();
  const auto d = with(evs, "X", "cuLaunchKernel"), r = with(evs, "X", "cudaLaunchKernel");
  ASSERT_EQ(d.size(), 1u);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(str(d[0], "cat"), "driver");
  EXPECT_EQ(str(d[0], "tid"), str(r[0], "tid"));
  EXPECT_EQ(str(d[0], "ts"), "2.000");
  EXPECT_EQ(str(r[0], "ts"), "1.000");
  EXPECT_EQ(str(r[0], "dur"), "3.000");
  EXPECT_EQ(str(*r[0].get("args"), "kernel"), "k1");
  EXPECT_EQ(str(*r[0].get("args"), "stream"), "default");
  // One queued slice, from the runtime call only.
  const auto queued = with(evs, "X", "k1");
  ASSERT_EQ(queued.size(), 1u);
  EXPECT_EQ(str(queued[0], "cat"), "queued");
  EXPECT_EQ(str(queued[0], "ts"), "1.000");
  EXPECT_EQ(str(*queued[0].get("args"), "api"), "cudaLaunchKernel");
}

TEST_F(Perfetto, StreamLanesAreNamedPseudoThreads) {
  feed("cudaStreamCreate", {{"pStream", 0x5010}});
  feed("cudaLaunchKernel", {{"func", 0xa1}, {"stream", 0x5010}});
  feed("cudaLaunchKernel", {{"func", 0xa2}, {"stream", 0x5010}});
  feed("cudaMemsetAsync", {{"devPtr", 0xd000}, {"count", 2048}, {"stream", 0}});
  const auto evs = events();
  std::map<std::string, std::string> lane_names;  // tid -> name
  for (const JsonValue& m : with(evs, "M", "thread_name")) lane_names[str(m, "tid")] = str(*m.get("args"), "name");
  const auto k1 = with(evs, "X", "k1"), k2 = with(evs, "X", "k2"), memset = with(evs, "X", "memset 2.0 KiB");
  ASSERT_EQ(k1.size(), 1u);
  ASSERT_EQ(k2.size(), 1u);
  ASSERT_EQ(memset.size(), 1u);
  EXPECT_EQ(str(k1[0], "tid"), str(k2[0], "tid"));
  EXPECT_NE(str(k1[0], "tid"), str(memset[0], "tid"));
  EXPECT_GE(std::stoull(str(k1[0], "tid")), kStreamLaneTidBase);
  EXPECT_EQ(lane_names[str(k1[0], "tid")], "stream s1");
  EXPECT_EQ(lane_names[str(memset[0], "tid")], "stream default");
  EXPECT_EQ(with(evs, "M", "thread_sort_index").size(), 2u) << "once per lane";
  EXPECT_NE(str(*k1[0].get("args"), "timing").find("not GPU execution"), std::string::npos);
}

TEST_F(Perfetto, AGraphReplayIsASliceListingWhatTheGraphRuns) {
  feed("cudaStreamCreate", {{"pStream", 0x5010}});
  feed("cudaStreamBeginCapture", {{"stream", 0x5010}, {"mode", 0}});
  feed("cudaLaunchKernel", {{"func", 0xa1}, {"stream", 0x5010}});
  feed("cudaLaunchKernel", {{"func", 0xa2}, {"stream", 0x5010}});
  feed("cudaStreamEndCapture", {{"stream", 0x5010}, {"pGraph", 0x6010}});
  feed("cudaGraphInstantiate", {{"pGraphExec", 0x7010}, {"graph", 0x6010}, {"flags", 0}});
  feed("cudaGraphLaunch", {{"graphExec", 0x7010}, {"stream", 0x5010}});
  const auto evs = events();
  EXPECT_TRUE(with(evs, "X", "k1").empty()) << "captured, not queued";
  const auto replay = with(evs, "X", "graph g1 (2 kernels)");
  ASSERT_EQ(replay.size(), 1u);
  EXPECT_EQ(str(replay[0], "cat"), "queued");
  EXPECT_EQ(str(*replay[0].get("args"), "graph_runs"), "g1: 2 kernels (k1, k2)");
  const auto instantiate = with(evs, "X", "cudaGraphInstantiate");
  ASSERT_EQ(instantiate.size(), 1u);
  EXPECT_EQ(str(*instantiate[0].get("args"), "graph"), "0x6010") << "the argument keeps its name";
  EXPECT_EQ(str(*instantiate[0].get("args"), "graph_runs"), "g1: 2 kernels (k1, k2)");
  const auto launch = with(evs, "X", "cudaLaunchKernel");
  ASSERT_EQ(launch.size(), 2u);
  const JsonValue* captured = launch[0].get("args")->get("captured");
  ASSERT_NE(captured, nullptr);
  EXPECT_TRUE(captured->boolean);
}

TEST_F(Perfetto, FlowFromEventRecordToItsConsumers) {
  feed("cudaStreamCreate", {{"pStream", 0x5010}});
  feed("cudaStreamCreate", {{"pStream", 0x5020}});
  feed("cudaEventCreate", {{"event", 0xe010}});
  CallSpec rec;
  rec.symbol = "cudaEventRecord";
  rec.args = {{"event", 0xe010}, {"stream", 0x5010}};
  rec.tid = 101;
  rec.ts_ns = kStart + 10'000;
  rec.dur_ns = 2'000;
  put(rec);
  CallSpec wait;
  wait.symbol = "cudaStreamWaitEvent";
  wait.args = {{"stream", 0x5020}, {"event", 0xe010}};
  wait.tid = 102;
  wait.ts_ns = kStart + 20'000;
  wait.dur_ns = 4'000;
  put(wait);
  feed("cudaEventSynchronize", {{"event", 0xe010}});
  const auto evs = events();
  const auto starts = with(evs, "s"), ends = with(evs, "f");
  ASSERT_EQ(starts.size(), 2u);
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(str(starts[0], "id"), str(ends[0], "id"));
  EXPECT_NE(str(starts[0], "id"), str(starts[1], "id"));
  EXPECT_EQ(str(starts[0], "tid"), "101");
  EXPECT_EQ(str(starts[0], "ts"), "11.000") << "the middle of the record call";
  EXPECT_EQ(str(ends[0], "tid"), "102");
  EXPECT_EQ(str(ends[0], "ts"), "22.000");
  EXPECT_EQ(str(ends[0], "bp"), "e");
  EXPECT_EQ(str(starts[0], "name"), "e1");
  EXPECT_EQ(str(starts[0], "cat"), str(ends[0], "cat"));
  const auto wait_slice = with(evs, "X", "cudaStreamWaitEvent");
  ASSERT_EQ(wait_slice.size(), 1u);
  EXPECT_EQ(str(*wait_slice[0].get("args"), "waited"), "e1 (recorded on s1) for nothing");
  EXPECT_EQ(str(*wait_slice[0].get("args"), "event"), "e1");
}

TEST_F(Perfetto, DeviceMemoryCounter) {
  feed("cudaMalloc", {{"devPtr", 0xd000}, {"size", 1000}});
  CallSpec nested;  // the driver call inside the next cudaMalloc: not counted twice
  nested.symbol = "cuMemAlloc_v2";
  nested.args = {{"dptr", 0xe000}, {"bytesize", 500}};
  nested.parent = "cudaMalloc";
  put(nested);
  feed("cudaMalloc", {{"devPtr", 0xe000}, {"size", 500}});
  feed("cudaMallocPitch", {{"devPtr", 0xf000}, {"pitch", 512}, {"width", 500}, {"height", 4}});
  CallSpec failed;
  failed.symbol = "cudaMalloc";
  failed.args = {{"devPtr", 0x1}, {"size", 99}};
  failed.ret = 2;
  put(failed);
  feed("cudaFree", {{"devPtr", 0xd000}});
  feed("cudaFree", {{"devPtr", 0x12345}});  // never seen allocated: no change
  feed("cudaMallocManaged", {{"devPtr", 0x10000}, {"size", 8}});
  const auto evs = events();
  std::vector<std::string> values;
  for (const JsonValue& c : with(evs, "C", "device memory")) {
    EXPECT_EQ(str(c, "pid"), "100");
    values.push_back(str(*c.get("args"), "bytes"));
  }
  EXPECT_EQ(values, (std::vector<std::string>{"1000", "1500", "3548", "2548", "2556"}));
}

TEST_F(Perfetto, UnfinishedCallIsABeginWithoutEnd) {
  CallSpec s;
  s.symbol = "cudaStreamSynchronize";
  s.args = {{"stream", 0}};
  s.unfinished = true;
  put(s);
  const auto evs = events();
  const auto b = with(evs, "B", "cudaStreamSynchronize");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_FALSE(b[0].has("dur"));
  EXPECT_EQ(str(*b[0].get("args"), "ret"), "unfinished");
  EXPECT_TRUE(with(evs, "E").empty());
}

TEST_F(Perfetto, HostileCommAndStringsStayValid) {
  CallSpec s;
  s.symbol = "cudaGetDeviceCount";
  s.args = {{"count", 1}};
  put(s);
  feed_.record().rec.pid = 301;  // a new process, named from this comm
  std::memcpy(feed_.record().rec.comm, "a\"b\\\n\x01", 7);
  ASSERT_TRUE(decode_call(feed_.record().rec, nullptr, feed_.call()));  // the call is a copy of the record
  writer_->call(feed_.call(), CallAnalysis{});
  const auto names = with(events(), "M", "process_name");
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(str(*names[1].get("args"), "name"), "a\"b\\\n\x01");
}

TEST(PerfettoOpen, UnwritablePathFails) {
  std::string error;
  EXPECT_EQ(open_timeline("/nonexistent-dir/x.json", 0, error), nullptr);
  EXPECT_NE(error.find("/nonexistent-dir/x.json"), std::string::npos) << error;
}

// The document's start is written at once: a full disk fails before anything is traced.
TEST(PerfettoOpen, FullDiskFailsAtOnce) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "/dev/full not available";
  std::string error;
  EXPECT_EQ(open_timeline("/dev/full", 0, error), nullptr);
  EXPECT_EQ(error, "writing /dev/full: No space left on device");
}

// A write failing half way (here the file size limit, as a disk filling up
// would) leaves an empty file, not half a JSON document, and says so.
TEST(PerfettoOpen, WriteFailingHalfWayLeavesTheFileEmpty) {
  const std::string path = "/tmp/cudatrace-perfetto-limit-" + std::to_string(getpid()) + ".json";
  const pid_t child = fork();
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG
    const rlimit limit{200000, 200000};
    setrlimit(RLIMIT_FSIZE, &limit);
    std::string error;
    auto w = open_timeline(path, 0, error);
    if (!w) _exit(2);
    StreamFeed feed;
    for (int i = 0; i < 20000; ++i) {
      feed.feed(CallSpec{"cudaFree", {{"devPtr", 0xd000}}});
      w->call(feed.call(), feed.analysis());
    }
    _exit(!w->finish(error) &&
                  error == "writing " + path + ": File too large; the timeline is incomplete, so the file was emptied"
              ? 0
              : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(slurp(path), "");
  std::remove(path.c_str());
}

}  // namespace
