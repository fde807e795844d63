// The NCCL model (nccl.h) and the decoding of NCCL arguments, on records built by hand.
#include "cudatrace/analysis/nccl.h"
#include "cudatrace/render/json_format.h"
#include "cudatrace/render/text.h"

#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "record_builder.h"

namespace cudatrace_test {
namespace {

using namespace cudatrace;

// Feeds hand-built records to a tracker, decoding each like the recorder does.
class Feed {
 public:
  // Sets the arguments by name (slots from the table), then decodes and feeds.
  const NcclInfo* call(std::string_view symbol, std::initializer_list<std::pair<const char*, std::uint64_t>> args,
                       std::uint32_t pid = 100, std::int64_t ret = 0, std::uint64_t ts_ns = 1000,
                       std::string_view parent = {}) {
    init_rec(buf_, symbol, pid);
    buf_.rec.ret = ret;
    buf_.rec.ts_ns = ts_ns;
    if (!parent.empty()) buf_.rec.parent_api = api_id(parent);
    const Api* api = api_by_symbol(symbol);
    for (const auto& [name, value] : args) {
      for (std::size_t i = 0; i < api->spec->args.size(); ++i) {
        if (std::string_view(api->spec->args[i].name) != name) continue;
        if (is_out(api->spec->args[i].type))
          buf_.rec.outs[api->out_index[0] == int(i) ? 0 : 1] = value;
        else
          buf_.rec.args[api->slots[i]] = value;
      }
    }
    if (payload_len_) set_payload(buf_, payload_, payload_len_);
    payload_len_ = 0;
    EXPECT_TRUE(decode_call(buf_.rec, nullptr, call_));
    return tracker.on_call(call_);
  }
  void payload(const void* data, std::size_t len) {
    std::memcpy(payload_, data, len);
    payload_len_ = len;
  }
  const Call& last() const { return call_; }

  NcclTracker tracker;

 private:
  RecBuf buf_;
  Call call_;
  std::uint8_t payload_[CT_MAX_PAYLOAD];
  std::size_t payload_len_ = 0;
};

std::string id_of(const std::uint8_t (&bytes)[kNcclUniqueIdBytes]) {
  return nccl_id_text(nccl_fnv1a(bytes, sizeof bytes));
}

struct UniqueId {
  std::uint8_t bytes[kNcclUniqueIdBytes];
  explicit UniqueId(std::uint8_t seed) {
    for (int i = 0; i < kNcclUniqueIdBytes; ++i) bytes[i] = static_cast<std::uint8_t>(seed * 31 + i);
  }
};

constexpr std::uint64_t kComm = 0x5000, kComm2 = 0x6000;

TEST(Nccl, Fnv1aKnownValues) {
  EXPECT_EQ(nccl_fnv1a("", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(nccl_fnv1a("a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(nccl_id_text(0xabc), "0000000000000abc");
}

// A probe's payload is the id's 128 bytes; a record rebuilt from a --json trace carries the id itself.
TEST(Nccl, UniqueIdHashOfBytesOrOfARecordReadBack) {
  std::uint8_t bytes[kNcclUniqueIdBytes];
  for (std::size_t i = 0; i < sizeof bytes; ++i) bytes[i] = static_cast<std::uint8_t>(i * 7);
  EXPECT_EQ(nccl_unique_id_hash(bytes, sizeof bytes), nccl_fnv1a(bytes, sizeof bytes));
  const std::uint64_t id = 0x77f7176b45f12c94ull;
  EXPECT_EQ(nccl_unique_id_hash(reinterpret_cast<const std::uint8_t*>(&id), 8), id);
  EXPECT_EQ(nccl_unique_id_hash(bytes, 64), std::nullopt);
  EXPECT_EQ(nccl_unique_id_hash(bytes, 0), std::nullopt);
}

TEST(Nccl, DecodesDatatypeOpAndUniqueId) {
  Feed f;
  f.call("ncclAllReduce", {{"count", 10}, {"datatype", 7}, {"op", 2}, {"comm", kComm}});
  EXPECT_EQ(describe(*find_arg(f.last(), "datatype")), "named:ncclFloat32(7)");
  EXPECT_EQ(describe(*find_arg(f.last(), "op")), "named:ncclMax(2)");
  f.call("ncclAllReduce", {{"count", 10}, {"datatype", 12}, {"op", 9}, {"comm", kComm}});
  EXPECT_EQ(describe(*find_arg(f.last(), "datatype")), "named:null(12)");
  EXPECT_EQ(describe(*find_arg(f.last(), "op")), "str:op#9");
  const UniqueId id(1);
  f.payload(id.bytes, sizeof id.bytes);
  f.call("ncclCommInitRank", {{"comm", kComm}, {"nranks", 2}, {"rank", 1}});
  EXPECT_EQ(describe(*find_arg(f.last(), "commId")), "str:" + id_of(id.bytes));
  EXPECT_EQ(describe(*find_arg(f.last(), "rank")), "i64:1");
  // ncclInProgress is not a failure; other NCCL codes are.
  f.call("ncclGroupEnd", {}, 100, CT_NCCL_IN_PROGRESS);
  EXPECT_FALSE(f.last().failed());
  EXPECT_STREQ(f.last().ret_name(), "ncclInProgress");
  f.call("ncclGroupEnd", {}, 100, 4);
  EXPECT_TRUE(f.last().failed());
  EXPECT_STREQ(f.last().ret_name(), "ncclInvalidArgument");
}

TEST(Nccl, CommIdIsTheSameOnEveryRankAndSeqCountsSuccessfulCalls) {
  Feed f;
  const UniqueId id(7);
  for (std::uint32_t pid : {100u, 200u}) {
    f.payload(id.bytes, sizeof id.bytes);
    const NcclInfo* n = f.call("ncclCommInitRank", {{"comm", kComm}, {"nranks", 2}, {"rank", pid / 100 - 1}}, pid);
    ASSERT_TRUE(n && n->has_comm);
    EXPECT_EQ(nccl_id_text(n->comm_id), id_of(id.bytes));
    EXPECT_EQ(n->rank, int(pid / 100 - 1));
    EXPECT_EQ(n->nranks, 2);
  }
  const NcclInfo* n = f.call("ncclAllReduce", {{"count", 10}, {"datatype", 7}, {"comm", kComm}}, 200);
  EXPECT_TRUE(n->has_seq);
  EXPECT_EQ(n->seq, 0u);
  EXPECT_EQ(n->bytes, 40u);
  EXPECT_EQ(n->rank, 1);
  n = f.call("ncclAllReduce", {{"count", 10}, {"datatype", 99}, {"comm", kComm}}, 200, 4);
  EXPECT_FALSE(n->has_seq) << "a failed call is not numbered";
  EXPECT_FALSE(n->has_bytes);
  n = f.call("ncclBroadcast", {{"count", 3}, {"datatype", 8}, {"comm", kComm}}, 200);
  EXPECT_EQ(n->seq, 1u);
  EXPECT_EQ(n->bytes, 24u);
  n = f.call("ncclBroadcast", {{"count", 3}, {"datatype", 8}, {"comm", kComm}}, 100);
  EXPECT_EQ(n->seq, 0u) << "numbered per process";
  // A collective nested in another is the same operation.
  n = f.call("ncclBroadcast", {{"count", 3}, {"datatype", 8}, {"comm", kComm}}, 100, 0, 1000, "ncclAllReduce");
  EXPECT_FALSE(n->has_seq);
  // Unknown communicator: no id, no number; destroyed: forgotten.
  n = f.call("ncclAllReduce", {{"count", 1}, {"datatype", 0}, {"comm", kComm2}}, 100);
  EXPECT_FALSE(n->has_comm);
  EXPECT_FALSE(n->has_seq);
  f.call("ncclCommDestroy", {{"comm", kComm}}, 100);
  n = f.call("ncclAllReduce", {{"count", 1}, {"datatype", 0}, {"comm", kComm}}, 100);
  EXPECT_FALSE(n->has_comm);
  // The collectives table: per op and communicator, failed and nested calls excluded.
  const auto& table = f.tracker.collectives();
  const std::uint64_t comm_id = nccl_fnv1a(id.bytes, sizeof id.bytes);
  EXPECT_EQ(table.at({"ncclBroadcast", comm_id}).calls, 2u);
  EXPECT_EQ(table.at({"ncclBroadcast", comm_id}).bytes, 48u);
  EXPECT_EQ(table.at({"ncclAllReduce", comm_id}).calls, 1u);
  EXPECT_EQ(table.at({"ncclAllReduce", 0}).calls, 2u);
}

TEST(Nccl, GroupDepthIsCountedPerThread) {
  Feed f;
  EXPECT_FALSE(f.call("ncclGroupStart", {})->in_group) << "the start itself is outside";
  f.call("ncclGroupStart", {});
  EXPECT_TRUE(f.call("ncclSend", {{"comm", kComm}})->in_group);
  EXPECT_FALSE(f.call("ncclSend", {{"comm", kComm}}, 300)->in_group) << "another thread";
  EXPECT_TRUE(f.call("ncclGroupEnd", {})->in_group) << "the outer group is still open";
  EXPECT_TRUE(f.call("ncclRecv", {{"comm", kComm}})->in_group);
  EXPECT_FALSE(f.call("ncclGroupEnd", {}, 100, 5)->in_group) << "a failed end still leaves the group";
  EXPECT_FALSE(f.call("ncclRecv", {{"comm", kComm}})->in_group);
  EXPECT_FALSE(f.call("ncclGroupEnd", {})->in_group) << "an unbalanced end is harmless";
}

TEST(Nccl, SplitIdsAgreeAcrossRanksAndRanksAreLearned) {
  Feed f;
  const UniqueId id(3);
  std::uint64_t first[2], second[2];
  for (std::uint32_t pid : {100u, 200u}) {
    f.payload(id.bytes, sizeof id.bytes);
    f.call("ncclCommInitRank", {{"comm", kComm}, {"nranks", 4}, {"rank", pid / 100}}, pid);
    const NcclInfo* n = f.call("ncclCommSplit", {{"comm", kComm}, {"color", 1}, {"key", 0}, {"newcomm", kComm2}}, pid);
    ASSERT_TRUE(n->has_comm);
    EXPECT_EQ(n->rank, -1);
    first[pid / 100 - 1] = n->comm_id;
    n = f.call("ncclCommSplit", {{"comm", kComm}, {"color", 1}, {"key", 0}, {"newcomm", kComm2 + 16}}, pid);
    second[pid / 100 - 1] = n->comm_id;
  }
  EXPECT_EQ(first[0], first[1]);
  EXPECT_EQ(second[0], second[1]);
  EXPECT_NE(first[0], second[0]) << "the split index is part of the id";
  EXPECT_NE(first[0], nccl_fnv1a(id.bytes, sizeof id.bytes));
  const NcclInfo* n = f.call("ncclCommSplit", {{"comm", kComm}, {"color", 2}, {"newcomm", kComm2 + 32}}, 100);
  EXPECT_NE(n->comm_id, nccl_split_id(nccl_fnv1a(id.bytes, sizeof id.bytes), 1, 2)) << "the color too";
  EXPECT_FALSE(f.call("ncclCommSplit", {{"comm", kComm}, {"color", 0xffffffff}, {"newcomm", 0}}, 100)->has_comm)
      << "NCCL_SPLIT_NOCOLOR";
  f.call("ncclCommUserRank", {{"comm", kComm2}, {"rank", 3}}, 100);
  f.call("ncclCommCount", {{"comm", kComm2}, {"count", 4}}, 100);
  n = f.call("ncclAllReduce", {{"count", 1}, {"datatype", 0}, {"comm", kComm2}}, 100);
  EXPECT_EQ(n->rank, 3);
  EXPECT_EQ(n->nranks, 4);
  EXPECT_EQ(n->seq, 0u);
}

TEST(Nccl, InitAllUsesTheIdOfItsNestedGetUniqueId) {
  Feed f;
  const UniqueId id(9);
  f.payload(id.bytes, sizeof id.bytes);
  f.call("ncclGetUniqueId", {{"uniqueId", 0x7000}}, 100, 0, 1000, "ncclCommInitAll");
  const std::uint64_t comms[2] = {kComm, kComm2};
  f.payload(comms, sizeof comms);
  const NcclInfo* n = f.call("ncclCommInitAll", {{"comm", 0x7100}, {"ndev", 2}}, 100);
  EXPECT_EQ(describe(*find_arg(f.last(), "comm")), "hex:0x5000");
  ASSERT_TRUE(n->has_comm);
  EXPECT_EQ(n->comm_id, nccl_fnv1a(id.bytes, sizeof id.bytes));
  n = f.call("ncclAllReduce", {{"count", 1}, {"datatype", 0}, {"comm", kComm2}}, 100);
  EXPECT_EQ(n->rank, 1);
  EXPECT_EQ(n->nranks, 2);
  EXPECT_EQ(n->comm_id, nccl_fnv1a(id.bytes, sizeof id.bytes));
}

TEST(Nccl, RankSkewNamesTheStraggler) {
  Feed f;
  const UniqueId id(5);
  for (std::uint32_t pid : {100u, 200u}) {
    f.payload(id.bytes, sizeof id.bytes);
    f.call("ncclCommInitRank", {{"comm", kComm}, {"nranks", 2}, {"rank", pid / 100 - 1}}, pid);
  }
  // Rank 1 (pid 200) enters 1 ms late every 4th time, else 1 us early.
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t t = 1000000000ull + i * 10000000ull;
    f.call("ncclAllReduce", {{"count", 1}, {"datatype", 0}, {"comm", kComm}}, 100, 0, t);
    f.call("ncclAllReduce", {{"count", 1}, {"datatype", 0}, {"comm", kComm}}, 200, 0,
           i % 4 == 0 ? t + 1000000 : t - 1000);
  }
  const RankSkew skew = f.tracker.skew();
  EXPECT_EQ(skew.keys, 20u);
  EXPECT_EQ(skew.spread.max_ns, 1000000u);
  EXPECT_EQ(skew.ranks.at({200, 1}).last, 5u);
  EXPECT_EQ(skew.ranks.at({100, 0}).last, 15u);
  EXPECT_EQ(skew.ranks.at({200, 1}).lag_ns, 5000000u);
  const auto insights = nccl_insights(skew);
  ASSERT_EQ(insights.size(), 1u);
  EXPECT_EQ(insights[0].rule, "rank-skew");
  EXPECT_NE(insights[0].message.find("straggler is rank 1 (pid 200)"), std::string::npos) << insights[0].message;
  EXPECT_TRUE(nccl_insights(RankSkew{}).empty());
}

TEST(Nccl, RanksOfOneProcessAreNoSkew) {
  Feed f;
  const UniqueId id(8);
  f.payload(id.bytes, sizeof id.bytes);
  f.call("ncclGetUniqueId", {{"uniqueId", 0x7000}}, 100, 0, 1000, "ncclCommInitAll");
  const std::uint64_t comms[2] = {kComm, kComm2};
  f.payload(comms, sizeof comms);
  f.call("ncclCommInitAll", {{"comm", 0x7100}, {"ndev", 2}}, 100);
  f.call("ncclAllReduce", {{"count", 1}, {"datatype", 0}, {"comm", kComm}}, 100, 0, 1000);
  f.call("ncclAllReduce", {{"count", 1}, {"datatype", 0}, {"comm", kComm2}}, 100, 0, 900000);
  EXPECT_EQ(f.tracker.pending_keys(), 0u) << "complete: both ranks seen";
  EXPECT_EQ(f.tracker.skew().keys, 0u);
}

TEST(Nccl, KeysOfRanksNeverTracedAreBounded) {
  Feed f;
  const UniqueId id(6);
  f.payload(id.bytes, sizeof id.bytes);
  f.call("ncclCommInitRank", {{"comm", kComm}, {"nranks", 2}, {"rank", 0}}, 100);
  const std::size_t n = NcclTracker::kMaxPendingKeys + 1000;
  for (std::size_t i = 0; i < n; ++i) f.call("ncclAllReduce", {{"count", 1}, {"datatype", 0}, {"comm", kComm}}, 100);
  EXPECT_EQ(f.tracker.pending_keys(), NcclTracker::kMaxPendingKeys);
  EXPECT_EQ(f.tracker.skew().keys, 0u) << "a key seen from one process is no skew";
  // Complete keys leave nothing behind.
  f.payload(id.bytes, sizeof id.bytes);
  f.call("ncclCommInitRank", {{"comm", kComm}, {"nranks", 2}, {"rank", 1}}, 200);
  f.call("ncclAllReduce", {{"count", 1}, {"datatype", 0}, {"comm", kComm}}, 200);
  EXPECT_EQ(f.tracker.pending_keys(), NcclTracker::kMaxPendingKeys) << "seq 0 was evicted: a new pending key";
}

TEST(Nccl, TextAndJsonForms) {
  NcclInfo n;
  n.has_comm = true;
  n.comm_id = 0x9f3a;
  n.rank = 0;
  n.nranks = 2;
  n.has_seq = true;
  n.seq = 12;
  n.in_group = true;
  n.has_bytes = true;
  n.bytes = 4096;
  fmt::memory_buffer text, json;
  append_nccl_text(text, n);
  EXPECT_EQ(fmt::to_string(text), " comm_id=0000000000009f3a rank=0/2 seq=12 bytes=4096 [group]");
  append_nccl_json(json, n);
  EXPECT_EQ(fmt::to_string(json),
            ",\"nccl\":{\"comm_id\":\"0000000000009f3a\",\"rank\":0,\"nranks\":2,\"seq\":12,\"in_group\":true,"
            "\"bytes\":4096}");
  json.clear();
  append_nccl_json(json, NcclInfo{});
  EXPECT_EQ(fmt::to_string(json),
            ",\"nccl\":{\"comm_id\":null,\"rank\":null,\"nranks\":null,\"seq\":null,\"in_group\":false,\"bytes\":null}");
}

}  // namespace
}  // namespace cudatrace_test
