#include "cudatrace/analysis/streams.h"
#include "cudatrace/render/json_format.h"
#include "cudatrace/render/text.h"
#include "cudatrace/render/format.h"

#include <gtest/gtest.h>

#include <cstring>

#include "json_checker.h"
#include "stream_feed.h"

namespace {

using namespace cudatrace;
using cudatrace_test::CallSpec;
using cudatrace_test::JsonParser;
using cudatrace_test::JsonValue;
using cudatrace_test::StreamFeed;

constexpr std::uint64_t kS1 = 0x5010, kS2 = 0x5020, kS3 = 0x5030;
constexpr std::uint64_t kE1 = 0xe010, kE2 = 0xe020;
constexpr std::uint64_t kK1 = 0xa1, kK2 = 0xa2, kK3 = 0xa3;
constexpr std::uint64_t kMiB = 1 << 20;

class Streams : public ::testing::Test {
 protected:
  void create_stream(std::uint64_t handle, std::uint32_t tid = 100) {
    f.feed("cudaStreamCreate", {{"pStream", handle}}, tid);
  }
  void create_event(std::uint64_t handle) { f.feed("cudaEventCreate", {{"event", handle}}); }
  const StreamActivity& launch(std::uint64_t kernel, std::uint64_t stream, std::uint32_t tid = 100) {
    return f.feed("cudaLaunchKernel", {{"func", kernel}, {"stream", stream}}, tid);
  }
  const StreamActivity& copy_async(std::uint64_t dst, std::uint64_t src, std::uint64_t bytes, std::uint64_t kind,
                                   std::uint64_t stream, std::uint64_t caller = 0x401000) {
    CallSpec s;
    s.symbol = "cudaMemcpyAsync";
    s.args = {{"dst", dst}, {"src", src}, {"count", bytes}, {"kind", kind}, {"stream", stream}};
    s.caller = caller;
    return f.feed(s);
  }
  std::string sync_stream(std::uint64_t stream, std::uint32_t tid = 100) {
    f.feed("cudaStreamSynchronize", {{"stream", stream}}, tid);
    return f.waited_text();
  }
  std::string sync_device() {
    f.feed("cudaDeviceSynchronize", {});
    return f.waited_text();
  }

  StreamFeed f;
};

// ---- Short ids -------------------------------------------------------------

TEST_F(Streams, StreamsAreNumberedInCreationOrder) {
  create_stream(kS2);
  EXPECT_EQ(f.id_of("pStream"), "s1");
  create_stream(kS1);
  EXPECT_EQ(f.id_of("pStream"), "s2");
  launch(kK1, kS2);
  EXPECT_EQ(f.id_of("stream"), "s1");
  launch(kK1, kS1);
  EXPECT_EQ(f.id_of("stream"), "s2");
}

TEST_F(Streams, StreamFirstSeenInUseGetsTheNextId) {
  create_stream(kS1);
  launch(kK1, 0x7000);  // created before tracing started
  EXPECT_EQ(f.id_of("stream"), "s2");
  launch(kK1, 0x7000);
  EXPECT_EQ(f.id_of("stream"), "s2");
}

TEST_F(Streams, SpecialStreamsAreNamed) {
  launch(kK1, 0);
  EXPECT_EQ(f.id_of("stream"), "default");
  launch(kK1, 1);  // cudaStreamLegacy
  EXPECT_EQ(f.id_of("stream"), "default");
  launch(kK1, 2);  // cudaStreamPerThread
  EXPECT_EQ(f.id_of("stream"), "per-thread");
  f.feed("cudaLaunchKernel_ptsz", {{"func", kK1}, {"stream", 0}});
  EXPECT_EQ(f.id_of("stream"), "per-thread");
  create_stream(kS1);
  EXPECT_EQ(f.id_of("pStream"), "s1") << "special streams take no s-number";
}

TEST_F(Streams, SynchronousCallsOfPerThreadBuildsUseThePerThreadStream) {
  f.feed("cudaMemset", {{"devPtr", 0xd000}, {"count", 1024}});
  f.feed("cudaStreamSynchronize_ptsz", {{"stream", 0}});
  EXPECT_EQ(f.waited_text(), "waited: nothing") << "the memset went to the legacy stream";
  f.feed("cudaMemsetAsync_ptsz", {{"devPtr", 0xd000}, {"count", 1024}, {"stream", 0}});
  f.feed("cudaStreamSynchronize_ptsz", {{"stream", 0}});
  EXPECT_EQ(f.waited_text(), "waited: per-thread: 1 memset 1.0 KiB");
}

TEST_F(Streams, EventsAreNumberedAndProcessesHaveTheirOwnIds) {
  create_event(kE2);
  EXPECT_EQ(f.id_of("event"), "e1");
  create_event(kE1);
  EXPECT_EQ(f.id_of("event"), "e2");
  CallSpec other;
  other.symbol = "cudaStreamCreate";
  other.args = {{"pStream", kS3}};
  other.pid = other.tid = 200;
  f.feed(other);
  EXPECT_EQ(f.id_of("pStream"), "s1");
  create_stream(kS3);
  EXPECT_EQ(f.id_of("pStream"), "s1") << "the same handle in another process is another stream";
}

// The tracker keeps the process of the record before at hand: records that
// alternate between processes still reach each one's own streams.
TEST_F(Streams, RecordsAlternatingBetweenProcessesKeepTheirOwnStreams) {
  create_stream(kS1);
  CallSpec other;
  other.symbol = "cudaStreamCreate";
  other.args = {{"pStream", kS2}};
  other.pid = other.tid = 200;
  f.feed(other);
  EXPECT_EQ(f.id_of("pStream"), "s1");
  create_stream(kS3);
  EXPECT_EQ(f.id_of("pStream"), "s2") << "process 100's second stream";
  EXPECT_EQ(launch(kK1, kS1).queued->lane_name, "stream s1");
  other.symbol = "cudaLaunchKernel";
  other.args = {{"func", kK1}, {"stream", kS2}};
  EXPECT_EQ(f.feed(other).queued->lane_name, "stream s1") << "process 200's first stream";
  EXPECT_EQ(launch(kK1, kS3).queued->lane_name, "stream s2");
}

TEST_F(Streams, NullEventGetsNoId) {
  f.feed("cudaEventRecord", {{"event", 0}, {"stream", 0}});
  EXPECT_EQ(f.id_of("event"), "");
  create_event(kE1);
  EXPECT_EQ(f.id_of("event"), "e1");
}

TEST_F(Streams, ElapsedTimeShowsBothEvents) {
  create_event(kE1);
  create_event(kE2);
  f.feed("cudaEventElapsedTime", {{"ms", 0x3fc00000}, {"start", kE1}, {"end", kE2}});
  EXPECT_EQ(f.id_of("start"), "e1");
  EXPECT_EQ(f.id_of("end"), "e2");
}

TEST_F(Streams, DestroyedHandleReusedByANewStreamGetsANewId) {
  create_stream(kS1);
  launch(kK1, kS1);
  f.feed("cudaStreamDestroy", {{"stream", kS1}});
  EXPECT_EQ(f.id_of("stream"), "s1");
  create_stream(kS1);
  EXPECT_EQ(f.id_of("pStream"), "s2");
  EXPECT_EQ(sync_stream(kS1), "waited: nothing") << "the old stream's work is not the new one's";
}

TEST_F(Streams, DestroyedEventHandleReusedGetsANewIdAndNoRecord) {
  create_stream(kS1);
  create_event(kE1);
  launch(kK1, kS1);
  f.feed("cudaEventRecord", {{"event", kE1}, {"stream", kS1}});
  f.feed("cudaEventDestroy", {{"event", kE1}});
  create_event(kE1);
  EXPECT_EQ(f.id_of("event"), "e2");
  f.feed("cudaEventSynchronize", {{"event", kE1}});
  EXPECT_EQ(f.waited_text(), "waited: e2 (never recorded)");
}

TEST_F(Streams, FailedCreateAssignsNothing) {
  CallSpec s;
  s.symbol = "cudaStreamCreate";
  s.args = {{"pStream", kS1}};
  s.ret = 2;
  f.feed(s);
  EXPECT_EQ(f.id_of("pStream"), "");
  create_stream(kS2);
  EXPECT_EQ(f.id_of("pStream"), "s1");
}

TEST_F(Streams, NestedDriverCreateAndRuntimeCreateAreOneStream) {
  CallSpec drv;
  drv.symbol = "cuStreamCreate";
  drv.args = {{"phStream", kS1}};
  drv.parent = "cudaStreamCreate";
  f.feed(drv);
  EXPECT_EQ(f.id_of("phStream"), "s1");
  create_stream(kS1);
  EXPECT_EQ(f.id_of("pStream"), "s1");
}

TEST_F(Streams, RuntimeInternalCreatesTakeNoIds) {
  CallSpec internal;
  internal.symbol = "cuStreamCreate";
  internal.args = {{"phStream", 0x9990}};
  internal.parent = "cudaMalloc";  // context set-up inside another call
  f.feed(internal);
  EXPECT_EQ(f.id_of("phStream"), "");
  internal.symbol = "cuEventCreate";
  internal.args = {{"phEvent", 0x9998}};
  f.feed(internal);
  EXPECT_EQ(f.id_of("phEvent"), "");
  create_stream(kS1);
  EXPECT_EQ(f.id_of("pStream"), "s1");
  create_event(kE1);
  EXPECT_EQ(f.id_of("event"), "e1");
}

TEST_F(Streams, NestedCallWithUnknownHandleGetsNoId) {
  CallSpec drv;
  drv.symbol = "cuLaunchKernel";
  drv.args = {{"f", kK1}, {"hStream", 0x9990}};
  drv.parent = "cudaLaunchKernel";
  f.feed(drv);
  EXPECT_EQ(f.id_of("hStream"), "") << "the runtime's own handle must not take an s-number";
  create_stream(kS1);
  EXPECT_EQ(f.id_of("pStream"), "s1");
}

TEST_F(Streams, LaunchConfigStreamGetsItsId) {
  create_stream(kS2);
  CallSpec s;
  s.symbol = "cudaLaunchKernelExC";
  s.args = {{"func", kK1}};
  s.payload.resize(CT_LAUNCH_CONFIG_SIZE);
  std::memcpy(s.payload.data() + 32, &kS2, sizeof kS2);  // cudaLaunchConfig_t::stream
  const StreamActivity& a = f.feed(s);
  EXPECT_EQ(f.id_of("stream"), "s1");
  ASSERT_TRUE(a.queued);
  EXPECT_EQ(a.queued->stream, "s1");
  EXPECT_EQ(a.queued->kernel, "k1");
}

// ---- Queues and synchronisation ----------------------------------------------

TEST_F(Streams, StreamSyncWaitsForWhatWasQueuedSinceTheLastSync) {
  create_stream(kS1);
  launch(kK1, kS1);
  launch(kK1, kS1);
  launch(kK2, kS1);
  copy_async(0xd000, 0x7000, 4 * kMiB, 1, kS1);
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 3 launches (k1 x2, k2), 1 copy HtoD 4.0 MiB");
  EXPECT_EQ(f.call().waited->kind, WaitInfo::Kind::Stream);
  EXPECT_EQ(f.call().waited->target, "s1");
  EXPECT_EQ(sync_stream(kS1), "waited: nothing");
  launch(kK3, kS1);
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 launch (k3)");
}

TEST_F(Streams, StreamSyncLeavesOtherStreamsQueued) {
  create_stream(kS1);
  create_stream(kS2);
  launch(kK1, kS1);
  launch(kK2, kS2);
  EXPECT_EQ(sync_stream(kS2), "waited: s2: 1 launch (k2)");
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 launch (k1)");
}

TEST_F(Streams, DeviceSyncWaitsForEveryStreamInFirstSeenOrder) {
  create_stream(kS1);
  create_stream(kS2);
  launch(kK2, kS2);
  f.feed("cudaMemsetAsync", {{"devPtr", 0xd000}, {"count", 512}, {"stream", kS1}});
  launch(kK1, 0);
  copy_async(0x7000, 0xd000, 3 * 1024, 2, kS2);
  copy_async(0x7000, 0xd000, 1024, 2, kS2);
  EXPECT_EQ(sync_device(), "waited: s1: 1 memset 512 B; s2: 1 launch (k2), 2 copies DtoH 4.0 KiB; default: 1 launch (k1)");
  EXPECT_EQ(f.call().waited->kind, WaitInfo::Kind::Device);
  EXPECT_EQ(sync_device(), "waited: nothing");
  EXPECT_EQ(sync_stream(kS2), "waited: nothing");
}

TEST_F(Streams, DeviceSyncCoversOtherThreadsPerThreadStreamsButNotOtherProcesses) {
  f.feed("cudaLaunchKernel_ptsz", {{"func", kK1}, {"stream", 0}}, 101);
  CallSpec other;
  other.symbol = "cudaLaunchKernel";
  other.args = {{"func", kK2}, {"stream", 0}};
  other.pid = other.tid = 200;
  f.feed(other);
  EXPECT_EQ(sync_device(), "waited: per-thread: 1 launch (k1)");
}

TEST_F(Streams, PerThreadStreamsAreSeparatePerThread) {
  f.feed("cudaLaunchKernel_ptsz", {{"func", kK1}, {"stream", 0}}, 101);
  f.feed("cudaLaunchKernel", {{"func", kK2}, {"stream", 2}}, 102);
  EXPECT_EQ(sync_stream(2, 102), "waited: per-thread: 1 launch (k2)");
  EXPECT_EQ(sync_stream(2, 101), "waited: per-thread: 1 launch (k1)");
}

TEST_F(Streams, LaunchThroughTheRuntimeCountsOnceNotAgainForItsDriverCall) {
  create_stream(kS1);
  CallSpec drv;
  drv.symbol = "cuLaunchKernel";
  drv.args = {{"f", kK1}, {"hStream", kS1}};
  drv.parent = "cudaLaunchKernel";
  const StreamActivity& nested = f.feed(drv);
  EXPECT_FALSE(nested.queued);
  EXPECT_EQ(f.id_of("hStream"), "s1") << "nested calls still show ids";
  EXPECT_TRUE(launch(kK1, kS1).queued);
  CallSpec drv_sync;
  drv_sync.symbol = "cuStreamSynchronize";
  drv_sync.args = {{"hStream", kS1}};
  drv_sync.parent = "cudaStreamSynchronize";
  f.feed(drv_sync);
  EXPECT_EQ(f.call().waited, nullptr) << "only the outermost sync is annotated";
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 launch (k1)");
}

TEST_F(Streams, DriverOnlyTraceCountsTheDriverCalls) {
  f.feed("cuStreamCreate", {{"phStream", kS1}});
  f.feed("cuLaunchKernel", {{"f", kK1}, {"hStream", kS1}});
  f.feed("cuMemcpyHtoDAsync_v2", {{"dstDevice", 0xd000}, {"srcHost", 0x7000}, {"ByteCount", 2048}, {"hStream", kS1}});
  f.feed("cuCtxSynchronize", {});
  EXPECT_EQ(f.waited_text(), "waited: s1: 1 launch (k1), 1 copy HtoD 2.0 KiB");
}

TEST_F(Streams, FailedAndUnfinishedCallsQueueNothing) {
  create_stream(kS1);
  CallSpec failed;
  failed.symbol = "cudaLaunchKernel";
  failed.args = {{"func", kK1}, {"stream", kS1}};
  failed.ret = 35;
  EXPECT_FALSE(f.feed(failed).queued);
  CallSpec unfinished = failed;
  unfinished.ret = 0;
  unfinished.unfinished = true;
  EXPECT_FALSE(f.feed(unfinished).queued);
  EXPECT_EQ(f.id_of("stream"), "s1");
  EXPECT_EQ(sync_stream(kS1), "waited: nothing");
}

TEST_F(Streams, FailedSyncDoesNotCompleteTheQueue) {
  create_stream(kS1);
  launch(kK1, kS1);
  CallSpec s;
  s.symbol = "cudaStreamSynchronize";
  s.args = {{"stream", kS1}};
  s.ret = 35;
  f.feed(s);
  EXPECT_EQ(f.call().waited, nullptr);
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 launch (k1)");
}

TEST_F(Streams, SynchronousCopyCompletesItsStream) {
  launch(kK1, 0);
  f.feed("cudaMemcpy", {{"dst", 0x7000}, {"src", 0xd000}, {"count", 64}, {"kind", 2}});
  const StreamActivity& a = f.feed("cudaDeviceSynchronize", {});
  EXPECT_EQ(f.waited_text(), "waited: nothing");
  EXPECT_FALSE(a.queued);
}

TEST_F(Streams, SynchronousCopyIsStillShownOnItsLane) {
  const StreamActivity& a = f.feed("cudaMemcpy", {{"dst", 0x7000}, {"src", 0xd000}, {"count", 64}, {"kind", 2}});
  ASSERT_TRUE(a.queued);
  EXPECT_EQ(a.queued->stream, "default");
  EXPECT_EQ(a.queued->effect, Effect::Copy);
  EXPECT_EQ(a.queued->direction, Direction::DtoH);
  EXPECT_EQ(a.queued->bytes, 64u);
}

TEST_F(Streams, SuccessfulQueriesCompleteWorkNotReadyDoesNot) {
  create_stream(kS1);
  launch(kK1, kS1);
  CallSpec busy;
  busy.symbol = "cudaStreamQuery";
  busy.args = {{"stream", kS1}};
  busy.ret = 600;
  f.feed(busy);
  EXPECT_EQ(f.call().waited, nullptr) << "a query is not a synchronisation";
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 launch (k1)");
  launch(kK2, kS1);
  f.feed("cudaStreamQuery", {{"stream", kS1}});
  EXPECT_EQ(sync_stream(kS1), "waited: nothing");
}

TEST_F(Streams, CopyDirectionsAndSizes) {
  create_stream(kS1);
  f.feed("cudaMemcpy2DAsync", {{"dst", 0xd000}, {"dpitch", 4096}, {"src", 0x7000}, {"spitch", 1024},
                               {"width", 1000}, {"height", 3}, {"kind", 1}, {"stream", kS1}});
  f.feed("cuMemcpyDtoHAsync_v2", {{"dstHost", 0x7000}, {"srcDevice", 0xd000}, {"ByteCount", 100}, {"hStream", kS1}});
  f.feed("cuMemcpyAsync", {{"dst", 0x7000}, {"src", 0xd000}, {"ByteCount", 10}, {"hStream", kS1}});
  copy_async(0xd000, 0xd100, 5, 4, kS1);  // cudaMemcpyDefault
  f.feed("cudaMemcpyPeerAsync", {{"dst", 0xd000}, {"src", 0xd100}, {"count", 7}, {"stream", kS1}});
  copy_async(0xd000, 0xd100, 8, 3, kS1);
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 copy HtoD 2.9 KiB, 1 copy DtoH 100 B, 1 copy DtoD 8 B, 1 copy Peer 7 B, "
                              "2 copies Default 15 B");
}

// ---- Events ------------------------------------------------------------------

TEST_F(Streams, StreamWaitEventShowsTheEdgeAndWhatTheRecordCaptured) {
  create_stream(kS1);
  create_stream(kS2);
  create_event(kE1);
  launch(kK1, kS1);
  CallSpec rec;
  rec.symbol = "cudaEventRecord";
  rec.args = {{"event", kE1}, {"stream", kS1}};
  rec.tid = 101;
  rec.ts_ns = 5'000'000;
  rec.dur_ns = 400;
  f.feed(rec);
  EXPECT_EQ(f.id_of("event"), "e1");
  launch(kK2, kS1);  // after the record: not part of it
  const StreamActivity& a = f.feed("cudaStreamWaitEvent", {{"stream", kS2}, {"event", kE1}});
  EXPECT_EQ(f.waited_text(), "waits: e1 (recorded on s1) for s1: 1 launch (k1)");
  EXPECT_EQ(f.call().waited->kind, WaitInfo::Kind::StreamWaitEvent);
  ASSERT_TRUE(a.consumed);
  EXPECT_EQ(a.consumed->event, "e1");
  EXPECT_EQ(a.consumed->record_tid, 101u);
  EXPECT_EQ(a.consumed->record_ts_ns, 5'000'000u);
  EXPECT_EQ(a.consumed->record_dur_ns, 400u);
  const std::uint64_t first_flow = a.consumed->flow_id;
  // The host did not wait: s1 still has both launches.
  launch(kK3, kS2);
  // s2's sync also covers what s2 waited for on s1, and no more.
  EXPECT_EQ(sync_stream(kS2), "waited: s2: 1 launch (k3); s1: 1 launch (k1)");
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 launch (k2)");
  const StreamActivity& again = f.feed("cudaStreamWaitEvent", {{"stream", kS2}, {"event", kE1}});
  ASSERT_TRUE(again.consumed);
  EXPECT_NE(again.consumed->flow_id, first_flow) << "one flow per consumer";
  EXPECT_EQ(f.waited_text(), "waits: e1 (recorded on s1) for nothing");
}

TEST_F(Streams, EventSyncWaitsOnlyForWorkBeforeTheRecord) {
  create_stream(kS1);
  create_event(kE1);
  launch(kK1, kS1);
  copy_async(0x7000, 0xd000, 2 * kMiB, 2, kS1);
  f.feed("cudaEventRecord", {{"event", kE1}, {"stream", kS1}});
  launch(kK2, kS1);
  const StreamActivity& a = f.feed("cudaEventSynchronize", {{"event", kE1}});
  EXPECT_EQ(f.waited_text(), "waited: e1 (recorded on s1) for s1: 1 launch (k1), 1 copy DtoH 2.0 MiB");
  EXPECT_TRUE(a.consumed);
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 launch (k2)");
}

TEST_F(Streams, ReRecordingMovesTheEvent) {
  create_stream(kS1);
  create_stream(kS2);
  create_event(kE1);
  launch(kK1, kS1);
  f.feed("cudaEventRecord", {{"event", kE1}, {"stream", kS1}});
  launch(kK2, kS2);
  f.feed("cudaEventRecord", {{"event", kE1}, {"stream", kS2}});
  f.feed("cudaEventSynchronize", {{"event", kE1}});
  EXPECT_EQ(f.waited_text(), "waited: e1 (recorded on s2) for s2: 1 launch (k2)");
}

TEST_F(Streams, EventSyncFollowsWaitChains) {
  // s1 -> e1 -> s2 -> e2: synchronising e2 covers s1's work before e1.
  create_stream(kS1);
  create_stream(kS2);
  create_event(kE1);
  create_event(kE2);
  launch(kK1, kS1);
  f.feed("cudaEventRecord", {{"event", kE1}, {"stream", kS1}});
  f.feed("cudaStreamWaitEvent", {{"stream", kS2}, {"event", kE1}});
  launch(kK2, kS2);
  f.feed("cudaEventRecord", {{"event", kE2}, {"stream", kS2}});
  f.feed("cudaEventSynchronize", {{"event", kE2}});
  EXPECT_EQ(f.waited_text(), "waited: e2 (recorded on s2) for s2: 1 launch (k2); s1: 1 launch (k1)");
  EXPECT_EQ(sync_device(), "waited: nothing");
}

TEST_F(Streams, UnrecordedEventHasNoEdge) {
  create_stream(kS1);
  create_event(kE1);
  const StreamActivity& a = f.feed("cudaStreamWaitEvent", {{"stream", kS1}, {"event", kE1}});
  EXPECT_EQ(f.waited_text(), "waits: e1 (never recorded)");
  EXPECT_FALSE(a.consumed);
  const StreamActivity& b = f.feed("cudaEventSynchronize", {{"event", kE1}});
  EXPECT_EQ(f.waited_text(), "waited: e1 (never recorded)");
  EXPECT_FALSE(b.consumed);
}

TEST_F(Streams, EventQueryCompletesTheRecordedWorkSilently) {
  create_stream(kS1);
  create_event(kE1);
  launch(kK1, kS1);
  f.feed("cudaEventRecord", {{"event", kE1}, {"stream", kS1}});
  launch(kK2, kS1);
  const StreamActivity& a = f.feed("cudaEventQuery", {{"event", kE1}});
  EXPECT_EQ(f.call().waited, nullptr);
  EXPECT_FALSE(a.consumed);
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 1 launch (k2)");
}

TEST_F(Streams, EventRecordedOnTheDefaultStream) {
  create_event(kE1);
  launch(kK1, 0);
  f.feed("cudaEventRecord", {{"event", kE1}, {"stream", 0}});
  f.feed("cudaEventSynchronize", {{"event", kE1}});
  EXPECT_EQ(f.waited_text(), "waited: e1 (recorded on default) for default: 1 launch (k1)");
}

// ---- Pageable copies -----------------------------------------------------------

TEST_F(Streams, PageableAsyncCopyIsReportedOncePerCallSite) {
  create_stream(kS1);
  const StreamActivity& a = copy_async(0xd000, 0x7000, 64, 1, kS1, 0x401000);
  ASSERT_TRUE(a.pageable_host_ptr);
  EXPECT_EQ(*a.pageable_host_ptr, 0x7000u);
  EXPECT_FALSE(copy_async(0xd000, 0x7100, 64, 1, kS1, 0x401000).pageable_host_ptr) << "same call site";
  const StreamActivity& d2h = copy_async(0x7200, 0xd000, 64, 2, kS1, 0x402000);
  ASSERT_TRUE(d2h.pageable_host_ptr) << "another call site";
  EXPECT_EQ(*d2h.pageable_host_ptr, 0x7200u) << "DtoH: the destination is the host side";
}

TEST_F(Streams, PinnedRegisteredAndManagedMemoryIsNotPageable) {
  create_stream(kS1);
  f.feed("cudaMallocHost", {{"ptr", 0x4000001000}, {"size", 4096}});
  EXPECT_FALSE(copy_async(0xd000, 0x4000001800, 64, 1, kS1, 0x401000).pageable_host_ptr);
  EXPECT_TRUE(copy_async(0xd000, 0x4000002000, 64, 1, kS1, 0x401001).pageable_host_ptr) << "one past the end";
  f.feed("cudaHostRegister", {{"ptr", 0x600000}, {"size", 8192}});
  EXPECT_FALSE(copy_async(0x601000, 0xd000, 64, 2, kS1, 0x401002).pageable_host_ptr);
  f.feed("cudaMallocManaged", {{"devPtr", 0x7f0000}, {"size", 4096}});
  EXPECT_FALSE(copy_async(0xd000, 0x7f0010, 64, 1, kS1, 0x401003).pageable_host_ptr);
  f.feed("cuMemHostAlloc", {{"pp", 0x5000000}, {"bytesize", 64}});
  EXPECT_FALSE(copy_async(0xd000, 0x5000000, 64, 1, kS1, 0x401004).pageable_host_ptr);
}

TEST_F(Streams, FreedPinnedMemoryIsPageableAgain) {
  create_stream(kS1);
  f.feed("cudaHostAlloc", {{"pHost", 0x4000001000}, {"size", 4096}});
  f.feed("cudaFreeHost", {{"ptr", 0x4000001000}});
  EXPECT_TRUE(copy_async(0xd000, 0x4000001000, 64, 1, kS1, 0x401000).pageable_host_ptr);
  f.feed("cudaHostRegister", {{"ptr", 0x600000}, {"size", 8192}});
  f.feed("cudaHostUnregister", {{"ptr", 0x600000}});
  EXPECT_TRUE(copy_async(0xd000, 0x600000, 64, 1, kS1, 0x401001).pageable_host_ptr);
}

TEST_F(Streams, OnlyAsyncHostCopiesThatSucceededAreChecked) {
  create_stream(kS1);
  EXPECT_FALSE(f.feed("cudaMemcpy", {{"dst", 0xd000}, {"src", 0x7000}, {"count", 64}, {"kind", 1}}).pageable_host_ptr);
  EXPECT_FALSE(copy_async(0xd000, 0xd100, 64, 3, kS1).pageable_host_ptr) << "device to device";
  EXPECT_FALSE(copy_async(0xd000, 0x7000, 64, 4, kS1).pageable_host_ptr) << "direction unknown";
  CallSpec failed;
  failed.symbol = "cudaMemcpyAsync";
  failed.args = {{"dst", 0xd000}, {"src", 0x7000}, {"count", 64}, {"kind", 1}, {"stream", kS1}};
  failed.ret = 35;
  failed.caller = 0x401234;
  EXPECT_FALSE(f.feed(failed).pageable_host_ptr);
  failed.ret = 0;
  EXPECT_TRUE(f.feed(failed).pageable_host_ptr) << "the failed call did not use up the call site";
}

TEST_F(Streams, DriverAsyncCopyFromPageableMemoryIsReported) {
  f.feed("cuStreamCreate", {{"phStream", kS1}});
  CallSpec s;
  s.symbol = "cuMemcpyHtoDAsync_v2";
  s.args = {{"dstDevice", 0xd000}, {"srcHost", 0x7000}, {"ByteCount", 64}, {"hStream", kS1}};
  s.caller = 0x401000;
  const StreamActivity& a = f.feed(s);
  ASSERT_TRUE(a.pageable_host_ptr);
  EXPECT_EQ(*a.pageable_host_ptr, 0x7000u);
}

// ---- Bounded memory ------------------------------------------------------------

TEST_F(Streams, WorkQueuedBetweenSyncsIsSummarised) {
  create_stream(kS1);
  for (int i = 0; i < 5000; ++i) {
    launch(kK1, kS1);
    launch(kK2, kS1);
  }
  EXPECT_EQ(sync_stream(kS1), "waited: s1: 10000 launches (k1 x5000, k2 x5000)");
  EXPECT_EQ(sync_stream(kS1), "waited: nothing");
}

TEST_F(Streams, EventRecordsBeyondTheSegmentCapMakeWaitsApproximate) {
  create_stream(kS1);
  create_event(kE1);
  create_event(kE2);
  launch(kK1, kS1);
  f.feed("cudaEventRecord", {{"event", kE1}, {"stream", kS1}});
  f.feed("cudaEventSynchronize", {{"event", kE1}});
  EXPECT_EQ(f.waited_text(), "waited: e1 (recorded on s1) for s1: 1 launch (k1)");
  // e1 recorded after the first of many launches, each followed by a record of e2.
  launch(kK1, kS1);
  f.feed("cudaEventRecord", {{"event", kE1}, {"stream", kS1}});
  for (std::size_t i = 0; i < StreamTracker::kMaxSegments + 10; ++i) {
    launch(kK2, kS1);
    f.feed("cudaEventRecord", {{"event", kE2}, {"stream", kS1}});
  }
  EXPECT_GT(f.tracker().forgotten().merged_segments, 0u);
  f.feed("cudaEventSynchronize", {{"event", kE1}});
  const std::string text = f.waited_text();
  EXPECT_EQ(text.rfind("waited: e1 (recorded on s1) for s1: ", 0), 0u) << text;
  EXPECT_NE(text.find("(approximate: older queued work summarised together)"), std::string::npos) << text;
  ASSERT_TRUE(f.call().waited->approximate);
  // Every launch is still counted once, whatever was merged.
  f.feed("cudaEventSynchronize", {{"event", kE2}});
  std::uint32_t launches = f.call().waited->work.empty() ? 0 : f.call().waited->work[0].launches;
  for (const StreamWork& w : f.call().waited->work) EXPECT_EQ(w.stream, "s1");
  sync_stream(kS1);
  EXPECT_EQ(f.waited_text(), "waited: nothing");
  EXPECT_LE(launches, StreamTracker::kMaxSegments + 10);
}

TEST_F(Streams, StreamsAndEventsBeyondTheCapAreForgottenOldestFirst) {
  const std::size_t n = StreamTracker::kMaxHandles + 3;
  for (std::size_t i = 0; i < n; ++i) {
    create_stream(0x100000 + 16 * i);
    create_event(0x900000 + 16 * i);
  }
  EXPECT_EQ(f.tracker().forgotten().streams, 3u);
  EXPECT_EQ(f.tracker().forgotten().events, 3u);
  launch(kK1, 0x100000 + 16 * (n - 1));
  EXPECT_EQ(f.id_of("stream"), "s" + std::to_string(n)) << "the newest stream is kept";
  launch(kK1, 0x100000);
  EXPECT_EQ(f.id_of("stream"), "s" + std::to_string(n + 1)) << "the oldest was forgotten: a new id";
}

TEST_F(Streams, DestroyedStreamsAreDroppedOnceTheirWorkIsDone) {
  create_stream(kS1);
  launch(kK1, kS1);
  f.feed("cudaStreamDestroy", {{"stream", kS1}});
  EXPECT_EQ(sync_device(), "waited: s1: 1 launch (k1)") << "destroyed with work queued: the device still waits";
  EXPECT_EQ(sync_device(), "waited: nothing");
  create_stream(kS1);
  EXPECT_EQ(f.id_of("pStream"), "s2");
}

TEST_F(Streams, ExitedProcessesAndThreadsAreForgotten) {
  f.feed("cudaLaunchKernel_ptsz", {{"func", kK1}, {"stream", 0}}, 4242);
  ASSERT_EQ(f.tracker().threads(100), std::vector<std::uint32_t>{4242});
  f.tracker().forget_thread(100, 4242);
  EXPECT_EQ(f.tracker().threads(100).size(), 1u) << "kept while work is queued on it";
  sync_device();
  f.tracker().forget_thread(100, 4242);
  EXPECT_TRUE(f.tracker().threads(100).empty());
  create_stream(kS1);
  EXPECT_EQ(f.tracker().processes(), std::vector<std::uint32_t>{100});
  f.tracker().forget_process(100);
  EXPECT_TRUE(f.tracker().processes().empty());
  create_stream(kS1);
  EXPECT_EQ(f.id_of("pStream"), "s1");
}

TEST(StreamWorkSummary, KernelNamesAreCappedAndTheRestCounted) {
  StreamWork w;
  w.stream = "s1";
  for (std::size_t i = 0; i < StreamWork::kMaxKernels + 6; ++i) {
    const std::string name = "k" + std::to_string(i);
    w.add_launch(name, name);
  }
  w.add_launch("k0", "k0", 2);
  EXPECT_EQ(w.launches, StreamWork::kMaxKernels + 8);
  EXPECT_EQ(w.kernels.size(), StreamWork::kMaxKernels);
  EXPECT_EQ(w.unlisted_launches, 6u);
  StreamWork sum;
  sum.add(w);
  sum.add(w);
  EXPECT_EQ(sum.launches, 2 * w.launches);
  EXPECT_EQ(sum.unlisted_launches, 12u);
  EXPECT_EQ(sum.kernels[0].count, 6u);
  WaitInfo info;
  info.kind = WaitInfo::Kind::Stream;
  info.work.push_back(w);
  fmt::memory_buffer text;
  append_wait_text(text, info);
  EXPECT_NE(std::string(text.data(), text.size()).find(", +60 more, +6 launches of other kernels)"), std::string::npos)
      << std::string(text.data(), text.size());
  fmt::memory_buffer json;
  append_wait_json(json, info);
  EXPECT_NE(std::string(json.data(), json.size()).find("\"unlisted_launches\":6"), std::string::npos);
}

// ---- Timeline details ----------------------------------------------------------

TEST_F(Streams, QueuedWorkNamesItsLane) {
  create_stream(kS1);
  const StreamActivity& a = launch(0xa7, kS1);
  ASSERT_TRUE(a.queued);
  EXPECT_EQ(a.queued->stream, "s1");
  EXPECT_EQ(a.queued->lane_name, "stream s1");
  EXPECT_EQ(a.queued->kernel, "reduce");
  const std::uint32_t s1_lane = a.queued->lane;
  const StreamActivity& b = f.feed("cudaLaunchKernel_ptsz", {{"func", kK1}, {"stream", 0}}, 4242);
  ASSERT_TRUE(b.queued);
  EXPECT_EQ(b.queued->lane_name, "stream per-thread (tid 4242)");
  EXPECT_NE(b.queued->lane, s1_lane);
  const StreamActivity& g = f.feed("cudaGraphLaunch", {{"graphExec", 0x99}, {"stream", kS1}});
  ASSERT_TRUE(g.queued);
  EXPECT_EQ(g.queued->kernel, "graph");
  EXPECT_EQ(g.queued->lane, s1_lane);
}

// ---- Formatting ------------------------------------------------------------------

TEST(StreamFormat, Bytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(4 << 20), "4.0 MiB");
  EXPECT_EQ(format_bytes(std::uint64_t(3) << 30), "3.0 GiB");
  EXPECT_EQ(format_bytes(std::uint64_t(5) << 40), "5.0 TiB");
}

TEST(StreamFormat, KernelListIsCappedInTextButNotInJson) {
  WaitInfo w;
  w.kind = WaitInfo::Kind::Stream;
  w.target = "s1";
  StreamWork work;
  work.stream = "s1";
  for (int i = 1; i <= 6; ++i) work.kernels.push_back({"void k" + std::to_string(i) + "()", "k" + std::to_string(i), i == 1 ? 3u : 1u});
  work.launches = 8;
  w.work.push_back(work);
  fmt::memory_buffer text;
  append_wait_text(text, w);
  EXPECT_EQ(std::string(text.data(), text.size()), " waited: s1: 8 launches (k1 x3, k2, k3, k4, +2 more)");
  fmt::memory_buffer json;
  append_wait_json(json, w);
  const std::string doc = "{\"x\":0" + std::string(json.data(), json.size()) + "}";
  JsonValue v;
  std::string err;
  ASSERT_TRUE(JsonParser::parse(doc, v, err)) << err << "\n" << doc;
  const JsonValue* wf = v.get("waited_for");
  ASSERT_NE(wf, nullptr);
  EXPECT_EQ(wf->get("work")->items[0].get("kernels")->items.size(), 6u);
}

TEST(StreamFormat, WaitJsonStructure) {
  WaitInfo w;
  w.kind = WaitInfo::Kind::Event;
  w.target = "e3";
  w.recorded_on = "s2";
  StreamWork work;
  work.stream = "s2";
  work.launches = 2;
  work.kernels = {{"void k(int)", "k", 2}};
  work.copies[static_cast<int>(Direction::HtoD)] = {1, 4096};
  work.memsets = {2, 100};
  w.work.push_back(work);
  fmt::memory_buffer b;
  b.push_back('{');
  b.append(std::string_view("\"x\":0"));
  append_wait_json(b, w);
  b.push_back('}');
  const std::string doc(b.data(), b.size());
  EXPECT_EQ(doc,
            R"({"x":0,"waited_for":{"kind":"event","event":"e3","recorded_on":"s2","work":[{"stream":"s2","launches":2,)"
            R"j("kernels":[{"kernel":"void k(int)","count":2}],"copies":{"HtoD":{"count":1,"bytes":4096}},)j"
            R"("memsets":{"count":2,"bytes":100}}]}})");
  EXPECT_TRUE(JsonParser::valid(doc));
  w.recorded_on.clear();
  w.work.clear();
  fmt::memory_buffer never;
  append_wait_json(never, w);
  EXPECT_EQ(std::string(never.data(), never.size()),
            R"(,"waited_for":{"kind":"event","event":"e3","recorded_on":null,"work":[]})");
  w.kind = WaitInfo::Kind::Device;
  fmt::memory_buffer device;
  append_wait_json(device, w);
  EXPECT_EQ(std::string(device.data(), device.size()), R"(,"waited_for":{"kind":"device","work":[]})");
}

}  // namespace
