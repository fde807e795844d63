// The NCCL model: communicator ids that are the same on every rank, a
// sequence number per collective on each communicator, ncclGroupStart/End
// nesting, the collectives table of --summary and the rank-skew insight.
// Fed every decoded call once, in completion order (like streams.h). The
// join key (comm_id, seq) names one logical collective across processes and
// hosts without clock alignment (docs/correlation.md).
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cudatrace/decode/decode.h"
#include "cudatrace/analysis/insights.h"
#include "cudatrace/bpf_abi.h"

namespace cudatrace {

// The communicator id of a split (parent id, color, split index; each as 8
// little-endian bytes hashed with nccl_fnv1a, decode.h).
std::uint64_t nccl_split_id(std::uint64_t parent, std::int64_t color, std::uint64_t index);

// What the model knows about one NCCL call; fields are absent when unknown.
struct NcclInfo {
  bool has_comm = false;  // the communicator was created while traced
  std::uint64_t comm_id = 0;
  int rank = -1, nranks = -1;  // -1: unknown (a split communicator before ncclCommUserRank/Count)
  bool has_seq = false;        // collectives and send/recv that did not fail
  std::uint64_t seq = 0;
  bool in_group = false;  // between ncclGroupStart and ncclGroupEnd on this thread
  bool has_bytes = false;
  std::uint64_t bytes = 0;  // count x element size
};


// One (op, comm_id) row of the collectives table.
struct CollectiveStats {
  std::uint64_t calls = 0, bytes = 0;
  ct_api_stats latency{};  // host-side latency of the call
};

// Rank skew over the (comm_id, seq) keys entered by two or more processes.
struct RankSkew {
  std::uint64_t keys = 0;  // keys seen from several processes
  ct_api_stats spread{};   // max - min host entry time per key
  struct Rank {
    std::uint64_t last = 0;    // keys it entered last
    std::uint64_t lag_ns = 0;  // sum over keys of (its entry - the first entry)
  };
  std::map<std::pair<std::uint32_t, int>, Rank> ranks;  // (pid, rank in the key's communicator)
};

class NcclTracker {
 public:
  // The info of call `c` (valid until the next call), or nullptr when it is
  // not an NCCL communicator, collective or group call.
  const NcclInfo* on_call(const Call& c);

  // (api symbol, comm_id; 0 for communicators created before tracing) -> stats.
  const std::map<std::pair<std::string, std::uint64_t>, CollectiveStats>& collectives() const { return collectives_; }
  // Keys whose every rank was seen are folded in as they complete; the
  // others, seen from at least two processes, are added at each call.
  RankSkew skew() const;

  // Pending keys kept at most; the oldest are folded in beyond it.
  static constexpr std::size_t kMaxPendingKeys = 1 << 16;
  // Keys not yet seen from all their ranks.
  std::size_t pending_keys() const { return pending_.size(); }

 private:
  struct Comm {
    std::uint64_t id = 0;
    int rank = -1, nranks = -1;
    std::uint64_t next_seq = 0;
    std::uint64_t splits = 0;  // ncclCommSplit calls made on it so far
  };
  struct Entry {
    std::uint32_t pid;
    int rank;
    std::uint64_t ts_ns;
  };
  struct Pending {
    int nranks = -1;
    std::vector<Entry> entries;
  };
  using CommKey = std::pair<std::uint32_t, std::uint64_t>;  // pid, handle

  void on_comm_init(const Call& c);
  void on_collective(const Call& c, NcclInfo& info);
  void note_entry(const NcclInfo& info, std::uint32_t pid, std::uint64_t ts_ns);
  static void fold(RankSkew& skew, const Pending& p);

  NcclInfo info_;
  std::map<CommKey, Comm> comms_;
  std::unordered_map<std::uint32_t, int> group_depth_;  // by tid
  std::unordered_map<std::uint32_t, std::uint64_t> unique_id_;  // by tid: last ncclGetUniqueId (ncclCommInitAll)
  std::map<std::pair<std::string, std::uint64_t>, CollectiveStats> collectives_;
  std::map<std::tuple<std::uint64_t, std::uint64_t>, Pending> pending_;  // (comm_id, seq)
  std::vector<std::tuple<std::uint64_t, std::uint64_t>> pending_order_;  // insertion order, for the bound
  std::size_t pending_order_head_ = 0;
  RankSkew done_;
};

// The rank-skew insight (rule "rank-skew"), or nothing with no multi-rank keys.
std::vector<Insight> nccl_insights(const RankSkew& skew);

}  // namespace cudatrace
