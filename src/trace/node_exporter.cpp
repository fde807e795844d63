#include "cudatrace/trace/node_exporter.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>

#include "cudatrace/decode/transfer.h"
#include "cudatrace/target/identity.h"
#include "cudatrace/target/process.h"

namespace cudatrace {

static_assert(static_cast<int>(Direction::Default) == CT_EXPORT_DIR_DEFAULT && static_cast<int>(Direction::HtoD) == 1 &&
                  static_cast<int>(Direction::DtoD) == 3,
              "record.h's export directions are decode/transfer.h's Direction");

bool parse_listen_address(const std::string& text, sockaddr_in& addr, std::string& error) {
  const auto colon = text.rfind(':');
  const std::string host = colon == std::string::npos ? text : text.substr(0, colon);
  const std::string port = colon == std::string::npos ? std::string() : text.substr(colon + 1);
  unsigned number = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
  addr = sockaddr_in{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos || port.empty() || ec != std::errc() || end != port.data() + port.size() ||
      number > 65535) {
    error = "--prometheus needs HOST:PORT with a port from 0 (any free port) to 65535 (127.0.0.1:9400, or :9400 for "
            "every address), not '" + text + "'";
    return false;
  }
  addr.sin_port = htons(static_cast<std::uint16_t>(number));
  // An IPv4 address, checked here as given: a host name or an IPv6 form is
  // refused rather than served somewhere the user did not say.
  if (!host.empty() && inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    error = "--prometheus: HOST must be an IPv4 address such as 127.0.0.1, or empty for every address (no host "
            "names or IPv6), not '" + host + "'";
    return false;
  }
  return true;
}

bool check_listen_address(const std::string& text, std::string& error) {
  sockaddr_in addr{};
  if (!parse_listen_address(text, addr, error)) return false;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  // As the server will: SO_REUSEADDR, so that only a listener there refuses it.
  const bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
                  bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  if (!ok) error = "cannot serve Prometheus metrics on " + text + ": " + std::strerror(errno);
  if (fd >= 0) close(fd);
  return ok;
}

ct_export_api NodeExporter::export_api(const Api& api) {
  ct_export_api a{};
  switch (api.effect()) {
    case Effect::Launch:
      a.kind = CT_EXP_LAUNCH;
      return a;
    case Effect::AllocDevice:
    case Effect::AllocManaged:
    case Effect::Free:
      a.kind = CT_EXP_MEMORY;
      return a;
    case Effect::Copy:
      break;
    default:
      return a;
  }
  a.kind = CT_EXP_COPY;
  // As transfer_bytes() (summary.h): the first size, or width x height for
  // the 2D forms (the last two sizes, after the pitches).
  std::vector<int> sizes;
  for (std::size_t i = 0; i < api.spec->args.size(); ++i) {
    const ArgType t = api.spec->args[i].type;
    if (t == ArgType::Size) sizes.push_back(api.slots[i]);
    if (t == ArgType::MemcpyKind) a.copy_kind_slot = static_cast<std::uint8_t>(api.slots[i] + 1);
  }
  if (sizes.size() > 2) {
    a.bytes_slot = static_cast<std::uint8_t>(sizes[sizes.size() - 2] + 1);
    a.rows_slot = static_cast<std::uint8_t>(sizes.back() + 1);
  } else if (!sizes.empty()) {
    a.bytes_slot = static_cast<std::uint8_t>(sizes.front() + 1);
  }
  // Without a cudaMemcpyKind argument the name says it (as copy_direction()).
  const std::string_view name = api.spec->name;
  Direction d = Direction::Default;
  if (name.find("HtoD") != std::string_view::npos) d = Direction::HtoD;
  if (name.find("DtoH") != std::string_view::npos) d = Direction::DtoH;
  if (name.find("DtoD") != std::string_view::npos) d = Direction::DtoD;
  if (name.find("Peer") != std::string_view::npos) d = Direction::Peer;
  a.copy_kind = static_cast<std::uint8_t>(d);
  return a;
}

std::unique_ptr<NodeExporter> NodeExporter::start(const Maps& maps, const std::string& address, std::string& error) {
  for (const Api& a : apis()) {
    const __u32 id = a.id;
    const ct_export_api row = export_api(a);
    if (bpf_map_update_elem(maps.export_apis, &id, &row, BPF_ANY) != 0) {
      error = std::string("cannot fill the export table: ") + std::strerror(errno);
      return nullptr;
    }
  }
  std::unique_ptr<PrometheusMetrics> metrics = PrometheusMetrics::create(error);
  if (!metrics || !metrics->serve(address, error)) return nullptr;
  return std::unique_ptr<NodeExporter>(new NodeExporter(maps, std::move(metrics)));
}

void NodeExporter::note_process(pid_t pid) {
  ProcessIdentity id;
  if (!read_identity(pid, id)) return;
  identities_[static_cast<std::uint32_t>(pid)] = {id.comm, id.cgroup.container_id, id.cgroup.pod_uid};
}

const MetricsIdentity& NodeExporter::identity(std::uint32_t pid, const std::string& bpf_comm) {
  auto it = identities_.find(pid);
  if (it != identities_.end()) return it->second;
  ProcessIdentity id;
  MetricsIdentity who;
  if (read_identity(static_cast<pid_t>(pid), id))
    who = {id.comm, id.cgroup.container_id, id.cgroup.pod_uid};
  else  // gone before it was ever looked at: BPF's name for it, no cgroup
    who.comm = bpf_comm.empty() ? "unknown" : bpf_comm;
  return identities_.emplace(pid, std::move(who)).first->second;
}

void NodeExporter::tick(const std::vector<__u64>& lost, std::size_t probed_files, const BudgetControl* budget,
                        std::string& error) {
  const Sampling* sampling = budget ? &budget->sampling() : nullptr;
  // Processes gone before this read: their last deltas come in it, then
  // their identities go. One that exits during the tick keeps its identity
  // to the next: its calls made after this read would be "unknown" else.
  std::vector<std::uint32_t> gone;
  for (const auto& [pid, who] : identities_)
    if (!process_exists(static_cast<pid_t>(pid))) gone.push_back(pid);
  std::vector<NodeStats::CallDelta> calls;
  std::vector<NodeStats::HitDelta> hits;
  if (!stats_.read([](std::uint32_t pid) { return process_exists(static_cast<pid_t>(pid)); }, calls, hits, error))
    return;
  for (const NodeStats::HitDelta& h : hits) {
    // (The exporter keeps no single-stepped counts: every entry hit at the emulated price.)
    metrics_->add_cost(identity(h.pid, h.comm), h.entry_hits + h.return_hits,
                       added_ns(cost_, h.entry_hits, 0, h.return_hits) / 1e9);
  }
  for (const NodeStats::CallDelta& d : calls) {
    const Api* api = api_by_id(d.key.api);
    if (!api) continue;
    calls_counted_ += d.grew.calls;
    metrics_->add_calls(identity(d.key.tgid, {}), *api, d.key.status, d.key.direction, d.grew);
  }
  // Under --max-overhead the sampled APIs' series hold what the sampled
  // windows saw (a counter cannot follow an estimate that moves with the
  // duty cycle without lasting errors: the ratio is cumulative); their
  // ratio is published beside them. One sampled once stays published (at 1
  // when it is exact again) so that its series never looks exact by absence.
  if (sampling)
    for (const auto& [id, ratio] : sampling->sampled()) sampled_apis_.insert(id);
  for (std::uint16_t id : sampled_apis_)
    if (const Api* api = api_by_id(id)) metrics_->set_seen_ratio(*api, sampling ? sampling->ratio(id) : 1.0);
  if (budget) {
    const BudgetReport r = budget->report();
    metrics_->set_budget(r.max_pct / 100, r.estimated_cost_pct / 100, r.attached_pct / 100);
  }
  // Live device memory of the running processes, summed by identity; the
  // peak is the highest any one of its processes held (exact, not sampled).
  std::map<MetricsIdentity, std::uint64_t> live;
  std::vector<std::uint32_t> exited;
  for (const auto& [key, mem] : memory_.devices()) {
    const MetricsIdentity& who = identity(key.first, {});
    std::uint64_t& peak = peaks_[who];
    peak = std::max(peak, mem.peak_bytes);
    if (process_exists(static_cast<pid_t>(key.first)))
      live[who] += mem.live_bytes;
    else
      exited.push_back(key.first);
  }
  for (std::uint32_t pid : exited) memory_.forget(pid);
  for (const auto& [who, peak] : peaks_) metrics_->set_memory(who, live[who], peak);
  const std::pair<LossReason, int> losses[] = {{LossReason::RingFull, CT_CNT_LOST_RINGBUF},
                                               {LossReason::ThreadTableFull, CT_CNT_LOST_THREADS},
                                               {LossReason::DepthOverflow, CT_CNT_DEPTH_OVERFLOW},
                                               {LossReason::ControlRecord, CT_CNT_LOST_CONTROL},
                                               {LossReason::AggregationFull, CT_CNT_EXPORT_FULL}};
  for (auto [reason, counter] : losses)
    if (static_cast<std::size_t>(counter) < lost.size()) metrics_->set_lost(reason, lost[counter]);
  metrics_->set_node(stats_.processes().size(), probed_files, cost_.entry_ns / 1e9, cost_.return_ns / 1e9);
  for (std::uint32_t pid : gone) identities_.erase(pid);
}

}  // namespace cudatrace
