// End to end: the NCCL layer with real eBPF against the fake libnccl.so.2
// (tests/fixtures/fake_nccl.c) and nccl_app, two forked ranks sharing one
// ncclUniqueId (the program's calls are listed at the top of nccl_app.c).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness.h"

namespace cudatrace_test {
namespace {

constexpr int kIterations = 30;

class Nccl : public NeedsRoot {};

std::string app() { return std::string(" -- timeout 60 " NCCL_APP " ") + std::to_string(kIterations); }

// "rank0_pid=N rank1_pid=M", printed by nccl_app (on cudatrace's stderr: the trace has stdout).
std::map<long, int> rank_of_pid(const std::string& out) {
  std::map<long, int> ranks;
  for (const std::string& line : lines_of(out)) {
    long p0 = 0, p1 = 0;
    if (std::sscanf(line.c_str(), "rank0_pid=%ld rank1_pid=%ld", &p0, &p1) == 2) ranks = {{p0, 0}, {p1, 1}};
  }
  return ranks;
}

TEST_F(Nccl, CountsCommIdsSequencesGroupsAndBytes) {
  const Result r = run("timeout 120 " + tracer() + " --json" + app());
  ASSERT_EQ(r.status, 0) << r.err;
  const std::map<long, int> ranks = rank_of_pid(r.err);
  ASSERT_EQ(ranks.size(), 2u) << r.err;

  // Per process and API: the calls the program made.
  std::map<std::pair<long, std::string>, int> counts;
  for (const json& c : calls(r)) {
    EXPECT_EQ(c["layer"], "nccl") << c;
    ++counts[{c["pid"].get<long>(), c["api"].get<std::string>()}];
  }
  for (const auto& [pid, rank] : ranks) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    auto n = [&, pid = pid](const char* api) { return counts[{pid, api}]; };
    EXPECT_EQ(n("ncclCommInitRank"), 1);
    // + the failed one, 3 on the split communicator, 1 on the nonblocking one
    EXPECT_EQ(n("ncclAllReduce"), kIterations + 1 + 3 + 1);
    EXPECT_EQ(n("ncclCommInitRankConfig"), 1);
    EXPECT_EQ(n("ncclBroadcast"), kIterations);
    EXPECT_EQ(n("ncclAllGather"), kIterations);
    EXPECT_EQ(n("ncclSend"), kIterations);
    EXPECT_EQ(n("ncclRecv"), kIterations);
    EXPECT_EQ(n("ncclGroupStart"), kIterations);
    EXPECT_EQ(n("ncclGroupEnd"), kIterations);
    EXPECT_EQ(n("ncclCommSplit"), 1);
    EXPECT_EQ(n("ncclCommDestroy"), 3);
  }
  const auto uid = calls(r, "ncclGetUniqueId");
  ASSERT_EQ(uid.size(), 3u);  // two by the parent, one inside its ncclCommInitAll
  EXPECT_EQ(uid[2]["parent_api"], "ncclCommInitAll");
  const std::string root_id = uid[0]["args"]["uniqueId"], second_id = uid[1]["args"]["uniqueId"];
  ASSERT_EQ(root_id.size(), 16u);
  ASSERT_NE(root_id, second_id);

  // comm_id: the hash of the unique id, the same in both ranks; rank/nranks from the arguments.
  std::map<long, std::string> world, split, nonblocking;
  for (const json& c : calls(r, "ncclCommInitRankConfig")) {
    const long pid = c["pid"];
    EXPECT_EQ(c["ret_name"], "ncclInProgress");
    EXPECT_EQ(c["args"]["commId"], second_id);
    EXPECT_EQ(c["nccl"]["comm_id"], second_id);
    EXPECT_EQ(c["nccl"]["rank"], ranks.at(pid));
    nonblocking[pid] = c["nccl"]["comm_id"];
  }
  ASSERT_EQ(nonblocking.size(), 2u);
  for (const json& c : calls(r, "ncclCommInitRank")) {
    const long pid = c["pid"];
    EXPECT_EQ(c["args"]["commId"], root_id);
    EXPECT_EQ(c["nccl"]["comm_id"], root_id);
    EXPECT_EQ(c["nccl"]["rank"], ranks.at(pid));
    EXPECT_EQ(c["nccl"]["nranks"], 2);
    world[pid] = c["nccl"]["comm_id"];
  }
  for (const json& c : calls(r, "ncclCommSplit")) {
    split[c["pid"].get<long>()] = c["nccl"]["comm_id"];
    EXPECT_TRUE(c["nccl"]["rank"].is_null()) << "a split communicator's rank is learned later";
  }
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split.begin()->second, split.rbegin()->second);
  EXPECT_NE(split.begin()->second, root_id);

  // Sequence numbers: consecutive per process and communicator, the same
  // (comm_id, seq) -> op on both ranks; group marks; bytes = count x size.
  const std::map<std::string, long> element = {{"ncclFloat32", 4}, {"ncclInt32", 4}, {"ncclFloat16", 2},
                                                {"ncclInt8", 1},     {"ncclFloat64", 8}, {"ncclUint8", 1}};
  std::map<long, std::map<std::pair<std::string, long>, std::string>> keys;  // pid -> (comm_id, seq) -> api
  int failed = 0;
  for (const json& c : calls(r)) {
    const std::string api = c["api"];
    if (api == "ncclGetUniqueId" || !ranks.count(c["pid"].get<long>())) continue;  // the parent: below
    ASSERT_TRUE(c.contains("nccl")) << c;
    const json& n = c["nccl"];
    // Only the send/recv pair sits between ncclGroupStart and ncclGroupEnd.
    EXPECT_EQ(n["in_group"], api == "ncclSend" || api == "ncclRecv") << c;
    const bool collective = api == "ncclAllReduce" || api == "ncclBroadcast" || api == "ncclAllGather" ||
                            api == "ncclSend" || api == "ncclRecv";
    if (!collective) {
      EXPECT_TRUE(n["seq"].is_null()) << c;
      continue;
    }
    const long pid = c["pid"];
    if (c["ret"] != 0 && c["ret_name"] != "ncclInProgress") {
      ++failed;
      EXPECT_EQ(c["ret_name"], "ncclInvalidArgument");
      EXPECT_TRUE(n["seq"].is_null()) << "a failed call gets no sequence number: " << c;
      EXPECT_EQ(n["comm_id"], world.at(pid));
      continue;
    }
    const std::string type = c["args"]["datatype"];
    const long count = c["args"].contains("count") ? c["args"]["count"].get<long>() : c["args"]["sendcount"].get<long>();
    EXPECT_EQ(n["bytes"], count * element.at(type)) << c;
    EXPECT_EQ(n["rank"], ranks.at(pid)) << c;
    EXPECT_EQ(n["nranks"], 2) << c;
    const std::string comm = n["comm_id"];
    EXPECT_TRUE(comm == world.at(pid) || comm == split.at(pid) || comm == nonblocking.at(pid)) << c;
    // ncclInProgress: enqueued on a nonblocking communicator, so it is numbered.
    EXPECT_EQ(c["ret_name"] == "ncclInProgress", comm == nonblocking.at(pid)) << c;
    const bool inserted = keys[pid].emplace(std::make_pair(comm, n["seq"].get<long>()), api).second;
    EXPECT_TRUE(inserted) << "duplicate (comm_id, seq): " << c;
  }
  EXPECT_EQ(failed, 2);

  // The parent's ncclCommInitAll: two communicators of one process, the id NCCL made for them.
  const std::string all_id = uid[2]["args"]["uniqueId"];
  const auto init_all = calls(r, "ncclCommInitAll");
  ASSERT_EQ(init_all.size(), 1u);
  EXPECT_EQ(init_all[0]["nccl"]["comm_id"], all_id);
  EXPECT_EQ(init_all[0]["nccl"]["nranks"], 2);
  std::set<long> all_ranks;
  for (const json& c : calls(r, "ncclAllReduce")) {
    if (ranks.count(c["pid"].get<long>())) continue;
    EXPECT_EQ(c["nccl"]["comm_id"], all_id) << c;
    EXPECT_EQ(c["nccl"]["seq"], 0) << c;
    EXPECT_EQ(c["nccl"]["in_group"], true) << c;
    EXPECT_EQ(c["nccl"]["bytes"], 128) << c;
    all_ranks.insert(c["nccl"]["rank"].get<long>());
  }
  EXPECT_EQ(all_ranks, (std::set<long>{0, 1}));
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys.begin()->second, keys.rbegin()->second) << "the ranks disagree on (comm_id, seq) -> op";
  for (const auto& [pid, by_key] : keys) {
    std::map<std::string, long> next;
    for (const auto& [key, api] : by_key) EXPECT_EQ(key.second, next[key.first]++) << "gap before seq " << key.second;
    EXPECT_EQ(next[world.at(pid)], 5 * kIterations);
    EXPECT_EQ(next[split.at(pid)], 3);
    EXPECT_EQ(next[nonblocking.at(pid)], 1);
  }
}

TEST_F(Nccl, SummaryCollectivesTableAndStraggler) {
  const Result r = run("timeout 120 " + tracer() + " --summary --json" + app());
  ASSERT_EQ(r.status, 0) << r.err;
  const std::map<long, int> ranks = rank_of_pid(r.err);
  ASSERT_EQ(ranks.size(), 2u) << r.err;
  const auto summaries = records(r.lines, "summary");
  ASSERT_EQ(summaries.size(), 1u) << r.out;
  const json& s = summaries[0];

  std::map<std::string, std::pair<long, long>> by_op;  // op -> calls, bytes over both communicators
  std::set<std::string> comms;
  for (const json& row : s["collectives"]) {
    auto& [calls, bytes] = by_op[row["name"]];
    calls += row["calls"].get<long>();
    bytes += row["bytes"].get<long>();
    comms.insert(row["comm_id"]);
    EXPECT_LE(row["min_ns"].get<double>(), row["med_ns"].get<double>()) << row;
    EXPECT_LE(row["med_ns"].get<double>(), row["max_ns"].get<double>()) << row;
  }
  EXPECT_EQ(comms.size(), 4u) << "world, split, nonblocking and the parent's ncclCommInitAll communicators";
  // Both ranks: failed calls are not collectives; ncclInProgress ones are. The parent: 2 on InitAll's.
  EXPECT_EQ(by_op["ncclAllReduce"],
            std::make_pair(2L * (kIterations + 3 + 1) + 2, 2L * (kIterations * 4096 + 3 * 64 + 16) + 2 * 128));
  EXPECT_EQ(by_op["ncclBroadcast"], std::make_pair(2L * kIterations, 2L * kIterations * 1024));
  EXPECT_EQ(by_op["ncclAllGather"], std::make_pair(2L * kIterations, 2L * kIterations * 1024));
  EXPECT_EQ(by_op["ncclSend"], std::make_pair(2L * kIterations, 2L * kIterations * 4096));
  EXPECT_EQ(by_op["ncclRecv"], std::make_pair(2L * kIterations, 2L * kIterations * 4096));

  // Rank 1 sleeps 5 ms before every 5th all-reduce: it is the straggler.
  const json& skew = s["rank_skew"];
  EXPECT_EQ(skew["keys"], 5 * kIterations + 3 + 1);
  EXPECT_GE(skew["spread_max_ns"].get<double>(), 4e6);  // 5 ms less barrier wake-up jitter
  json straggler;
  for (const json& i : s["insights"])
    if (i["rule"] == "rank-skew") straggler = i;
  ASSERT_FALSE(straggler.is_null()) << s["insights"];
  EXPECT_EQ(straggler["numbers"]["straggler_rank"], 1);
  EXPECT_EQ(ranks.at(straggler["numbers"]["straggler_pid"].get<long>()), 1);
  EXPECT_GE(straggler["numbers"]["straggler_lag_ns"].get<double>(), (kIterations / 5) * 4e6);
}

TEST_F(Nccl, LayerAndGroupSelection) {
  Result r = run("timeout 120 " + tracer() + " --json --layer runtime" + app());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(calls(r).size(), 0u);
  r = run("timeout 120 " + tracer() + " --json --layer nccl -f coll" + app());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(calls(r, "ncclBroadcast").size(), 2u * kIterations);
  r = run("timeout 120 " + tracer() + " --json -f mem" + app());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(calls(r, "ncclBroadcast").size(), 0u);
  r = run("timeout 60 " + tracer() + " --layer mpi -- true");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--layer must be runtime, driver, nccl or all"), std::string::npos) << r.err;
}

TEST_F(Nccl, ErrorsOnlyKeepsFailedCallsAndNotInProgress) {
  const Result r = run("timeout 120 " + tracer() + " --json --errors" + app());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto all = calls(r);
  ASSERT_EQ(all.size(), 2u) << r.out;
  for (const json& c : all) EXPECT_EQ(c["ret_name"], "ncclInvalidArgument");
}

}  // namespace
}  // namespace cudatrace_test
