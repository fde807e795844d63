// cudatrace report: --json lines read back into records (TraceLine) and
// whole trace files (SavedTrace, through run_report).
#include "cudatrace/decode/py_stack.h"
#include "cudatrace/record/saved_trace.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/drive/tracer.h"
#include "cudatrace/render/writer.h"
#include "record_builder.h"

namespace {

using namespace cudatrace;
using cudatrace_test::init_rec;
using cudatrace_test::RecBuf;

std::string json_of(const ct_call& rec, KernelNames* names) {
  Call c;
  EXPECT_TRUE(decode_call(rec, names, c));
  auto out = make_json_writer();
  out->call(c, CallAnalysis{});
  return fmt::to_string(*out->buffer());
}

// JSON of `rec`, read back and written again: the same line.
void expect_round_trip(const ct_call& rec, KernelNames* names) {
  const std::string line = json_of(rec, names);
  TraceLine parsed;
  std::string error;
  ASSERT_TRUE(parsed.parse(std::string_view(line).substr(0, line.size() - 1), error)) << error << "\n" << line;
  ASSERT_EQ(parsed.type(), TraceLine::Type::Call);
  KernelNames reread;
  if (!parsed.kernel_mangled().empty())
    reread.add(parsed.record().pid, parsed.kernel_handle(), parsed.kernel_mangled());
  EXPECT_EQ(json_of(parsed.record(), &reread), line);
}

// Every API of the table with arbitrary argument values, succeeding, failing
// and unfinished, with and without readable out-parameters: JSON -> record
// -> JSON gives the line back.
TEST(TraceLine, EveryApiRoundTrips) {
  std::mt19937_64 rng(2026);
  KernelNames names;
  names.set_symbolizer([](std::uint32_t, std::uint64_t) { return std::string("_ZN2ns6kernelIfEEvPT_i"); });
  for (const Api& api : apis()) {
    for (int variant = 0; variant < 4; ++variant) {
      RecBuf b;
      init_rec(b, api.symbol, 4242, "python3");
      for (auto& a : b.rec.args) a = variant == 3 ? rng() % 3 : rng();  // 0..2: the special streams
      b.rec.outs[0] = variant == 2 ? cudatrace_test::float_bits(1.25f) : rng();
      b.rec.outs[1] = rng() >> 20;
      b.rec.ret = variant == 1 ? 2 : 0;
      b.rec.depth = static_cast<std::uint8_t>(variant);
      b.rec.parent_api = variant ? apis().front().id : kNoApi;
      b.rec.caller = variant == 3 ? 0 : 0x401234;
      if (variant == 2) b.rec.flags = CT_FLAG_OUT1_FAULT;
      if (variant == 3) {
        b.rec.type = CT_REC_UNFINISHED;
        b.rec.dur_ns = 0;
      }
      if (api.payload_index >= 0) {
        if (api.spec->args[api.payload_index].type == ArgType::String) {
          cudatrace_test::set_string_payload(b, "_Z6kernelPfi \"quoted\"\t\xce\xbb");
        } else if (variant != 1) {  // variant 1: a config that could not be read
          std::uint8_t config[CT_LAUNCH_CONFIG_SIZE + CT_LAUNCH_ATTR_SIZE] = {};
          for (std::size_t i = 0; i < 24; i += 4) config[i] = static_cast<std::uint8_t>(i + 1);
          config[24] = 64;
          config[32] = variant == 3 ? 1 : 0x50;
          config[CT_LAUNCH_CONFIG_SIZE] = 4;  // cluster dimension
          for (int i = 0; i < 3; ++i) config[CT_LAUNCH_CONFIG_SIZE + 8 + 4 * i] = static_cast<std::uint8_t>(2 + i);
          cudatrace_test::set_payload(b, config, variant == 2 ? sizeof config : CT_LAUNCH_CONFIG_SIZE);
        }
      }
      SCOPED_TRACE(api.symbol + " variant " + std::to_string(variant));
      expect_round_trip(b.rec, &names);
    }
  }
}

TEST(TraceLine, WarningAndEndLines) {
  TraceLine line;
  std::string error;
  ASSERT_TRUE(line.parse(
      R"({"type":"warning","kind":"pageable_async_copy","ts_ns":5,"pid":2,"tid":2,"api":"cudaMemcpyAsync",)"
      R"("host_ptr":"0x55c2594042a0","caller":"0x401000","location":"app+0x137b","message":"m"})",
      error))
      << error;
  EXPECT_EQ(line.type(), TraceLine::Type::Warning);
  EXPECT_EQ(line.warning().pid, 2u);
  EXPECT_EQ(line.warning().caller, 0x401000u);
  EXPECT_EQ(line.warning().location, "app+0x137b");
  ASSERT_TRUE(line.parse(R"({"type":"end","calls":17,"lost":5,"unfinished":0,"lost_detail":{"ring_buffer":3,)"
                         R"("thread_table":1,"depth_overflow":1,"control":2},"unmatched":4})",
                         error))
      << error;
  EXPECT_EQ(line.type(), TraceLine::Type::End);
  EXPECT_EQ(line.end().calls(), 5u);
  EXPECT_EQ(line.end().control, 2u);
  EXPECT_EQ(line.end().unmatched, 4u);
}

std::string parse_error(std::string_view text) {
  TraceLine line;
  std::string error;
  EXPECT_FALSE(line.parse(text, error)) << text;
  return error;
}

TEST(TraceLine, BadLinesSayWhatIsWrong) {
  const std::string call =
      R"({"type":"call","ts_ns":1000,"pid":1,"tid":1,"comm":"a","layer":"runtime","api":"cudaFree","dur_ns":5,)"
      R"("ret":0,"ret_name":"cudaSuccess","depth":0,"args":{"devPtr":"0xd000"}})";
  TraceLine line;
  std::string error;
  ASSERT_TRUE(line.parse(call, error)) << error;
  EXPECT_EQ(parse_error("cudatrace: 3 calls"), "not JSON");
  EXPECT_EQ(parse_error(call.substr(0, 60)), "not JSON (the line ends early: a truncated trace?)");
  EXPECT_EQ(parse_error("[1,2]"), "not a JSON object");
  EXPECT_EQ(parse_error(R"({"type":"call","pid":27e853})"), "not JSON");  // found by tests/fuzz
  EXPECT_EQ(parse_error(R"({"api":"cudaFree"})"), "no \"type\" field");
  EXPECT_EQ(parse_error(R"({"type":"frame"})"), "unknown record type \"frame\"");
  EXPECT_EQ(parse_error(R"({"type":"summary","final":true})"),
            "a --summary report, not a trace of calls (record the trace with --json alone)");
  std::string bad = call;
  bad.replace(bad.find("cudaFree"), 8, "cudaFrob");
  EXPECT_EQ(parse_error(bad), "unknown API \"cudaFrob\" (a trace from another cudatrace version?)");
  bad = call;
  bad.replace(bad.find("\"0xd000\""), 8, "53248");
  EXPECT_EQ(parse_error(bad), "cudaFree argument devPtr is not a hex string \"0x...\"");
  bad = call;
  bad.replace(bad.find("\"devPtr\""), 8, "\"ptr\"");
  EXPECT_EQ(parse_error(bad), "no \"devPtr\" field");
  bad = call;
  bad.replace(bad.find("\"pid\":1"), 7, "\"pid\":-1");
  EXPECT_EQ(parse_error(bad), "\"pid\" is not a non-negative integer");
  bad = call;
  bad.replace(bad.find("\"depth\":0"), 9, "\"depth\":99");
  EXPECT_EQ(parse_error(bad), "\"depth\" out of range");
}

// An end line is read for its losses; one whose counts are not counts, or a
// call line of no layer or another API's, is not a cudatrace line.
TEST(TraceLine, EndLineAndLayerMustBeWhatTheTracerWrites) {
  const std::string end =
      R"({"type":"end","calls":2,"lost":0,"unfinished":0,"lost_detail":{"ring_buffer":0,"thread_table":0,)"
      R"("depth_overflow":0,"output":0,"control":0},"unmatched":0})";
  TraceLine line;
  std::string error;
  ASSERT_TRUE(line.parse(end, error)) << error;
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string bad = end;
    bad.replace(bad.find(from), from.size(), to);
    return parse_error(bad);
  };
  EXPECT_EQ(with("\"calls\":2", "\"calls\":\"many\""), "\"calls\" is not a non-negative integer");
  EXPECT_EQ(with("\"lost\":0", "\"lost\":-3"), "\"lost\" is not a non-negative integer");
  EXPECT_EQ(with("\"unfinished\":0,", ""), "no \"unfinished\" field");
  EXPECT_EQ(with("\"output\":0", "\"output\":1.5"), "lost_detail.output is not a non-negative integer");

  const std::string call =
      R"({"type":"call","ts_ns":1000,"pid":1,"tid":1,"comm":"a","layer":"runtime","api":"cudaFree","dur_ns":5,)"
      R"("ret":0,"ret_name":"cudaSuccess","depth":0,"args":{"devPtr":"0xd000"}})";
  std::string bad = call;
  bad.replace(bad.find("runtime"), 7, "quantum");
  EXPECT_EQ(parse_error(bad), "\"layer\" is \"quantum\", but cudaFree is of the runtime layer");
  bad = call;
  bad.replace(bad.find("runtime"), 7, "driver");
  EXPECT_EQ(parse_error(bad), "\"layer\" is \"driver\", but cudaFree is of the runtime layer");
  bad = call;
  bad.replace(bad.find("\"runtime\""), 9, "7");
  EXPECT_EQ(parse_error(bad), "\"layer\" is not a string");
}

// A comm of 15 bytes that were not UTF-8 is 45 bytes of U+FFFD in JSON:
// read back into the kernel's 15 bytes, it is cut between characters.
TEST(TraceLine, LongCommIsCutBetweenUtf8Characters) {
  const std::string call =
      R"({"type":"call","ts_ns":1000,"pid":1,"tid":1,"comm":"ab\ufffd\ufffd\ufffd\ufffd\ufffd","layer":"runtime",)"
      R"("api":"cudaFree","dur_ns":5,"ret":0,"ret_name":"cudaSuccess","depth":0,"args":{"devPtr":"0xd000"}})";
  TraceLine line;
  std::string error;
  ASSERT_TRUE(line.parse(call, error)) << error;
  EXPECT_EQ(std::string(line.record().comm), "ab\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // 14 bytes, not 15
}

// --py-stack: an unnamed frame (its code object freed or replaced before it
// was read) is written with null fields, read back unnamed, and written again
// the same; its text is "?".
TEST(TraceLine, UnnamedPythonFrameRoundTrips) {
  Call c;
  RecBuf buf;
  init_rec(buf, "cudaFree");
  ASSERT_TRUE(decode_call(buf.rec, nullptr, c));
  py_stack(c) = {PyFrame{}, PyFrame{"main", "/app/train.py", 12}};
  auto out = make_json_writer();
  out->call(c, CallAnalysis{});
  const std::string line = fmt::to_string(*out->buffer());
  EXPECT_NE(line.find(R"("py_stack":[{"func":null,"file":null,"line":null},{"func":"main","file":"/app/train.py","line":12}])"),
            std::string::npos)
      << line;
  TraceLine parsed;
  std::string error;
  ASSERT_TRUE(parsed.parse(std::string_view(line).substr(0, line.size() - 1), error)) << error << "\n" << line;
  const std::vector<PyFrame>& read = py_stack(parsed.facets());
  ASSERT_EQ(read.size(), 2u);
  EXPECT_TRUE(read[0].unnamed());
  EXPECT_EQ(py_frame_text(read[0]), "?");
  EXPECT_EQ(py_frame_text(read[1]), "train.py:12 main");
  py_stack(c) = read;
  auto again = make_json_writer();
  again->call(c, CallAnalysis{});
  EXPECT_EQ(fmt::to_string(*again->buffer()), line);
}

// run_report on a file: its exit status and what it wrote to stderr (to
// stdout: in `out`, if given).
std::pair<int, std::string> report_file(const std::string& text, bool summary = false, std::string* out = nullptr,
                                        bool json = false) {
  char path[] = "/tmp/cudatrace-offline-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  Options opts;
  for (int g = 0; g < kGroupCount; ++g) opts.display.group[g] = true;
  opts.summary = opts.summary_tables = summary;
  opts.json = json;
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int rc = run_report(opts, path);
  const std::string stdout_text = testing::internal::GetCapturedStdout();
  if (out) *out = stdout_text;
  std::string err = testing::internal::GetCapturedStderr();
  unlink(path);
  for (auto at = err.find(path); at != std::string::npos; at = err.find(path)) err.replace(at, std::strlen(path), "TRACE");
  return {rc, err};
}

const std::string kCall =
    R"({"type":"call","ts_ns":1000,"pid":1,"tid":1,"comm":"a","layer":"runtime","api":"cudaFree","dur_ns":5,)"
    R"("ret":0,"ret_name":"cudaSuccess","depth":0,"args":{"devPtr":"0xd000"}})"
    "\n";
const std::string kEnd =
    R"({"type":"end","calls":2,"lost":0,"unfinished":0,"lost_detail":{"ring_buffer":0,"thread_table":0,)"
    R"("depth_overflow":0,"control":0},"unmatched":0})"
    "\n";

// An end line counting `calls` calls.
std::string end_line(int calls) {
  std::string end = kEnd;
  return end.replace(end.find("\"calls\":2"), 9, "\"calls\":" + std::to_string(calls));
}

// A call line of cudaFree returning at ts_ns + dur_ns ("unfinished": dur_ns < 0).
std::string call_line(std::uint64_t ts_ns, std::int64_t dur_ns, std::uint32_t tid = 1, std::uint64_t ptr = 0xd000) {
  if (dur_ns < 0)
    return fmt::format(R"({{"type":"unfinished","ts_ns":{},"pid":1,"tid":{},"comm":"a","layer":"runtime",)"
                       R"("api":"cudaFree","depth":0,"args":{{"devPtr":"{:#x}"}}}})"
                       "\n",
                       ts_ns, tid, ptr);
  return fmt::format(R"({{"type":"call","ts_ns":{},"pid":1,"tid":{},"comm":"a","layer":"runtime","api":"cudaFree",)"
                     R"("dur_ns":{},"ret":0,"ret_name":"cudaSuccess","depth":0,"args":{{"devPtr":"{:#x}"}}}})"
                     "\n",
                     ts_ns, tid, dur_ns, ptr);
}

TEST(RunReport, BadInputNamesTheLine) {
  EXPECT_EQ(report_file(kCall + kCall + kEnd), std::make_pair(0, std::string("cudatrace: 2 calls traced, 0 lost, 0 unfinished\n")));
  EXPECT_EQ(report_file(kCall + "garbage\n" + kEnd), std::make_pair(7, std::string("cudatrace: TRACE:2: not JSON\n")));
  EXPECT_EQ(report_file(kCall.substr(0, 50) + "\n" + kCall),
            std::make_pair(7, std::string("cudatrace: TRACE:1: not JSON (the line ends early: a truncated trace?)\n")));
  // A last line cut in the middle (a full disk) is left out, with one warning.
  EXPECT_EQ(report_file(kCall + kCall.substr(0, 50)),
            std::make_pair(0, std::string("cudatrace: warning: TRACE:2: the last line is cut short (no end line: writing "
                                          "the trace stopped in the middle of a line, on a full disk say); this report "
                                          "is of the 1 lines before it\ncudatrace: 1 calls traced, 0 lost, 0 unfinished\n")));
  EXPECT_EQ(report_file(kCall + kEnd + kCall), std::make_pair(7, std::string("cudatrace: TRACE:3: a line after the end line\n")));
  EXPECT_EQ(report_file(""), std::make_pair(7, std::string("cudatrace: TRACE: not a trace: no calls and no end line in it\n")));
  // A trace cut short still reports what it has, and says so.
  EXPECT_EQ(report_file(kCall),
            std::make_pair(0, std::string("cudatrace: warning: TRACE has no end line: the trace was cut short, its last "
                                          "calls may be missing\ncudatrace: 1 calls traced, 0 lost, 0 unfinished\n")));
  // Losses recorded at trace time are reported again.
  std::string lossy = kEnd;
  lossy.replace(lossy.find("\"ring_buffer\":0"), 15, "\"ring_buffer\":9");
  EXPECT_NE(report_file(kCall + lossy).second.find("lost 9 records (ring buffer full: 9"), std::string::npos);
  EXPECT_EQ(report_file(kEnd, true).first, 0);  // no calls: empty tables
}

// What a trace quotes (a warning's location, the API a bad line names) is
// anyone's bytes: escaped on stderr like every name from the traced system.
// The warning is found again from the copy it was about, at the location
// the trace gave for its call site.
TEST(RunReport, WarningsAndBadLinesReachTheTerminalEscaped) {
  const std::string warning =
      R"({"type":"warning","kind":"pageable_async_copy","ts_ns":5,"pid":1,"tid":1,"api":"cudaMemcpyAsync",)"
      R"("host_ptr":"0x7000","caller":"0x401000","location":"app \u001b]0;owned\u0007\r\n\u009b","message":"m"})"
      "\n";
  const std::string copy =
      R"({"type":"call","ts_ns":1000,"pid":1,"tid":1,"comm":"a","layer":"runtime","api":"cudaMemcpyAsync",)"
      R"("dur_ns":5,"ret":0,"ret_name":"cudaSuccess","depth":0,"args":{"dst":"0xd000","src":"0x7000","count":64,)"
      R"("kind":"cudaMemcpyHostToDevice","stream":"0x0"},"caller":"0x401000"})"
      "\n";
  EXPECT_EQ(report_file(warning + copy + end_line(1)).second,
            "cudatrace: warning: cudaMemcpyAsync from pageable host memory 0x7000 at app "
            "\\x1b]0;owned\\x07\\x0d\\x0a\\xc2\\x9b: the copy is synchronous\n"
            "cudatrace: 1 calls traced, 0 lost, 0 unfinished\n");
  std::string bad = kCall;
  bad.replace(bad.find("cudaFree"), 8, "cuda\\u001b[2JFree");
  EXPECT_EQ(report_file(bad).second,
            "cudatrace: TRACE:1: unknown API \"cuda\\x1b[2JFree\" (a trace from another cudatrace version?)\n");
}

// A FIFO nobody writes to would block an open for ever: it is waited on for
// a writer, for a bounded time; one that comes is read as any trace.
TEST(OpenTrace, FifoWithoutAWriterFailsAfterItsWait) {
  const std::string fifo = "/tmp/cudatrace-offline-fifo-" + std::to_string(getpid());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(open_trace(fifo, std::chrono::milliseconds(300), error), nullptr);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_EQ(error, "cannot read " + fifo + ": it is a FIFO and no process opened it for writing within 0 s");

  // A writer 100 ms later, which writes after a pause: every byte is read, the first one too.
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int fd = open(fifo.c_str(), O_WRONLY);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(write(fd, "line 1\nline 2\n", 14), 14);
    close(fd);
  });
  std::FILE* in = open_trace(fifo, std::chrono::seconds(10), error);
  ASSERT_NE(in, nullptr) << error;
  char text[64] = {};
  EXPECT_EQ(std::fread(text, 1, sizeof text - 1, in), 14u);
  EXPECT_STREQ(text, "line 1\nline 2\n");
  std::fclose(in);
  writer.join();
  unlink(fifo.c_str());
}

// Whatever the input, a line is read only up to kMaxTraceLineBytes: /dev/zero
// and a file of NULs (lines without end) are one line, refused.
TEST(RunReport, LinesLongerThanTheLimitAreRefused) {
  const std::string too_long = "cudatrace: TRACE:2: a line longer than 1 MiB: not a line of a cudatrace trace\n";
  EXPECT_EQ(report_file(kCall + std::string(kMaxTraceLineBytes + 1, 'x') + "\n" + kEnd), std::make_pair(7, too_long));
  EXPECT_EQ(report_file(kCall + std::string(3 * kMaxTraceLineBytes, 'x')), std::make_pair(7, too_long));  // no newline
  EXPECT_EQ(report_file(kCall + std::string(3 * kMaxTraceLineBytes, '\0')), std::make_pair(7, too_long));
  EXPECT_EQ(report_file(std::string(8, '\0') + "\n"), std::make_pair(7, std::string("cudatrace: TRACE:1: not JSON\n")));
  // As long as the limit: read (and found to be no trace line).
  std::string longest = kCall;
  longest.replace(longest.find("\"comm\":\"a\""), 10, "\"comm\":\"" + std::string(kMaxTraceLineBytes + 2 - kCall.size(), 'a') + "\"");
  ASSERT_EQ(longest.size(), kMaxTraceLineBytes + 1);  // with its newline
  EXPECT_EQ(report_file(longest + end_line(1)).first, 0);
}

// Lines are written when their calls return, so a trace is in order of
// return: a nested call comes before its parent. Lines out of that order
// within the window are put in order; the reversed trace is reported as
// the trace itself.
TEST(RunReport, CallsAreReportedInTheOrderTheyReturned) {
  // In the order of return: 0xb at 2,500 ns, 0xc, 0xa (which began first, at 1,000 ns), 0xd.
  const std::vector<std::string> lines = {call_line(2000, 500, 2, 0xb), call_line(3000, 50, 1, 0xc),
                                          call_line(1000, 5000, 1, 0xa), call_line(2500, 9000, 2, 0xd)};
  std::string ordered, reversed;
  EXPECT_EQ(report_file(lines[0] + lines[1] + lines[2] + lines[3] + end_line(4), false, &ordered).first, 0);
  EXPECT_EQ(report_file(lines[3] + lines[2] + lines[1] + lines[0] + end_line(4), false, &reversed).first, 0);
  EXPECT_EQ(reversed, ordered);
  EXPECT_LT(ordered.find("0xb"), ordered.find("0xc"));
  EXPECT_LT(ordered.find("0xc"), ordered.find("0xa"));
  EXPECT_LT(ordered.find("0xa"), ordered.find("0xd"));
  // Time 0 is the earliest entry (0xa's), not the first line's.
  EXPECT_NE(ordered.find("\n0.000002     a"), std::string::npos) << ordered;  // 0xc, at 3,000 ns
  EXPECT_NE(ordered.find("\n0.000000     a"), std::string::npos) << ordered;  // 0xa
}

// What the window cannot put in order is refused with the line it is on:
// a call that returned 1 s before one already reported (line 1).
TEST(RunReport, WhatCannotBePutInOrderIsRefused) {
  const std::uint64_t s = 1000000000;
  EXPECT_EQ(report_file(call_line(2 * s, 5) + call_line(4 * s, 5) + call_line(1 * s, 5) + end_line(3)),
            std::make_pair(7, std::string("cudatrace: TRACE:3: out of order: this call returned 1.000000 s before the "
                                          "call of line 1, which was already reported (a trace is read in the order "
                                          "cudatrace writes it, by return time, and put in order only within 1 s or "
                                          "65536 lines)\n")));
  // A reversed trace longer than the window.
  std::string reversed;
  for (int i = 10; i > 0; --i) reversed += call_line(i * s, 5);
  EXPECT_EQ(report_file(reversed + end_line(10)).first, 7);
  // An unfinished call is written where it was found open, whenever it began.
  std::string out;
  EXPECT_EQ(report_file(call_line(1000, 5, 1, 0xa) + call_line(3 * s, 5, 2, 0xb) + call_line(500, -1, 3, 0xc) +
                            R"({"type":"end","calls":2,"lost":0,"unfinished":1,"lost_detail":{"ring_buffer":0,)"
                            R"("thread_table":0,"depth_overflow":0,"control":0},"unmatched":0})"
                            "\n",
                        false, &out),
            std::make_pair(0, std::string("cudatrace: 2 calls traced, 0 lost, 1 unfinished\n")));
  EXPECT_LT(out.find("0xb"), out.find("0xc")) << out;
}

// An end line that does not count the lines the trace holds: one warning.
TEST(RunReport, EndLineThatDoesNotCountTheLinesIsSaid) {
  EXPECT_EQ(report_file(kCall + kCall + kCall + kEnd),
            std::make_pair(0, std::string("cudatrace: warning: TRACE: its end line counts 2 calls and 0 unfinished, "
                                          "but it holds 3 and 0: lines were added or removed since cudatrace wrote it "
                                          "(this report is of the lines it holds)\n"
                                          "cudatrace: 3 calls traced, 0 lost, 0 unfinished\n")));
  EXPECT_EQ(report_file(kCall + kCall + kEnd).second, "cudatrace: 2 calls traced, 0 lost, 0 unfinished\n");
}

// Times no clock since boot gives (issue 47: a dur_ns of 10^18, a ts_ns
// near 2^64 made tables whose sums wrapped): each such call is left out,
// said once per field with its line, and counted at the end.
TEST(RunReport, CallsOfImpossibleTimesAreLeftOutSaidAndCounted) {
  const std::uint64_t near_wrap = 18446744073709551000ull;
  std::string out;
  const auto [rc, err] =
      report_file(call_line(1000, 5, 1, 0xa) + call_line(2000, 1000000000000000000, 1, 0xb) +
                      call_line(near_wrap, 5, 1, 0xc) + call_line(3000, 2000000000000000000, 1, 0xd) +
                      call_line(near_wrap + 1, -1, 1, 0xe) + call_line(4000, 7, 1, 0xf) +
                      end_line(5).replace(end_line(5).find("\"unfinished\":0"), 14, "\"unfinished\":1"),
                  true, &out);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(err,
            "cudatrace: warning: TRACE:2: \"dur_ns\" 1000000000000000000 cannot be real (a duration of 10^18 ns, 31 "
            "years, or more): such calls are left out, and counted at the end\n"
            "cudatrace: warning: TRACE:3: \"ts_ns\" 18446744073709551000 cannot be real (a time since boot of 10^18 "
            "ns, 31 years, or more): such calls are left out, and counted at the end\n"
            "cudatrace: warning: TRACE: 4 calls left out: 2 with an impossible \"ts_ns\", 2 with an impossible "
            "\"dur_ns\"\n"
            "cudatrace: 2 calls traced, 0 lost, 0 unfinished\n");
  // The tables hold the two real calls alone: 12 ns in all.
  EXPECT_NE(out.find("cudaFree"), std::string::npos) << out;
  EXPECT_EQ(out.find("years"), std::string::npos) << out;
}

// A trace has no exit line: what report keeps of processes is bounded
// (issue 47: 994 MiB after 32 s of lines of distinct pids). Past 4,096, an
// eighth at a time whose last calls are the oldest are forgotten, counted.
TEST(RunReport, ProcessesPastTheBoundAreForgottenAndCounted) {
  std::string trace, first_4096;
  for (std::uint32_t pid = 1; pid <= 5000; ++pid) {
    std::string line = call_line(1000 + pid, 5);
    trace += line.replace(line.find("\"pid\":1,"), 8, "\"pid\":" + std::to_string(pid) + ",");
    if (pid == 4096) first_4096 = trace;
  }
  std::string out;
  const auto [rc, err] = report_file(trace + end_line(5000), true, &out);
  EXPECT_EQ(rc, 0);
  // Forgotten at the 4,097th process (512) and at the 4,609th (512 more).
  EXPECT_EQ(err,
            "cudatrace: warning: TRACE: more than 4096 processes made calls: 1024 processes whose last calls were the "
            "oldest were forgotten (their streams, kernel names and handles start afresh should they call again)\n"
            "cudatrace: 5000 calls traced, 0 lost, 0 unfinished\n");
  EXPECT_EQ(report_file(first_4096 + end_line(4096), true).second, "cudatrace: 4096 calls traced, 0 lost, 0 unfinished\n");
}

// The summary lists the contexts of the first 4,096 processes that publish
// one, and counts the others: each is anyone's, of up to 64 attributes.
TEST(RunReport, SummaryListsABoundedNumberOfContexts) {
  std::string trace;
  for (std::uint32_t pid = 1; pid <= 4100; ++pid) {
    trace += R"({"type":"process","pid":)" + std::to_string(pid) + R"(,"resource":{"service.name":"s"}})" + "\n";
    std::string line = call_line(1000 + pid, 5);
    trace += line.replace(line.find("\"pid\":1,"), 8, "\"pid\":" + std::to_string(pid) + ",");
  }
  std::string out;
  EXPECT_EQ(report_file(trace + end_line(4100), true, &out).first, 0);
  EXPECT_NE(out.find("process 4096: service.name=s\n4 more processes published a context (not listed)\n"),
            std::string::npos);
  EXPECT_EQ(out.find("process 4097:"), std::string::npos);
  EXPECT_EQ(report_file(trace + end_line(4100), true, &out, true).first, 0);
  EXPECT_NE(out.find("\"processes_unlisted\":4"), std::string::npos);
}

// Every facet (decode/facet.h) comes back from `cudatrace report --json` as
// the trace wrote it: the sample line carries each facet's fields (a facet
// added without a sample here fails), each facet reads its own back, and
// the report writes them again byte for byte.
TEST(RunReport, EveryFacetRoundTrips) {
  const std::string facets =
      R"(,"trace_id":"0102030405060708090a0b0c0d0e0f10","span_id":"a0a1a2a3a4a5a6a7","trace_flags":1,)"
      R"("span_attrs":{"http.route":"/predict"})"
      R"(,"stack":[{"addr":"0x4011d6","function":"main","function_offset":22,"module":"/app/train",)"
      R"("module_offset":4566},{"addr":"0x7f0000001000","function":null,"function_offset":null,"module":null,)"
      R"("module_offset":null}])"
      R"(,"py_stack":[{"func":null,"file":null,"line":null},{"func":"main","file":"/app/train.py","line":12}])";
  std::string line = call_line(1000, 5);
  line.insert(line.rfind('}'), facets);

  TraceLine parsed;
  std::string error;
  ASSERT_TRUE(parsed.parse(std::string_view(line).substr(0, line.size() - 1), error)) << error;
  for (std::size_t i = 0; i < call_facets().size(); ++i)
    EXPECT_TRUE(call_facets()[i]->present(parsed.facets())) << "facet " << i << " has no fields in the sample line";

  std::string out;
  ASSERT_EQ(report_file(line + end_line(1), false, &out, true).first, 0);
  EXPECT_NE(out.find(facets + "}\n"), std::string::npos) << out;

  // A facet's field that is not what it writes: one clear line, no report.
  std::string bad = call_line(1000, 5);
  bad.insert(bad.rfind('}'), R"(,"py_stack":7)");
  EXPECT_EQ(parse_error(bad), "\"py_stack\" is not an array of Python frames");
}

// report --json writes the process lines the trace has, and no other
// (issue 47: a call with span attributes and no process line got one
// made up); a context published again is written again.
TEST(RunReport, JsonHasTheProcessLinesOfTheTraceAlone) {
  std::string spanned = call_line(1000, 5);
  spanned.insert(spanned.rfind('}'), R"(,"trace_id":"0102030405060708090a0b0c0d0e0f10","span_id":"a0a1a2a3a4a5a6a7",)"
                                     R"("trace_flags":1,"span_attrs":{"http.route":"/predict"})");
  std::string out;
  EXPECT_EQ(report_file(spanned + spanned + end_line(2), false, &out, true).first, 0);
  EXPECT_EQ(out.find("\"type\":\"process\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"span_attrs\":{\"http.route\":\"/predict\"}"), std::string::npos) << out;

  const auto process = [](const std::string& service) {
    return R"({"type":"process","pid":1,"resource":{"service.name":")" + service +
           R"("},"span_keys":["http.route"]})" + "\n";
  };
  EXPECT_EQ(report_file(process("a") + spanned + spanned + process("b") + spanned + end_line(3), false, &out, true)
                .first,
            0);
  std::vector<std::string> written;
  for (std::size_t at = out.find("{\"type\":\"process\""); at != std::string::npos;
       at = out.find("{\"type\":\"process\"", at + 1))
    written.push_back(out.substr(at, out.find('\n', at) - at + 1));
  EXPECT_EQ(written, (std::vector<std::string>{process("a"), process("b")})) << out;
}

TEST(RunReport, UnreadableFile) {
  Options opts;
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_report(opts, "/nonexistent/trace.jsonl"), kExitInput);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "cudatrace: cannot read /nonexistent/trace.jsonl: No such file or directory\n");
}

}  // namespace
