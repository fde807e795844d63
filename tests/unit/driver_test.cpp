// source -> driver -> pipeline -> writers, as cudatrace runs them, without
// root or BPF: hand-made calls from a fake source through the real driver,
// analyses and writers into an -o file.
#include "cudatrace/decode/py_stack.h"
#include "cudatrace/drive/driver.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "json_checker.h"
#include "stream_feed.h"

namespace {

using namespace cudatrace;
using cudatrace_test::CallSpec;
using cudatrace_test::JsonParser;
using cudatrace_test::JsonValue;
using cudatrace_test::StreamFeed;

constexpr std::uint64_t kStream = 0x5010;
constexpr std::uint64_t kStart = 1'000'000'000;

// Feeds its calls in one go, decoded as a recorder decodes them.
class FakeSource final : public Source {
 public:
  // `lost`: the records it says were lost in the ring buffer.
  FakeSource(std::vector<CallSpec> calls, std::uint64_t lost) : calls_(std::move(calls)), lost_(lost) {}

  int start(const RecordsNeeded& needs) override {
    needs_ = needs;
    return kExitOk;
  }
  std::uint64_t start_ns() const override { return kStart; }
  bool private_trace() const override { return false; }
  int release() override { return kExitOk; }
  bool feed(CallConsumer& to, int) override {
    for (CallSpec s : calls_) {
      s.ts_ns = now_ += 1000;
      Call& c = decoder_.decode(s);
      if (dress) dress(c);
      ++stats_[c.api->id].calls;
      to.on_call(c);
    }
    return false;
  }
  void finish(CallConsumer&) override {}
  std::uint64_t now_ns() const override { return now_; }
  std::vector<ct_api_stats> api_stats() override { return stats_; }
  LossCounts losses() override {
    LossCounts lost;
    lost.ring_buffer = lost_;
    return lost;
  }
  SiteNames site_names() override { return {}; }
  std::string location(std::uint32_t, std::uint64_t addr) override { return fmt::format("app+{:#x}", addr); }
  int exit_status() const override { return 3; }
  const RecordsNeeded& needs() const { return needs_; }
  std::function<void(Call&)> dress;  // what each call is given after its decoding (its facets)

 private:
  std::vector<CallSpec> calls_;
  std::uint64_t lost_;
  StreamFeed decoder_;
  std::vector<ct_api_stats> stats_ = std::vector<ct_api_stats>(apis().size());
  std::uint64_t now_ = kStart;
  RecordsNeeded needs_;
};

struct Drove {
  int status;
  std::string out;
  RecordsNeeded needs;  // what the driver asked the source to record
};

// `display`: the APIs shown (every one unless given); `lost`: records the source lost;
// `dress`: FakeSource::dress.
Drove drive(Options opts, const std::vector<CallSpec>& calls, std::optional<Selection> display = std::nullopt,
            std::uint64_t lost = 2, std::function<void(Call&)> dress = nullptr) {
  char path[] = "/tmp/cudatrace-driver-test-XXXXXX";
  const int fd = mkstemp(path);
  close(fd);
  opts.output_path = path;
  opts.display = display ? *display : StreamFeed::all_apis().display;
  FakeSource source(calls, lost);
  source.dress = std::move(dress);
  Drove r;
  {
    Driver driver(opts, source);
    r.status = driver.run();
  }
  r.needs = source.needs();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  r.out = text.str();
  std::remove(path);
  return r;
}

std::vector<JsonValue> lines(const std::string& text) {
  std::vector<JsonValue> out;
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

std::vector<CallSpec> stream_calls() {
  std::vector<CallSpec> calls(7);
  calls[0].symbol = "cudaStreamCreate";
  calls[0].args = {{"pStream", kStream}};
  calls[1].symbol = "cudaMallocHost";
  calls[1].args = {{"ptr", 0x4000000000}, {"size", 1 << 20}};
  calls[2].symbol = "cudaMalloc";
  calls[2].args = {{"devPtr", 0xd000}, {"size", 4096}};
  calls[3].symbol = "cudaMemcpyAsync";
  calls[3].args = {{"dst", 0xd000}, {"src", 0x4000000000}, {"count", 4096}, {"kind", 1}, {"stream", kStream}};
  calls[4] = calls[3];  // from pageable memory
  calls[4].args[1].second = 0x7f0000;
  calls[4].caller = 0x401000;
  calls[5].symbol = "cudaStreamSynchronize";
  calls[5].args = {{"stream", kStream}};
  calls[6].symbol = "nvtxRangePush";
  return calls;
}

TEST(Driver, EachCallAnalysedOnceAndWrittenWithItsAnnotations) {
  Options opts;
  opts.json = true;
  const Drove r = drive(opts, stream_calls());
  EXPECT_EQ(r.status, 3) << "the source's status";
  const std::vector<JsonValue> v = lines(r.out);
  ASSERT_EQ(v.size(), 9u) << r.out;  // 7 calls, a warning, the end
  EXPECT_EQ(v[0].get("handle_ids")->get("pStream")->text, "s1");
  EXPECT_EQ(v[3].get("handle_ids")->get("stream")->text, "s1");
  EXPECT_EQ(v[4].get("type")->text, "warning") << "a pageable copy's warning comes before it";
  EXPECT_EQ(v[4].get("location")->text, "app+0x401000") << "where the source says the call site is";
  const JsonValue* waited = v[6].get("waited_for");
  ASSERT_NE(waited, nullptr);
  EXPECT_EQ(waited->get("work")->items[0].get("copies")->get("HtoD")->get("count")->text, "2");
  const JsonValue& end = v[8];
  EXPECT_EQ(end.get("type")->text, "end");
  EXPECT_EQ(end.get("calls")->text, "7");
  EXPECT_EQ(end.get("lost")->text, "2") << "the source's losses";
}

// A warning about a call says where it was made as each facet the call
// carries says it: a Python call's line after the program's call site.
TEST(Driver, AWarningNamesTheCallSiteAsTheCallsFacetsSayIt) {
  Options opts;
  opts.json = true;
  const auto python_line = [](Call& c) { py_stack(c) = {PyFrame{"step", "/srv/train.py", 12}}; };
  const std::vector<JsonValue> v = lines(drive(opts, stream_calls(), std::nullopt, 2, python_line).out);
  ASSERT_EQ(v.size(), 9u);
  ASSERT_EQ(v[4].get("type")->text, "warning");
  // The location is the native site, which `report` finds again by the
  // caller; the message adds the facets' sites.
  EXPECT_EQ(v[4].get("location")->text, "app+0x401000");
  EXPECT_NE(v[4].get("message")->text.find("at app+0x401000 (python " +
                                            py_frame_text(PyFrame{"step", "/srv/train.py", 12}) + ")"),
            std::string::npos)
      << v[4].get("message")->text;
}

// Copies from pageable memory warn once per site: the native call site and
// where the call's facets say it was made (each Python line its own).
TEST(Driver, APageableCopyWarnsOncePerSiteItsFacetsSay) {
  Options opts;
  opts.json = true;
  std::vector<CallSpec> calls = stream_calls();
  calls.insert(calls.begin() + 5, 2, calls[4]);  // three pageable copies from one native caller
  const auto warnings = [&](std::function<void(Call&)> dress) {
    std::size_t n = 0;
    for (const JsonValue& line : lines(drive(opts, calls, std::nullopt, 2, std::move(dress)).out))
      n += line.get("type")->text == "warning";
    return n;
  };
  EXPECT_EQ(warnings(nullptr), 1u) << "one native call site";
  EXPECT_EQ(warnings([](Call& c) { py_stack(c) = {PyFrame{"step", "/srv/train.py", 12}}; }), 1u)
      << "one Python line";
  int line = 0;
  EXPECT_EQ(warnings([&line](Call& c) { py_stack(c) = {PyFrame{"step", "/srv/train.py", ++line}}; }), 3u)
      << "a Python line each";
}

TEST(Driver, MinUsAndErrorsLeaveNvtxCallsOut) {
  Options opts;
  opts.json = true;
  opts.min_us = 1;
  const Drove r = drive(opts, stream_calls());
  const std::vector<JsonValue> v = lines(r.out);
  ASSERT_EQ(v.size(), 8u) << r.out;
  EXPECT_EQ(v.back().get("calls")->text, "6");
  EXPECT_EQ(r.out.find("nvtxRangePush"), std::string::npos);
  // The kernel dropped calls the stream model would have needed: no wait is claimed.
  EXPECT_EQ(r.out.find("waited_for"), std::string::npos) << r.out;
}

TEST(Driver, SummaryModeWritesTheReportNotTheCalls) {
  Options opts;
  opts.summary = opts.summary_tables = true;
  const Drove r = drive(opts, stream_calls());
  EXPECT_EQ(r.out.find("cudaStreamCreate  "), std::string::npos) << "no call lines";
  EXPECT_NE(r.out.find("cudatrace summary:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CUDA API summary"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cudaMemcpyAsync"), std::string::npos) << "the source's per-API counts: " << r.out;
}

TEST(Driver, TextTraceStartsWithItsHeader) {
  const Drove r = drive(Options{}, stream_calls());
  EXPECT_EQ(r.out.rfind("TIME(s)      COMM", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("cudaStreamSynchronize"), std::string::npos);
  EXPECT_NE(r.out.find("waited: s1: 2 copies HtoD 8.0 KiB"), std::string::npos) << r.out;
}

// The driver, not the record stage, says what BPF must send: from the
// analyses and writers it builds.
TEST(Driver, AsksForTheRecordsItsAnalysesAndWritersRead) {
  using Calls = RecordsNeeded::Calls;
  using Stacks = RecordsNeeded::Stacks;
  Options trace;
  RecordsNeeded n = drive(trace, {}).needs;
  EXPECT_EQ(n.calls, Calls::Every);
  EXPECT_FALSE(n.counted_activity);
  EXPECT_EQ(n.stacks, Stacks::None);
  EXPECT_FALSE(n.trace_on_stdout) << "-o takes the trace off standard output";

  Options summary;
  summary.summary = summary.summary_tables = true;
  n = drive(summary, {}).needs;
  EXPECT_EQ(n.calls, Calls::Summary);
  EXPECT_FALSE(n.every_record);
  EXPECT_TRUE(n.counted_activity) << "nothing reads each launch and copy";

  Options timeline = summary;
  char path[] = "/tmp/cudatrace-driver-test-XXXXXX";
  close(mkstemp(path));
  timeline.perfetto_path = path;
  n = drive(timeline, {}).needs;
  std::remove(path);
  EXPECT_EQ(n.calls, Calls::Summary);
  EXPECT_FALSE(n.counted_activity) << "a timeline draws each launch and copy";

  Options gpu_time = summary;
  gpu_time.gpu_time = true;
  n = drive(gpu_time, {}).needs;
  EXPECT_TRUE(n.every_record);
  EXPECT_FALSE(n.counted_activity);

  Options stacks = trace;
  set_facet(stacks, stack_facet(), true);
  EXPECT_EQ(drive(stacks, {}).needs.stacks, Stacks::Frames) << "a trace prints each call's stack";
  Options leak_stacks = summary;
  set_facet(leak_stacks, stack_facet(), true);
  EXPECT_EQ(drive(leak_stacks, {}).needs.stacks, Stacks::Addresses) << "a summary names only the stacks it reports";
}

// Each facet the command line turns on is asked of the record stage, as the
// facet says (decode/facet.h), where calls are recorded at all.
TEST(Driver, AsksForTheFacetsTurnedOn) {
  for (const Facet* f : call_facets()) {
    const FacetOption option = f->option();
    SCOPED_TRACE(option.flag);
    EXPECT_NE(f->on(Options{}), option.sets) << "the flag changes what is on by default";
    Options off;
    set_facet(off, *f, false);
    EXPECT_FALSE(f->on(off));
    EXPECT_FALSE(drive(off, {}).needs.captures(*f));

    Options trace;
    set_facet(trace, *f, true);
    ASSERT_TRUE(f->on(trace));
    const RecordsNeeded n = drive(trace, {}).needs;
    EXPECT_TRUE(n.captures(*f));
    EXPECT_EQ(std::count(n.facets.begin(), n.facets.end(), f), 1);

    Options summary = trace;
    summary.summary = summary.summary_tables = true;
    EXPECT_EQ(drive(summary, {}).needs.every_record, f->capture().every_record)
        << "a summary has every record when the facet's analyses read each call";

    Options exporter = trace;
    exporter.prometheus_address = "127.0.0.1:0";
    EXPECT_TRUE(drive(exporter, {}).needs.facets.empty()) << "the exporter's records carry no context";
  }
}

// Each facet has its own option, Options bit and BPF setting: none turns on another's.
TEST(Driver, FacetsOwnTheirOptionAndSetting) {
  const std::vector<const Facet*>& facets = call_facets();
  for (std::size_t i = 0; i < facets.size(); ++i)
    for (std::size_t j = i + 1; j < facets.size(); ++j) {
      EXPECT_STRNE(facets[i]->option().flag, facets[j]->option().flag);
      EXPECT_NE(facets[i]->slot(), facets[j]->slot());
      EXPECT_LT(facets[j]->slot(), kMaxFacets);
      EXPECT_NE(facets[i]->capture().setting, facets[j]->capture().setting);
    }
}

// Selection as apply_selection (cli/main.cpp) makes it for -f GROUPS: the groups shown, at every layer.
Selection only_groups(std::initializer_list<Group> groups) {
  Selection s;
  for (Group g : groups) s.group[static_cast<int>(g)] = true;
  return s;
}

TEST(Driver, AnEmptyTraceSaysWhichSelectionMatchedNothing) {
  Options opts;
  opts.json = true;
  const Drove json = drive(opts, stream_calls(), only_groups({Group::Launch}), 0);
  const JsonValue end = lines(json.out).back();
  EXPECT_EQ(end.get("calls")->text, "0");
  ASSERT_NE(end.get("empty_because"), nullptr) << json.out;
  EXPECT_EQ(end.get("empty_because")->text, "this selection (-f launch) matched no call the program made");

  opts.json = false;
  opts.errors_only = true;
  Selection runtime_only = only_groups({Group::Launch, Group::Graph});
  runtime_only.layer[static_cast<int>(Layer::Driver)] = runtime_only.layer[static_cast<int>(Layer::Nccl)] = false;
  testing::internal::CaptureStderr();
  drive(opts, stream_calls(), runtime_only, 0);
  EXPECT_NE(testing::internal::GetCapturedStderr().find(
                "cudatrace: 0 calls traced, 0 lost, 0 unfinished: this selection (-f launch,graph --layer runtime "
                "--errors) matched no call the program made\n"),
            std::string::npos);
}

TEST(Driver, AnEmptyTraceWithoutASelectionSaysSo) {
  Options opts;
  opts.json = true;
  Selection defaults;
  for (int g = 0; g < kGroupCount; ++g) defaults.group[g] = group_on_by_default(static_cast<Group>(g));
  const Drove r = drive(opts, {}, defaults, 0);
  const std::vector<JsonValue> v = lines(r.out);
  ASSERT_EQ(v.size(), 1u) << r.out;
  ASSERT_NE(v[0].get("empty_because"), nullptr) << r.out;
  EXPECT_EQ(v[0].get("empty_because")->text,
            "the program made no call of the groups shown by default (-f all shows every group)");
  // A trace with calls has no such field, nor one whose calls were lost: the loss says why.
  EXPECT_EQ(lines(drive(opts, stream_calls(), std::nullopt, 0).out).back().get("empty_because"), nullptr);
  EXPECT_EQ(lines(drive(opts, {}, defaults, 2).out).back().get("empty_because"), nullptr);
}

TEST(Pipeline, UndisplayedCallsFeedTheModelsButReachNoWriter) {
  PipelineOptions only_streams;
  only_streams.display.group[static_cast<int>(Group::Stream)] = true;
  Pipeline pipeline(only_streams);
  StreamFeed decoder;
  auto analyse = [&](const CallSpec& s) -> const CallAnalysis& { return pipeline.on_call(decoder.decode(s)); };
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

// report -f launch of a trace with the allocation: no pageable warning for
// page-locked memory whose allocation the selection does not show.
TEST(Pipeline, PageLockedMemoryIsFollowedThroughCallsNotShown) {
  Pipeline pipeline(PipelineOptions{only_groups({Group::Launch})});
  StreamFeed decoder;
  const std::vector<CallSpec> calls = stream_calls();
  for (std::size_t i = 0; i < 3; ++i) EXPECT_FALSE(pipeline.on_call(decoder.decode(calls[i])).displayed);
  const CallAnalysis& pinned_copy = pipeline.on_call(decoder.decode(calls[3]));
  EXPECT_FALSE(pinned_copy.streams->pageable_host_ptr) << "from cudaMallocHost's memory";
  const CallAnalysis& pageable_copy = pipeline.on_call(decoder.decode(calls[4]));
  ASSERT_TRUE(pageable_copy.streams->pageable_host_ptr);
  EXPECT_EQ(*pageable_copy.streams->pageable_host_ptr, 0x7f0000u);
  EXPECT_TRUE(pipeline.memory().devices().empty()) << "device memory is accounted for shown calls only";
}

}  // namespace
