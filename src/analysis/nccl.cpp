#include "cudatrace/analysis/nccl.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "cudatrace/analysis/summary.h"

namespace cudatrace {
namespace {

std::uint64_t read_u64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

std::uint64_t nccl_split_id(std::uint64_t parent, std::int64_t color, std::uint64_t index) {
  std::uint8_t bytes[24];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<std::uint8_t>(parent >> (8 * i));
    bytes[8 + i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(color) >> (8 * i));
    bytes[16 + i] = static_cast<std::uint8_t>(index >> (8 * i));
  }
  return nccl_fnv1a(bytes, sizeof bytes);
}




const NcclInfo* NcclTracker::on_call(const Call& c) {
  if (c.api->layer() != Layer::Nccl) return nullptr;
  const std::uint32_t tid = c.tid;
  info_ = NcclInfo{};
  const auto depth = group_depth_.find(tid);
  info_.in_group = depth != group_depth_.end() && depth->second > 0;
  if (c.unfinished) return &info_;
  switch (c.api->effect()) {
    case Effect::GroupStart:
      if (!c.failed()) ++group_depth_[tid];
      break;
    case Effect::GroupEnd:
      // NCCL leaves the group even when ncclGroupEnd reports an error. The
      // call is in a group when an enclosing one is still open.
      if (depth != group_depth_.end()) {
        info_.in_group = --depth->second > 0;
        if (!info_.in_group) group_depth_.erase(depth);
      }
      break;
    case Effect::CommInit:
      on_comm_init(c);
      break;
    case Effect::CommDestroy:
      if (const auto comm = role_value(c, Role::Object)) comms_.erase({c.pid, *comm});
      break;
    case Effect::Collective:
      on_collective(c, info_);
      break;
    default:
      if (c.api->spec->args.size() == 1 && c.api->spec->args[0].type == ArgType::NcclUniqueIdPtr) {
        // ncclGetUniqueId: ncclCommInitAll makes its communicators' id with it.
        const auto* id = arg_of_type(c, ArgType::NcclUniqueIdPtr);
        if (id && c.parent && c.parent->effect() == Effect::CommInit && std::holds_alternative<std::string_view>(id->value))
          unique_id_[tid] = std::stoull(std::string(std::get<std::string_view>(id->value)), nullptr, 16);
      } else if (const auto comm = role_value(c, Role::Object)) {
        // ncclCommCount / ncclCommUserRank: what a split communicator does not tell at creation.
        auto it = comms_.find({c.pid, *comm});
        const NamedValue* out = arg_of_type(c, ArgType::OutInt);
        if (it != comms_.end() && out && std::holds_alternative<std::int64_t>(out->value)) {
          const int v = static_cast<int>(std::get<std::int64_t>(out->value));
          (std::string_view(out->name) == "count" ? it->second.nranks : it->second.rank) = v;
        }
      }
  }
  return &info_;
}

void NcclTracker::on_comm_init(const Call& c) {
  if (c.failed()) return;
  const std::uint32_t pid = c.pid;
  const auto* payload = reinterpret_cast<const std::uint8_t*>(c.payload.data());
  if (arg_of_type(c, ArgType::NcclCommArray)) {
    // ncclCommInitAll: ndev communicators of this process, ranks 0..ndev-1, all
    // with the id NCCL made for them in the ncclGetUniqueId call it nests.
    const auto ndev = role_value(c, Role::Ranks);
    if (!ndev || c.payload_fault) return;
    const int n = static_cast<int>(static_cast<std::int32_t>(*ndev));
    const auto uid = unique_id_.find(c.tid);
    std::uint64_t id;
    if (uid != unique_id_.end()) {
      id = uid->second;
      unique_id_.erase(uid);
    } else {
      // Its id stays within this process anyway: any value unique to the call.
      const std::uint64_t seed[2] = {pid, c.ts_ns};
      id = nccl_fnv1a(seed, sizeof seed);
    }
    const int known = std::min<int>({n, kNcclMaxInitAllComms, static_cast<int>(c.payload.size() / 8)});
    for (int i = 0; i < known; ++i) comms_[{pid, read_u64(payload + 8 * i)}] = Comm{id, i, n, 0, 0};
    info_.has_comm = true;
    info_.comm_id = id;
    info_.nranks = n;
    return;
  }
  const auto handle = role_value(c, Role::Created);
  if (!handle || !*handle) return;  // ncclCommSplit with NCCL_SPLIT_NOCOLOR gives no communicator
  Comm comm;
  const NamedValue* uid = arg_of_type(c, ArgType::NcclUniqueId);
  if (!uid) uid = arg_of_type(c, ArgType::NcclUniqueIdPtr);  // ncclCommInitRankScalable: its first id
  if (uid) {
    if (!std::holds_alternative<std::string_view>(uid->value)) return;  // the id could not be read
    const auto id = nccl_unique_id_hash(payload, c.payload.size());
    if (!id) return;
    comm.id = *id;
    comm.nranks = static_cast<int>(static_cast<std::int32_t>(role_value(c, Role::Ranks).value_or(-1)));
    comm.rank = static_cast<int>(static_cast<std::int32_t>(role_value(c, Role::Rank).value_or(-1)));
  } else {
    // ncclCommSplit: every rank splits the parent in the same order, so the
    // parent's id, the color and the split's index agree across the ranks
    // that end up in one new communicator.
    const auto parent_handle = role_value(c, Role::Object);
    auto parent = parent_handle ? comms_.find({pid, *parent_handle}) : comms_.end();
    if (parent == comms_.end()) return;
    const auto color = static_cast<std::int32_t>(role_value(c, Role::Color).value_or(0));
    comm.id = nccl_split_id(parent->second.id, color, parent->second.splits++);
  }
  comms_[{pid, *handle}] = comm;
  info_.has_comm = true;
  info_.comm_id = comm.id;
  info_.rank = comm.rank;
  info_.nranks = comm.nranks;
}

void NcclTracker::on_collective(const Call& c, NcclInfo& info) {
  const auto count = role_value(c, Role::Count);
  const auto type = role_value(c, Role::DataType);
  if (count && type && nccl_datatype_size(*type & 0xffffffff)) {
    info.has_bytes = true;
    info.bytes = *count * nccl_datatype_size(*type & 0xffffffff);
  }
  const auto handle = role_value(c, Role::Object);
  auto comm = handle ? comms_.find({c.pid, *handle}) : comms_.end();
  if (comm != comms_.end()) {
    info.has_comm = true;
    info.comm_id = comm->second.id;
    info.rank = comm->second.rank;
    info.nranks = comm->second.nranks;
  }
  // A failed call enqueued nothing: no sequence number, and the next call
  // takes the number it would have had. A collective nested in another one
  // (a library calling its own exported entry point) is not a second one.
  const bool nested = c.parent && c.parent->effect() == Effect::Collective;
  if (c.failed() || nested) return;
  CollectiveStats& row = collectives_[{c.api->symbol, info.has_comm ? info.comm_id : 0}];
  ++row.calls;
  row.bytes += info.bytes;
  add_call(row.latency, c.dur_ns, false);
  if (comm == comms_.end()) return;
  info.has_seq = true;
  info.seq = comm->second.next_seq++;
  note_entry(info, c.pid, c.ts_ns);
}

void NcclTracker::note_entry(const NcclInfo& info, std::uint32_t pid, std::uint64_t ts_ns) {
  const auto key = std::make_tuple(info.comm_id, info.seq);
  auto [it, inserted] = pending_.try_emplace(key);
  Pending& p = it->second;
  if (inserted) pending_order_.push_back(key);
  if (info.nranks > 0) p.nranks = info.nranks;
  p.entries.push_back({pid, info.rank, ts_ns});
  if (p.nranks > 0 && static_cast<int>(p.entries.size()) >= p.nranks) {
    fold(done_, p);
    pending_.erase(it);
  }
  // Keys whose other ranks are not traced never complete: bound them.
  while (pending_.size() > kMaxPendingKeys && pending_order_head_ < pending_order_.size()) {
    auto old = pending_.find(pending_order_[pending_order_head_++]);
    if (old == pending_.end()) continue;
    fold(done_, old->second);
    pending_.erase(old);
  }
  if (pending_order_.size() > 4 * kMaxPendingKeys) {
    // Forget the keys already completed or evicted: at most kMaxPendingKeys
    // are live, so this costs O(1) per key over time.
    std::vector<std::tuple<std::uint64_t, std::uint64_t>> live;
    for (std::size_t i = pending_order_head_; i < pending_order_.size(); ++i)
      if (pending_.count(pending_order_[i])) live.push_back(pending_order_[i]);
    pending_order_ = std::move(live);
    pending_order_head_ = 0;
  }
}

void NcclTracker::fold(RankSkew& skew, const Pending& p) {
  // Ranks of one process (ncclCommInitAll) are issued one after the other by
  // one thread: their spread says nothing about stragglers.
  const bool several_processes = std::any_of(p.entries.begin(), p.entries.end(),
                                             [&](const Entry& e) { return e.pid != p.entries.front().pid; });
  if (!several_processes) return;
  auto first = p.entries.front().ts_ns;
  const Entry* last = &p.entries.front();
  for (const Entry& e : p.entries) {
    first = std::min(first, e.ts_ns);
    if (e.ts_ns > last->ts_ns) last = &e;
  }
  ++skew.keys;
  add_call(skew.spread, last->ts_ns - first, false);
  for (const Entry& e : p.entries) {
    RankSkew::Rank& r = skew.ranks[{e.pid, e.rank}];
    r.lag_ns += e.ts_ns - first;
    r.last += &e == last;
  }
}

RankSkew NcclTracker::skew() const {
  RankSkew s = done_;
  for (const auto& [key, p] : pending_) fold(s, p);
  return s;
}

std::vector<Insight> nccl_insights(const RankSkew& skew) {
  if (!skew.keys) return {};
  // The straggler: the rank the others waited for longest in total.
  const auto worst = std::max_element(skew.ranks.begin(), skew.ranks.end(),
                                      [](const auto& a, const auto& b) { return a.second.lag_ns < b.second.lag_ns; });
  const double med = percentile_ns(skew.spread, 0.5), p99 = percentile_ns(skew.spread, 0.99);
  const auto& [who, r] = *worst;
  Insight i;
  i.rule = "rank-skew";
  i.message = fmt::format(
      "rank skew: {} collectives seen from several processes; host entry spread median {:.1f} us, p99 {:.1f} us, "
      "max {:.1f} us; the straggler is rank {} (pid {}): last to enter {} of them, {:.3f} ms behind the first rank "
      "in total",
      skew.keys, med / 1e3, p99 / 1e3, double(skew.spread.max_ns) / 1e3, who.second, who.first, r.last,
      double(r.lag_ns) / 1e6);
  i.numbers = {{"keys", double(skew.keys)},
               {"spread_med_ns", med},
               {"spread_p99_ns", p99},
               {"spread_max_ns", double(skew.spread.max_ns)},
               {"straggler_pid", double(who.first)},
               {"straggler_rank", double(who.second)},
               {"straggler_last", double(r.last)},
               {"straggler_lag_ns", double(r.lag_ns)}};
  return {i};
}

}  // namespace cudatrace
