// End to end (root, real eBPF): --py-stack against Debian's python3 calling
// the fake libcudart through ctypes (tests/fixtures/py_stack_app.py), from
// functions and lines that the script marks with LINE comments. Checks
// function, file and line of each call in JSON, text, the summary's tables
// (live and `cudatrace report`) and the timeline, and that a thread running
// no Python carries no frames; and, with code objects made and freed in a
// loop (tests/fixtures/py_reuse_app.py), on every CPython 3.10-3.13 found,
// that each frame of every call is named right or not at all. Skipped
// without root or /usr/bin/python3.
#include <glob.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using namespace cudatrace_test;

const std::string kApp = SOURCE_DIR "/tests/fixtures/py_stack_app.py";
const std::string kReuseApp = SOURCE_DIR "/tests/fixtures/py_reuse_app.py";
const std::string kPython = "/usr/bin/python3";

class PyStack : public NeedsRoot {
 protected:
  void SetUp() override {
    NeedsRoot::SetUp();
    if (IsSkipped()) return;
    if (access(kPython.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << kPython;
    // The marked lines of the script.
    const std::vector<std::string> text = lines_of(read_file(kApp));
    for (std::size_t i = 0; i < text.size(); ++i) {
      const auto at = text[i].find("# LINE ");
      if (at != std::string::npos) lines_[text[i].substr(at + 7)] = static_cast<int>(i + 1);
    }
    ASSERT_EQ(lines_.size(), 11u);
  }
  std::string command(const std::string& options) const {
    return tracer() + " " + options + " -- " + kPython + " " + kApp + " " FAKE_CUDART_LIB;
  }
  int line(const std::string& name) const { return lines_.at(name); }
  std::map<std::string, int> lines_;
};

struct Frame {
  std::string func;
  int line;
  bool operator==(const Frame& o) const { return func == o.func && line == o.line; }
};
std::ostream& operator<<(std::ostream& os, const Frame& f) { return os << f.func << ":" << f.line; }

std::vector<Frame> frames_of(const json& call) {
  std::vector<Frame> out;
  if (!call.contains("py_stack")) return out;
  for (const json& f : call["py_stack"]) {
    const std::string file = f["file"], func = f["func"];
    if (func.rfind("Thread.", 0) != 0)  // threading.py's frames under a Python thread's
      EXPECT_NE(file.find("/tests/fixtures/py_stack_app.py"), std::string::npos) << call;
    out.push_back({func, f["line"]});
  }
  return out;
}

TEST_F(PyStack, EachCallCarriesItsPythonLines) {
  const Result r = run(command("--py-stack --json -f all"));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto mallocs = calls(r, "cudaMalloc");
  ASSERT_EQ(mallocs.size(), 2u) << r.out;
  std::uint64_t main_tid = 0, thread_tid = 0;
  for (const json& m : mallocs) {
    const std::vector<Frame> f = frames_of(m);
    ASSERT_GE(f.size(), 2u) << m;
    EXPECT_EQ(f[0], (Frame{"allocate", line("malloc")})) << m;
    if (m["args"]["size"] == 4096) {
      main_tid = m["tid"];
      ASSERT_EQ(f.size(), 3u) << m;
      EXPECT_EQ(f[1].func, "main") << m;
      EXPECT_EQ(f[2].func, "<module>") << m;
    } else {
      thread_tid = m["tid"];
      EXPECT_EQ(f[1], (Frame{"python_thread", line("thread_free")})) << m;
    }
  }
  EXPECT_NE(main_tid, 0u);
  EXPECT_NE(thread_tid, 0u);
  EXPECT_NE(main_tid, thread_tid);
  const auto copies = calls(r, "cudaMemcpy");
  ASSERT_EQ(copies.size(), 3u);
  for (const json& c : copies) {
    const std::vector<Frame> f = frames_of(c);
    ASSERT_EQ(f.size(), 3u) << c;
    EXPECT_EQ(f[0], (Frame{"upload", line("memcpy")})) << c;
    EXPECT_EQ(f[1].func, "main");
  }
  const auto launches = calls(r, "cudaLaunchKernel");
  ASSERT_EQ(launches.size(), 3u);
  for (const json& c : launches) {
    const std::vector<Frame> f = frames_of(c);
    ASSERT_FALSE(f.empty()) << c;
    EXPECT_EQ(f[0], (Frame{"launch", line("launch")})) << c;
  }
  // cudaFree from the Python thread: the line that called it.
  const auto frees = calls(r, "cudaFree");
  ASSERT_EQ(frees.size(), 1u);
  const std::vector<Frame> free_frames = frames_of(frees[0]);
  ASSERT_GE(free_frames.size(), 2u) << frees[0];  // python_thread, then threading's own
  EXPECT_EQ(free_frames[0], (Frame{"python_thread", line("thread_free")})) << frees[0];
  EXPECT_EQ(frees[0]["tid"], thread_tid);
  // Synchronisations: the nested one from the main thread, the native thread's with no frames.
  const auto syncs = calls(r, "cudaDeviceSynchronize");
  ASSERT_EQ(syncs.size(), 2u) << r.out;
  int native = 0;
  for (const json& s : syncs) {
    if (s["tid"] == main_tid) {
      const std::vector<Frame> f = frames_of(s);
      const std::vector<Frame> expected = {{"wait", line("sync")},         {"nested", line("nested_leaf")},
                                           {"nested", line("nested")},     {"nested", line("nested")},
                                           {"nested", line("nested")}};
      ASSERT_GE(f.size(), expected.size() + 1) << s;
      EXPECT_EQ(std::vector<Frame>(f.begin(), f.begin() + expected.size()), expected) << s;
      EXPECT_EQ(f[expected.size()].func, "main") << s;
    } else {
      ++native;
      EXPECT_NE(s["tid"], thread_tid);
      EXPECT_FALSE(s.contains("py_stack")) << "a thread that runs no Python carries no frames: " << s;
    }
  }
  EXPECT_EQ(native, 1);
  // Frames read one by one, outside the top of the data stack read at once:
  // a generator's own, and those below the top (deeper than it, and in the
  // chunk before the current one).
  const auto getters = calls(r, "cudaGetDevice");
  ASSERT_EQ(getters.size(), 2u) << r.out;
  const std::vector<Frame> in_generator = frames_of(getters[0]);
  ASSERT_EQ(in_generator.size(), 3u) << getters[0];
  EXPECT_EQ(in_generator[0], (Frame{"generations", line("generator")})) << getters[0];
  EXPECT_EQ(in_generator[1].func, "main") << getters[0];
  const std::vector<Frame> deep = frames_of(getters[1]);
  ASSERT_EQ(deep.size(), 32u) << "the 32 innermost of 63 frames: " << getters[1];
  EXPECT_EQ(deep[0], (Frame{"deep", line("deep_leaf")})) << getters[1];
  for (std::size_t i = 1; i < deep.size(); ++i) EXPECT_EQ(deep[i], (Frame{"deep", line("deep")})) << i;
  EXPECT_EQ(r.err.find("could not be read"), std::string::npos) << r.err;
}

TEST_F(PyStack, TextLinesNameTheInnermostLine) {
  const Result r = run(command("--py-stack"));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto count = [&](const std::string& api, const std::string& py) {
    int n = 0;
    for (const std::string& l : lines_of(r.out))
      if (l.find(" " + api + " ") != std::string::npos && l.find(py) != std::string::npos) ++n;
    return n;
  };
  const auto at = [&](const std::string& name, const std::string& func) {
    return " py=py_stack_app.py:" + std::to_string(line(name)) + " " + func;
  };
  EXPECT_EQ(count("cudaMalloc", at("malloc", "allocate")), 2) << r.out;
  EXPECT_EQ(count("cudaMemcpy", at("memcpy", "upload")), 3) << r.out;
  EXPECT_EQ(count("cudaLaunchKernel", at("launch", "launch")), 3) << r.out;
  EXPECT_EQ(count("cudaDeviceSynchronize", at("sync", "wait")), 1) << r.out;
  // The native thread's synchronisation: a line without py=.
  int bare = 0;
  for (const std::string& l : lines_of(r.out))
    if (l.find(" cudaDeviceSynchronize ") != std::string::npos && l.find(" py=") == std::string::npos) ++bare;
  EXPECT_EQ(bare, 1) << r.out;
  // The pageable-copy warning names the Python line after the native call site.
  EXPECT_NE(r.err.find("pageable host memory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(python py_stack_app.py:" + std::to_string(line("async")) + " main)"), std::string::npos)
      << r.err;
}

// The tables by Python call site, in a live summary and in `report` of a saved trace.
void expect_site_tables(const std::string& out, const std::map<std::string, int>& lines) {
  const auto site = [&](const std::string& name, const std::string& func) {
    return "py_stack_app.py:" + std::to_string(lines.at(name)) + " " + func;
  };
  const auto row_of = [&](const std::string& title, const std::string& at) {
    const auto start = out.find(title);
    if (start == std::string::npos) return std::string();
    const auto end = out.find("\n\n", start + title.size() + 3);  // title, a blank line, the table
    const std::string section = out.substr(start, end == std::string::npos ? std::string::npos : end - start);
    for (const std::string& l : lines_of(section))
      if (l.find(at) != std::string::npos) return l;
    return std::string();
  };
  const std::regex spaces(" +");
  const auto words = [&](const std::string& l) { return std::regex_replace(l, spaces, " "); };
  EXPECT_NE(row_of("Synchronisation by Python call site", site("sync", "wait")), "") << out;
  EXPECT_EQ(words(row_of("Device allocations by Python call site", site("malloc", "allocate"))).find("2 4,103 1 4,096 "),
            1u)
      << out;
  EXPECT_EQ(words(row_of("Host-to-device copies by Python call site", site("memcpy", "upload")))
                .find("3 24,576 24,576 100.0 "),
            1u)
      << out;
  EXPECT_EQ(words(row_of("Kernel launches by Python call site", site("launch", "launch"))).find("3 "), 1u) << out;
}

TEST_F(PyStack, SummaryTablesByPythonCallSite) {
  const Result r = run(command("--py-stack --summary"));
  ASSERT_EQ(r.status, 0) << r.err;
  expect_site_tables(r.out + r.err, lines_);
}

TEST_F(PyStack, ReportOfASavedTraceHasTheSameTables) {
  const std::string trace = temp_path("py.jsonl");
  const Result r = run(command("--py-stack --json -o " + trace));
  ASSERT_EQ(r.status, 0) << r.err;
  const Result report = run(std::string(CUDATRACE_BIN) + " report --summary " + trace);  // no --attach
  unlink(trace.c_str());
  ASSERT_EQ(report.status, 0) << report.err;
  expect_site_tables(report.out + report.err, lines_);
  // The pageable-copy warning names the Python line once, as the live trace does.
  const std::string py_site = "(python py_stack_app.py:" + std::to_string(line("async")) + " main)";
  const auto first = report.err.find(py_site);
  ASSERT_NE(first, std::string::npos) << report.err;
  EXPECT_EQ(report.err.find(py_site, first + 1), std::string::npos) << report.err;
}

TEST_F(PyStack, TimelineSlicesCarryTheFrames) {
  const std::string timeline = temp_path("py.json");
  const Result r = run(command("--py-stack --perfetto " + timeline + " -o /dev/null"));
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string t = read_file(timeline);
  unlink(timeline.c_str());
  EXPECT_NE(t.find("\"py\":\"py_stack_app.py:" + std::to_string(line("malloc")) + " allocate\""), std::string::npos)
      << t.substr(0, 4000);
  EXPECT_NE(t.find("\"py_stack\":"), std::string::npos);
}

// Debian's python3 (3.11), and pyenv's 3.10 to 3.13 where they are installed.
std::vector<std::string> pythons() {
  std::vector<std::string> out = {kPython};
  glob_t g{};
  if (glob("/root/.pyenv/versions/3.1[0-3].*/bin/python3", 0, nullptr, &g) == 0)
    out.insert(out.end(), g.gl_pathv, g.gl_pathv + g.gl_pathc);
  globfree(&g);
  return out;
}

// CPython puts new code objects where freed ones were (exec, compile,
// dataclasses, torch.fx, torch.compile): a frame is named as the call's own
// or left unnamed, on every call (issue 47). The script's last call is made
// as it exits: its frame gets its line or none, never line 0.
TEST_F(PyStack, CodeObjectsMadeAndFreedAreNamedRightOrNotAtAll) {
  constexpr int kRounds = 800;
  for (const std::string& python : pythons()) {
    SCOPED_TRACE(python);
    const std::string trace = temp_path("reuse.jsonl");
    const Result r = run(tracer() + " --py-stack --json -o " + trace + " -- " + python + " " + kReuseApp +
                         " " FAKE_CUDART_LIB " " + std::to_string(kRounds));
    const std::vector<json> lines = parse_lines(read_file(trace));
    unlink(trace.c_str());
    ASSERT_EQ(r.status, 0) << r.err;
    std::map<std::uint64_t, json> by_count;
    std::uint64_t unnamed_anywhere = 0;
    for (const json& c : records(lines, "call", "cudaMemset")) {
      by_count[c["args"]["count"].get<std::uint64_t>()] = c;
      for (const json& f : c.value("py_stack", json::array())) unnamed_anywhere += f["func"].is_null();
    }
    std::size_t expected = 0, named = 0, unnamed = 0, wrong = 0;
    for (const std::string& line : lines_of(r.out)) {  // the script's: what each call's frames must be
      const json want = json::parse(line);
      ++expected;
      const auto it = by_count.find(want["count"].get<std::uint64_t>());
      ASSERT_NE(it, by_count.end()) << "no call for " << want;
      const json stack = it->second.value("py_stack", json::array());
      ASSERT_GE(stack.size(), want["frames"].size()) << it->second;
      for (std::size_t k = 0; k < want["frames"].size(); ++k) {
        const json& got = stack[k];
        if (got["func"].is_null()) {
          EXPECT_TRUE(got["file"].is_null() && got["line"].is_null()) << got;
          ++unnamed;
        } else if (json::array({got["func"], got["file"], got["line"]}) == want["frames"][k]) {
          ++named;
        } else if (++wrong <= 5) {
          ADD_FAILURE() << "frame " << k << " of call " << want["count"] << " is " << got << ", not "
                        << want["frames"][k];
        }
      }
    }
    EXPECT_EQ(expected, std::size_t(2 * kRounds - kRounds / 4 + 1)) << r.out;  // every fourth called once
    EXPECT_EQ(by_count.size(), expected);
    EXPECT_EQ(wrong, 0u) << "of " << named + unnamed + wrong << " frames";
    // Three modules in four live 48 ms or more: most frames are read in time to be named.
    EXPECT_GE(named, 2 * (named + unnamed) / 3) << unnamed << " unnamed";
    // Unnamed frames are counted at the end.
    if (unnamed_anywhere)
      EXPECT_NE(r.err.find(std::to_string(unnamed_anywhere) + " Python frames are unnamed"), std::string::npos)
          << unnamed_anywhere << "\n" << r.err;
    else
      EXPECT_EQ(r.err.find("unnamed"), std::string::npos) << r.err;
  }
}

// The reuse test above passes with identities read at every call too: this
// one says they are kept, i.e. that the code object deallocator is probed.
TEST_F(PyStack, CodeObjectIdentitiesAreKeptUntilOneIsFreed) {
  for (const std::string& python : pythons()) {
    SCOPED_TRACE(python);
    const Result r = run(tracer() + " -v --py-stack -o /dev/null -- " + python + " " + kReuseApp +
                         " " FAKE_CUDART_LIB " 4");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("code object identities kept until one is freed"), std::string::npos) << r.err;
  }
}

}  // namespace
