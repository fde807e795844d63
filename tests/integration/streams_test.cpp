// End to end (root, real eBPF): the stream model and the timeline against
// tests/fixtures/streams_app.c, whose dependency graph is known, and the
// pageable-copy warning. Skipped without root.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace {

using namespace cudatrace_test;

// The text after " waited: " / " waits: " on each annotated line, with the API.
std::vector<std::string> annotations(const std::string& text) {
  std::vector<std::string> out;
  for (const std::string& line : lines_of(text)) {
    for (const char* marker : {" waited: ", " waits: "}) {
      const auto at = line.find(marker);
      if (at == std::string::npos) continue;
      std::smatch api;
      if (!std::regex_search(line, api, std::regex(R"( (cu[A-Za-z0-9_]+) )"))) continue;
      out.push_back(api[1].str() + " |" + line.substr(at));
    }
  }
  return out;
}

// streams_app edges: what each wait and synchronization waited for.
std::vector<std::string> edges_annotations() {
  const std::string stream_wait = "cudaStreamWaitEvent";
  return {
      stream_wait + " | waits: e1 (recorded on s1) for s1: 1 launch (kernel_a), 1 copy HtoD 1.0 MiB",
      stream_wait + " | waits: e2 (recorded on s2) for s2: 2 launches (kernel_b x2); s1: 1 launch (kernel_a), "
                    "1 copy HtoD 1.0 MiB",
      "cudaEventSynchronize | waited: e2 (recorded on s2) for s2: 2 launches (kernel_b x2); s1: 1 launch (kernel_a), "
      "1 copy HtoD 1.0 MiB",
      "cudaStreamSynchronize | waited: s3: 2 launches (kernel_c x2)",
      "cudaEventSynchronize | waited: e3 (never recorded)",
      "cudaStreamSynchronize | waited: per-thread: 1 launch (kernel_b)",
      "cudaDeviceSynchronize | waited: s1: 1 launch (kernel_a)",
  };
}

class Streams : public NeedsRoot {};

// streams_app graph: what the capture holds, what each launch of the graph runs.
constexpr const char* kGraphRuns = "4 kernels (kernel_a x2, kernel_b, kernel_c), 1 memset 4.0 KiB";

// The kernel rows of a --summary --json run's final summary: short name -> {launches, in graphs}.
std::map<std::string, std::pair<long, long>> kernel_counts(const Result& r) {
  std::map<std::string, std::pair<long, long>> out;
  for (const json& summary : records(r.lines, "summary"))
    if (summary.value("final", false))
      for (const json& k : summary["kernels"]) out[k["short_name"]] = {k["launches"], k["in_graphs"]};
  return out;
}

// A host function queued on a stream is work a synchronisation waits for (issue 28),
// once, whether its driver call is recorded too (--every-layer) or not.
TEST_F(Streams, AHostFunctionIsQueuedWork) {
  for (const char* options : {"", " --every-layer"}) {
    const Result r = run(tracer() + options + " -- " STREAMS_APP " hostfunc");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(annotations(r.out),
              (std::vector<std::string>{"cudaStreamSynchronize | waited: s1: 1 launch (kernel_a), 1 host function"}))
        << options << "\n" << r.out;
  }
  const Result j = run(tracer() + " --json -- " STREAMS_APP " hostfunc");
  ASSERT_EQ(j.status, 0) << j.err;
  const auto syncs = calls(j, "cudaStreamSynchronize");
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0]["waited_for"]["work"][0]["host_functions"], 1) << syncs[0];
  EXPECT_EQ(calls(j, "cudaLaunchHostFunc").size(), 1u);
  EXPECT_EQ(calls(j, "cudaLaunchHostFunc")[0]["ret"], 0);
}

TEST_F(Streams, TextShowsTheProgramsEdgesAndWhatEachSyncWaitedFor) {
  const Result r = run(tracer() + " -- " STREAMS_APP " edges");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(annotations(r.out), edges_annotations()) << r.out;
  // Streams and events by short id.
  std::size_t waits = 0, launches = 0;
  for (const std::string& line : lines_of(r.out)) {
    if (line.find(" cudaStreamWaitEvent ") != std::string::npos) {
      ++waits;
      EXPECT_NE(line.find(" event=e"), std::string::npos) << line;
    }
    if (line.find(" cudaLaunchKernel ") != std::string::npos) {
      ++launches;
      EXPECT_TRUE(line.find(" stream=s") != std::string::npos || line.find(" stream=per-thread") != std::string::npos)
          << line;
    }
  }
  EXPECT_EQ(waits, 2u);
  EXPECT_EQ(launches, 7u);
  EXPECT_EQ(r.out.find("cuStreamWaitEvent"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("cuLaunchKernel"), std::string::npos) << r.out;

  // --every-layer: the driver calls nested in them do not count the same work twice.
  const Result every = run(tracer() + " --every-layer -- " STREAMS_APP " edges");
  ASSERT_EQ(every.status, 0) << every.err;
  EXPECT_EQ(annotations(every.out), edges_annotations()) << every.out;
  EXPECT_NE(every.out.find("cuStreamWaitEvent"), std::string::npos) << every.out;
}

TEST_F(Streams, JsonCarriesHandlesIdsAndWaitedFor) {
  const Result r = run(tracer() + " --json -- " STREAMS_APP " edges");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto creates = calls(r, "cudaStreamCreate");
  ASSERT_EQ(creates.size(), 2u);
  EXPECT_EQ(creates[0]["handle_ids"]["pStream"], "s1");
  EXPECT_EQ(creates[1]["handle_ids"]["pStream"], "s2");
  EXPECT_EQ(calls(r, "cudaStreamCreateWithFlags").at(0)["handle_ids"]["pStream"], "s3");

  const std::vector<std::string> streams = {"s1", "s2", "s2", "s3", "s3", "s1", "per-thread"};
  std::vector<std::string> launch_streams;
  for (const json& j : calls(r, "cudaLaunchKernel")) {
    launch_streams.push_back(j["handle_ids"]["stream"]);
    EXPECT_TRUE(j["args"]["stream"].is_string());  // the raw value is still there
  }
  EXPECT_EQ(launch_streams, streams);

  const auto waits = calls(r, "cudaStreamWaitEvent");
  ASSERT_EQ(waits.size(), 2u);
  EXPECT_EQ(waits[0]["handle_ids"], json({{"stream", "s2"}, {"event", "e1"}}));
  EXPECT_EQ(waits[0]["waited_for"]["kind"], "stream_wait_event");
  EXPECT_EQ(waits[0]["waited_for"]["recorded_on"], "s1");
  EXPECT_EQ(waits[1]["handle_ids"], json({{"stream", "s3"}, {"event", "e2"}}));
  EXPECT_EQ(waits[1]["waited_for"]["recorded_on"], "s2");
  EXPECT_EQ(calls(r, "cudaEventRecord").size(), 2u);
  EXPECT_EQ(calls(r, "cudaMemcpyAsync").at(0)["handle_ids"]["stream"], "s1");

  const auto device = calls(r, "cudaDeviceSynchronize");
  ASSERT_EQ(device.size(), 1u);
  const json& w = device[0]["waited_for"];
  EXPECT_EQ(w["kind"], "device");
  ASSERT_EQ(w["work"].size(), 1u);
  EXPECT_EQ(w["work"][0]["stream"], "s1");
  EXPECT_EQ(w["work"][0]["launches"], 1);
  EXPECT_EQ(w["work"][0]["kernels"], json::parse(R"([{"kernel":"kernel_a","count":1}])"));

  const auto event_syncs = calls(r, "cudaEventSynchronize");
  ASSERT_EQ(event_syncs.size(), 2u);
  const json& first = event_syncs[0]["waited_for"];
  EXPECT_EQ(first["event"], "e2");
  ASSERT_EQ(first["work"].size(), 2u);
  EXPECT_EQ(first["work"][0]["stream"], "s2");
  EXPECT_EQ(first["work"][1]["stream"], "s1");
  EXPECT_EQ(first["work"][1]["copies"]["HtoD"], json({{"count", 1}, {"bytes", 1 << 20}}));
  EXPECT_TRUE(event_syncs[1]["waited_for"]["recorded_on"].is_null());
  EXPECT_TRUE(event_syncs[1]["waited_for"]["work"].empty());
  // Pinned memory only in this scenario: no warning.
  for (const json& j : r.lines) EXPECT_NE(j["type"], "warning") << j;

  // --every-layer: the driver's launches too, nested in the runtime's, on the same streams.
  const Result every = run(tracer() + " --json --every-layer -- " STREAMS_APP " edges");
  ASSERT_EQ(every.status, 0) << every.err;
  std::vector<std::string> nested_streams;
  for (const json& j : calls(every, "cuLaunchKernel")) {
    nested_streams.push_back(j["handle_ids"]["hStream"]);
    EXPECT_EQ(j["parent_api"], "cudaLaunchKernel") << j;
  }
  EXPECT_EQ(nested_streams, streams);
  EXPECT_EQ(calls(every, "cuStreamWaitEvent").size(), 2u);
  // The same device synchronization, the work not counted twice.
  EXPECT_EQ(calls(every, "cudaDeviceSynchronize").at(0)["waited_for"], device[0]["waited_for"]);
}

TEST_F(Streams, PageableAsyncCopyWarnsOncePerCallSite) {
  const Result r = run(tracer() + " -- " STREAMS_APP " pageable");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> warnings;
  for (const std::string& line : lines_of(r.err))
    if (line.find("pageable host memory") != std::string::npos) warnings.push_back(line);
  // At the program's call site.
  ASSERT_EQ(warnings.size(), 2u) << r.err;
  EXPECT_EQ(warnings[0].rfind("cudatrace: warning: cudaMemcpyAsync from pageable host memory 0x", 0), 0u)
      << warnings[0];
  EXPECT_NE(warnings[0].find(" at streams_app+0x"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("(copy_to_device+0x"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("): the copy is synchronous"), std::string::npos) << warnings[0];
  EXPECT_EQ(warnings[1].rfind("cudatrace: warning: cudaMemcpyAsync to pageable host memory 0x", 0), 0u)
      << warnings[1];
  EXPECT_NE(warnings[1].find("(copy_to_host+0x"), std::string::npos) << warnings[1];
  EXPECT_EQ(r.err.find("copy_pinned"), std::string::npos) << r.err;

  // --every-layer: the same two warnings (the buffer's address aside), not
  // one more for the driver's copies.
  const Result every = run(tracer() + " --every-layer -- " STREAMS_APP " pageable");
  ASSERT_EQ(every.status, 0) << every.err;
  const auto without_address = [](const std::string& line) {
    return std::regex_replace(line, std::regex("memory 0x[0-9a-f]+"), "memory ADDRESS");
  };
  std::vector<std::string> every_warnings;
  for (const std::string& line : lines_of(every.err))
    if (line.find("pageable host memory") != std::string::npos) every_warnings.push_back(without_address(line));
  ASSERT_EQ(every_warnings.size(), 2u) << every.err;
  for (int i = 0; i < 2; ++i) EXPECT_EQ(every_warnings[i], without_address(warnings[i])) << every.err;
}

TEST_F(Streams, PageableWarningIsAlsoAJsonLine) {
  const Result r = run(tracer() + " --json -- " STREAMS_APP " pageable");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<json> warnings = records(r.lines, "warning");
  ASSERT_EQ(warnings.size(), 2u) << r.out;
  // The program's six cudaMemcpyAsync: three to the device, then three back.
  const std::vector<json> copies = calls(r, "cudaMemcpyAsync");
  ASSERT_EQ(copies.size(), 6u);
  EXPECT_EQ(copies[3]["args"]["kind"], "cudaMemcpyDeviceToHost");
  for (const json& w : warnings) {
    EXPECT_EQ(w["kind"], "pageable_async_copy");
    EXPECT_EQ(w["api"], "cudaMemcpyAsync");
    EXPECT_NE(w["caller"], "0x0");
    EXPECT_EQ(w["location"].get<std::string>().rfind("streams_app+0x", 0), 0u) << w;
  }
  // The warned-about pointers are the pageable buffer: the source of the
  // first (HtoD) copy and the destination of the DtoH one.
  EXPECT_EQ(warnings[0]["host_ptr"], copies[0]["args"]["src"]);
  EXPECT_EQ(warnings[1]["host_ptr"], copies[3]["args"]["dst"]);
  EXPECT_EQ(copies[3]["args"]["dst"], copies[0]["args"]["src"]);
  EXPECT_NE(warnings[0]["caller"], warnings[1]["caller"]);
}

class Timeline : public Streams {
 protected:
  void TearDown() override { std::remove(path.c_str()); }

  json load() {
    const std::string text = read_file(path);
    json doc = json::parse(text);  // throws (test fails) on invalid JSON
    return doc;
  }
  static std::vector<json> events_where(const json& doc, const std::string& ph, const std::string& name = "") {
    std::vector<json> out;
    for (const json& e : doc["traceEvents"])
      if (e["ph"] == ph && (name.empty() || e.value("name", "") == name)) out.push_back(e);
    return out;
  }

  std::string path = temp_path("timeline.json");
};

TEST_F(Timeline, TracksFlowsAndCountersOfTheEdgesScenario) {
  const Result r = run(tracer() + " --perfetto " + path + " -o /dev/null -- " STREAMS_APP " edges");
  ASSERT_EQ(r.status, 0) << r.err;
  const json doc = load();
  ASSERT_TRUE(doc["traceEvents"].is_array());

  const auto processes = events_where(doc, "M", "process_name");
  ASSERT_EQ(processes.size(), 1u);
  EXPECT_EQ(processes[0]["args"]["name"], "streams_app");
  const int pid = processes[0]["pid"];

  std::map<long, std::string> thread_names;
  for (const json& m : events_where(doc, "M", "thread_name")) thread_names[m["tid"].get<long>()] = m["args"]["name"];
  std::map<std::string, long> lane_tid;
  for (const auto& [tid, name] : thread_names)
    if (name.rfind("stream ", 0) == 0) lane_tid[name.substr(0, name.find(" (tid"))] = tid;
  ASSERT_EQ(lane_tid.size(), 4u) << doc.dump();
  for (const char* lane : {"stream s1", "stream s2", "stream s3", "stream per-thread"})
    EXPECT_TRUE(lane_tid.count(lane)) << lane;
  EXPECT_EQ(thread_names[pid], "streams_app");

  // Queued work per lane: what the program put on each stream.
  std::map<long, std::multiset<std::string>> queued;
  for (const json& e : events_where(doc, "X"))
    if (e["cat"] == "queued") queued[e["tid"].get<long>()].insert(e["name"].get<std::string>());
  EXPECT_EQ(queued[lane_tid["stream s1"]], (std::multiset<std::string>{"copy HtoD 1.0 MiB", "kernel_a", "kernel_a"}));
  EXPECT_EQ(queued[lane_tid["stream s2"]], (std::multiset<std::string>{"kernel_b", "kernel_b"}));
  EXPECT_EQ(queued[lane_tid["stream s3"]], (std::multiset<std::string>{"kernel_c", "kernel_c"}));
  EXPECT_EQ(queued[lane_tid["stream per-thread"]], (std::multiset<std::string>{"kernel_b"}));

  // API slices on the program's thread: the launches, as the program made them.
  EXPECT_EQ(events_where(doc, "X", "cuLaunchKernel").size(), 0u);
  const auto launches = events_where(doc, "X", "cudaLaunchKernel");
  ASSERT_EQ(launches.size(), 7u);
  EXPECT_EQ(launches[0]["cat"], "runtime");
  EXPECT_EQ(launches[0]["tid"], pid);
  EXPECT_EQ(launches[0]["args"]["ret"], "cudaSuccess");

  // Flows: e1 -> the first wait; e2 -> the second wait and the event sync.
  const auto starts = events_where(doc, "s"), ends = events_where(doc, "f");
  ASSERT_EQ(starts.size(), 3u);
  ASSERT_EQ(ends.size(), 3u);
  std::map<long, std::string> start_event;
  for (const json& s : starts) start_event[s["id"].get<long>()] = s["name"];
  std::multiset<std::string> consumed;
  for (const json& f : ends) {
    ASSERT_TRUE(start_event.count(f["id"].get<long>())) << f;
    consumed.insert(start_event[f["id"].get<long>()]);
    EXPECT_EQ(f["bp"], "e");
  }
  EXPECT_EQ(consumed, (std::multiset<std::string>{"e1", "e2", "e2"}));
  // Each flow starts inside the record call's slice.
  const auto records = events_where(doc, "X", "cudaEventRecord");
  ASSERT_EQ(records.size(), 2u);
  for (const json& s : starts) {
    bool inside = false;
    for (const json& rec : records)
      inside |= s["ts"].get<double>() >= rec["ts"].get<double>() &&
                s["ts"].get<double>() <= rec["ts"].get<double>() + rec["dur"].get<double>();
    EXPECT_TRUE(inside) << s;
  }

  // Device memory: the 1 MiB cudaMalloc, then its cudaFree (pinned host memory is not counted).
  std::vector<long> bytes;
  for (const json& c : events_where(doc, "C", "device memory")) bytes.push_back(c["args"]["bytes"]);
  EXPECT_EQ(bytes, (std::vector<long>{1 << 20, 0}));
}

// What a timeline shows, without times and ids: (phase, category, name) of
// every event, and the device-memory counter's values.
std::multiset<std::string> timeline_signature(const json& doc) {
  std::multiset<std::string> out;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M") continue;  // names of pids and tids, which differ between runs
    std::string s = e["ph"].get<std::string>() + " " + e.value("cat", "") + " " + e.value("name", "");
    if (e["ph"] == "C") s += " " + e["args"].dump();
    out.insert(s);
  }
  return out;
}

// cudatrace report on a --json trace: the stream annotations and the
// timeline a live run of the same program gives.
TEST_F(Timeline, OfflineReportGivesTheLiveAnnotationsAndTimeline) {
  const std::string trace = temp_path("edges.jsonl"), live_timeline = temp_path("live-timeline.json");
  const Result recorded = run(tracer() + " --json -o " + trace + " -- " STREAMS_APP " edges");
  ASSERT_EQ(recorded.status, 0) << recorded.err;
  const Result live = run(tracer() + " --perfetto " + live_timeline + " -- " STREAMS_APP " edges");
  const Result offline = run(tracer() + " report --perfetto " + path + " " + trace);
  ASSERT_EQ(live.status, 0) << live.err;
  ASSERT_EQ(offline.status, 0) << offline.err;
  EXPECT_EQ(annotations(live.out), edges_annotations()) << live.out;
  EXPECT_EQ(annotations(offline.out), annotations(live.out)) << offline.out;
  EXPECT_EQ(lines_of(offline.out).size(), lines_of(live.out).size());
  const json live_doc = json::parse(read_file(live_timeline));
  std::remove(live_timeline.c_str());
  EXPECT_EQ(timeline_signature(load()), timeline_signature(live_doc));
  EXPECT_GE(timeline_signature(live_doc).size(), 50u);  // not a near-empty timeline

  // The pageable-copy warnings of the recorded run, again on stderr and as JSON lines.
  const Result pageable = run(tracer() + " --json -o " + trace + " -- " STREAMS_APP " pageable");
  ASSERT_EQ(pageable.status, 0) << pageable.err;
  const auto warnings = [](const std::string& err) {
    std::vector<std::string> out;
    for (const std::string& line : lines_of(err))
      if (line.find("pageable host memory") != std::string::npos) out.push_back(line);
    return out;
  };
  const Result replayed = run(tracer() + " report --json " + trace);
  ASSERT_EQ(replayed.status, 0) << replayed.err;
  EXPECT_EQ(warnings(replayed.err), warnings(pageable.err));
  EXPECT_EQ(warnings(pageable.err).size(), 2u) << pageable.err;
  EXPECT_EQ(records(replayed.lines, "warning"), records(parse_lines(read_file(trace)), "warning"));
  std::remove(trace.c_str());
}

TEST_F(Timeline, FileIsCompleteJsonAfterCtrlC) {
  const std::string ready = temp_path("ready");
  const pid_t t = fork();
  if (t == 0) {
    const int fd = open(ready.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, STDOUT_FILENO);
    exec_tracer({"--perfetto", path, "-o", "/dev/null", "--", FAKE_APP, "block"});
  }
  // The app prints "ready" just before blocking in cudaStreamSynchronize.
  ASSERT_TRUE(wait_until([&] { return read_file(ready).find("ready") != std::string::npos; }, 30s));
  const pid_t app = first_child(t);
  ASSERT_NE(app, 0);
  std::this_thread::sleep_for(200ms);  // into the blocking call
  ASSERT_EQ(kill(t, SIGINT), 0);
  int status = 0;
  waitpid(t, &status, 0);
  kill(app, SIGKILL);
  std::remove(ready.c_str());
  const json doc = load();
  const auto open_calls = events_where(doc, "B", "cudaStreamSynchronize");
  ASSERT_EQ(open_calls.size(), 1u) << doc.dump();
  EXPECT_EQ(open_calls[0]["args"]["ret"], "unfinished");
}

// Stream capture (issue 28): the captured work is not run (a synchronisation
// right after the capture waits for nothing), each graph launch says what the
// graph runs and queues it, and the summary counts kernels run in graphs.
TEST_F(Streams, AGraphLaunchRunsWhatWasCaptured) {
  const Result r = run("timeout 60 " + tracer() + " -- " STREAMS_APP " graph");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(annotations(r.out),
            (std::vector<std::string>{
                "cudaStreamSynchronize | waited: nothing",
                "cudaStreamSynchronize | waited: s1: 13 launches (kernel_a x6, kernel_b x3, kernel_c x4), "
                "3 memsets 12.0 KiB"}))
      << r.out;
  std::size_t graph_launches = 0, captured = 0, capture_ends = 0, instantiations = 0;
  for (const std::string& line : lines_of(r.out)) {
    const bool annotated = line.find(std::string(" graph g1: ") + kGraphRuns) != std::string::npos;
    if (line.find(" cudaGraphLaunch ") != std::string::npos) {
      ++graph_launches;
      EXPECT_TRUE(annotated) << line;
      EXPECT_NE(line.find(" graphExec=g1 "), std::string::npos) << line;
    }
    if (line.find(" cudaGraphInstantiate ") != std::string::npos) {
      ++instantiations;
      EXPECT_TRUE(annotated) << line;
    }
    if (line.find(" cudaStreamEndCapture ") != std::string::npos) {
      ++capture_ends;
      EXPECT_NE(line.find(std::string(" captured: ") + kGraphRuns), std::string::npos) << line;
    }
    if (line.find(" cudaStreamBeginCapture ") != std::string::npos)
      EXPECT_NE(line.find(" mode=cudaStreamCaptureModeGlobal"), std::string::npos) << line;
    captured += line.find(" [captured]") != std::string::npos;
  }
  EXPECT_EQ(graph_launches, 3u) << r.out;
  EXPECT_EQ(instantiations, 1u) << r.out;
  EXPECT_EQ(capture_ends, 1u) << r.out;
  EXPECT_EQ(captured, 5u) << r.out;  // four launches and the memset

  const Result j = run("timeout 60 " + tracer() + " --json -- " STREAMS_APP " graph");
  ASSERT_EQ(j.status, 0) << j.err;
  const auto launches = calls(j, "cudaGraphLaunch");
  ASSERT_EQ(launches.size(), 3u);
  for (const json& l : launches) {
    EXPECT_EQ(l["graph"]["id"], "g1") << l;
    EXPECT_EQ(l["graph"]["known"], true) << l;
    EXPECT_EQ(l["graph"]["runs"]["launches"], 4) << l;
    EXPECT_EQ(l["graph"]["runs"]["memsets"]["count"], 1) << l;
  }
  const auto ends = calls(j, "cudaStreamEndCapture");
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_TRUE(ends[0]["graph"]["id"].is_null()) << ends[0];
  EXPECT_EQ(ends[0]["graph"]["runs"]["launches"], 4) << ends[0];

  // In summary mode the launches are counted in BPF, except while a capture is open.
  const Result s = run("timeout 60 " + tracer() + " --summary --json -- " STREAMS_APP " graph");
  ASSERT_EQ(s.status, 0) << s.err;
  const auto kernels = kernel_counts(s);
  EXPECT_EQ(kernels.at("kernel_a"), std::make_pair(0L, 6L)) << s.out;
  EXPECT_EQ(kernels.at("kernel_b"), std::make_pair(0L, 3L)) << s.out;
  EXPECT_EQ(kernels.at("kernel_c"), std::make_pair(1L, 3L)) << s.out;
  const Result t = run("timeout 60 " + tracer() + " --summary -- " STREAMS_APP " graph");
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.out.find("In graphs"), std::string::npos) << t.out;
}

// A graph built from kernel nodes: the return probe reads each node's kernel from its params.
TEST_F(Streams, AGraphOfKernelNodesRunsItsKernels) {
  const Result r = run("timeout 60 " + tracer() + " -- " STREAMS_APP " nodes");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(annotations(r.out),
            (std::vector<std::string>{"cudaStreamSynchronize | waited: s1: 6 launches (kernel_a x4, kernel_b x2)"}))
      << r.out;
  std::vector<std::string> node_kernels;
  std::size_t annotated = 0;
  for (const std::string& line : lines_of(r.out)) {
    if (line.find(" cudaGraphAddKernelNode ") != std::string::npos) {
      const auto at = line.find(" kernel=\"");
      ASSERT_NE(at, std::string::npos) << line;
      node_kernels.push_back(line.substr(at + 9, line.find('"', at + 9) - at - 9));
    }
    annotated += line.find(" graph g1: 3 kernels (kernel_a x2, kernel_b)") != std::string::npos;
  }
  EXPECT_EQ(node_kernels, (std::vector<std::string>{"kernel_a", "kernel_b", "kernel_a"})) << r.out;
  EXPECT_EQ(annotated, 3u) << r.out;  // the instantiation and two launches

  // cudatrace report reads the nodes' kernels back from a --json trace.
  const std::string trace = temp_path("nodes.jsonl");
  const Result j = run("timeout 60 " + tracer() + " --json -o " + trace + " -- " STREAMS_APP " nodes");
  ASSERT_EQ(j.status, 0) << j.err;
  const Result offline = run("timeout 60 " + tracer() + " report " + trace);
  std::remove(trace.c_str());
  ASSERT_EQ(offline.status, 0) << offline.err;
  EXPECT_EQ(annotations(offline.out), annotations(r.out)) << offline.out;
  EXPECT_NE(offline.out.find(" graph g1: 3 kernels (kernel_a x2, kernel_b)"), std::string::npos) << offline.out;
}

}  // namespace

namespace {

// --gpu-time end to end, against the fake driver's simulated GPU: kernel_a
// runs 200 us and kernel_b 800 us a launch, in a loop whose mix of launches
// changes from one synchronisation to the next. The bounds must hold the
// true total, and the estimates must find each kernel's time within their
// stated uncertainty.
TEST_F(Streams, GpuTimeBoundsHoldAndEstimatesFindTheSimulatedKernelTimes) {
  constexpr int kIterations = 60;
  constexpr double kNsA = 10 * 20000.0, kNsB = 40 * 20000.0;
  double truth_ns = 0;
  for (int i = 0; i < kIterations; ++i) truth_ns += (i % 3 + 1) * kNsA + (i % 2 + 1) * kNsB;
  const Result r = run("FAKE_GPU_NS_PER_BLOCK=20000 " + tracer() + " --gpu-time --json -- " STREAMS_APP " gpuloop " +
                       std::to_string(kIterations));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto summaries = records(parse_lines(r.out), "summary");
  ASSERT_EQ(summaries.size(), 1u) << r.out;
  const json& g = summaries[0]["gpu_time"];
  EXPECT_EQ(g["estimated"], true);
  EXPECT_EQ(g["windows"], kIterations) << g;
  EXPECT_GE(g["gpu_bound_windows"].get<int>(), kIterations * 9 / 10) << g;  // each sync waits for 1-3 ms of work
  EXPECT_LE(g["lower_ns"].get<double>(), truth_ns) << g;
  EXPECT_GE(g["upper_ns"].get<double>(), truth_ns) << g;
  std::map<std::string, double> expected = {{"kernel_a", kNsA}, {"kernel_b", kNsB}};
  ASSERT_EQ(g["estimates"].size(), 2u) << g;
  for (const json& e : g["estimates"]) {
    const double want = expected.at(e["kernel"].get<std::string>());
    ASSERT_TRUE(e["separable"].get<bool>()) << e;
    const double estimate = e["estimate_ns"], stderr_ns = e["stderr_ns"];
    EXPECT_LT(stderr_ns, want) << e;  // an estimate, not noise
    EXPECT_NEAR(estimate, want, 4 * stderr_ns) << e;
  }
}

}  // namespace
