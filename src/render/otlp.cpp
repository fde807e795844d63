// The OTLP/HTTP exporter of --otlp (render/otlp.h, docs/otlp.md): spans
// built on the reader's thread, sent from a thread of their own.
#include "cudatrace/render/otlp.h"

#include <curl/curl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "cudatrace/decode/otel.h"
#include "cudatrace/render/otlp_metrics.h"
#include "cudatrace/target/identity.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"

namespace cudatrace {
namespace {

namespace otlp_common = opentelemetry::proto::common::v1;
namespace otlp_trace = opentelemetry::proto::trace::v1;
namespace otlp_resource = opentelemetry::proto::resource::v1;
using opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest;
using opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;
using Clock = std::chrono::steady_clock;

// Past this many processes, the resources computed so far are forgotten
// (and computed again for the processes that still call).
constexpr std::size_t kMaxResources = 4096;
// What the queued spans may hold, at most (a kernel name may be kilobytes).
constexpr std::size_t kMaxQueuedBytes = std::size_t(64) << 20;

// CLOCK_REALTIME minus CLOCK_MONOTONIC now: a call's times in Unix time.
std::int64_t realtime_offset_ns() {
  timespec real{}, mono{};
  clock_gettime(CLOCK_REALTIME, &real);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  return (std::int64_t(real.tv_sec) - mono.tv_sec) * 1000000000 + (std::int64_t(real.tv_nsec) - mono.tv_nsec);
}

std::uint64_t unix_now_ns() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return std::uint64_t(now.tv_sec) * 1000000000ull + std::uint64_t(now.tv_nsec);
}

void set_value(otlp_common::AnyValue& out, const std::variant<std::string, std::int64_t, double, bool>& v) {
  if (const auto* s = std::get_if<std::string>(&v)) out.set_string_value(*s);
  else if (const auto* i = std::get_if<std::int64_t>(&v)) out.set_int_value(*i);
  else if (const auto* d = std::get_if<double>(&v)) out.set_double_value(*d);
  else out.set_bool_value(std::get<bool>(v));
}

void add_string(otlp_resource::Resource& r, const std::string& key, const std::string& value) {
  auto* kv = r.add_attributes();
  kv->set_key(key);
  kv->mutable_value()->set_string_value(value);
}

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The process's own OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (its
// environment as it was at exec).
void environment_resource(std::uint32_t pid, std::vector<std::pair<std::string, std::string>>& attrs) {
  const std::string environ = read_whole("/proc/" + std::to_string(pid) + "/environ");
  std::string service;
  for (std::size_t at = 0; at < environ.size();) {
    std::size_t end = environ.find('\0', at);
    if (end == std::string::npos) end = environ.size();
    const std::string_view entry(environ.data() + at, end - at);
    at = end + 1;
    constexpr std::string_view kAttrs = "OTEL_RESOURCE_ATTRIBUTES=", kService = "OTEL_SERVICE_NAME=";
    if (entry.substr(0, kAttrs.size()) == kAttrs)
      for (auto& kv : parse_otel_pairs(entry.substr(kAttrs.size()))) attrs.push_back(std::move(kv));
    else if (entry.substr(0, kService.size()) == kService)
      service = std::string(entry.substr(kService.size()));
  }
  if (!service.empty()) {  // OTEL_SERVICE_NAME wins over OTEL_RESOURCE_ATTRIBUTES's service.name
    attrs.erase(std::remove_if(attrs.begin(), attrs.end(), [](const auto& kv) { return kv.first == "service.name"; }),
                attrs.end());
    attrs.emplace_back("service.name", service);
  }
}

// One queued span and the resource of its process.
struct QueuedSpan {
  std::shared_ptr<const otlp_resource::Resource> resource;
  otlp_trace::Span span;
  std::size_t bytes;
};

// What a POST came back with.
struct PostResult {
  long status = 0;                             // the HTTP status; 0: no answer
  std::string error;                           // why there was no answer
  std::optional<std::chrono::seconds> retry_after;
};

class OtlpExporter final : public OtlpWriter {
 public:
  OtlpExporter(OtlpConfig config, std::string host)
      : config_(std::move(config)), host_(std::move(host)), offset_ns_(realtime_offset_ns()),
        ids_(std::random_device{}()), started_unix_ns_(unix_now_ns()) {
    curl_ = curl_easy_init();
    sender_ = std::thread([this] { send_loop(); });
  }
  ~OtlpExporter() override {
    if (sender_.joinable()) stop();
    curl_easy_cleanup(curl_);
  }

  bool ok() const { return curl_ != nullptr; }

  void call(const Call& c, const CallAnalysis&) override {
    const CallSpan& cs = call_span(c);
    if (!cs.has_span && !config_.calls_without_span) return;  // no span: in the trace and the end line only
    if (queue_full()) return;  // a Collector down or slow: dropped before any work
    QueuedSpan q{resource_of(c), {}, 0};
    otlp_trace::Span& s = q.span;
    std::uint64_t span_id = 0;
    while (span_id == 0) span_id = ids_();
    s.set_span_id(&span_id, sizeof span_id);
    if (cs.has_span) {
      s.set_trace_id(cs.span.trace_id.data(), cs.span.trace_id.size());
      s.set_parent_span_id(cs.span.span_id.data(), cs.span.span_id.size());
    } else {  // --otlp-all-calls: a root span of a trace of its own
      const std::uint64_t trace[2] = {ids_(), ids_() | 1};
      s.set_trace_id(trace, sizeof trace);
    }
    s.set_name(c.api->symbol);
    s.set_kind(otlp_trace::Span::SPAN_KIND_INTERNAL);
    s.set_start_time_unix_nano(std::uint64_t(std::int64_t(c.ts_ns) + offset_ns_));
    s.set_end_time_unix_nano(std::uint64_t(std::int64_t(c.end_ns()) + offset_ns_));
    q.bytes = sizeof(QueuedSpan) + c.api->symbol.size();
    for (const OtlpAttribute& a : otlp_call_attributes(c)) {
      auto* kv = s.add_attributes();
      kv->set_key(a.key);
      set_value(*kv->mutable_value(), a.value);
      const auto* text = std::get_if<std::string>(&a.value);
      q.bytes += a.key.size() + 32 + (text ? text->size() : 0);
    }
    if (!c.unfinished && c.failed()) {
      s.mutable_status()->set_code(otlp_trace::Status::STATUS_CODE_ERROR);
      s.mutable_status()->set_message(otlp_error_name(c));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++loss_.spans;
    if (queue_.size() >= kMaxQueuedSpans || queued_bytes_ + q.bytes > kMaxQueuedBytes) {  // filled meanwhile
      ++loss_.queue_full;
      return;
    }
    queued_bytes_ += q.bytes;
    queue_.push_back(std::move(q));
    if (queue_.size() >= kBatchSpans) wake_.notify_one();
  }

  // Counts the span as dropped if the queue has no room for it now.
  bool queue_full() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.size() < kMaxQueuedSpans && queued_bytes_ < kMaxQueuedBytes) return false;
    ++loss_.spans;
    ++loss_.queue_full;
    return true;
  }

  void metrics(std::string exposition) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_exposition_ = std::move(exposition);
      metrics_due_ = true;
    }
    wake_.notify_one();
  }

  OtlpLoss stop() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      deadline_ns_ = (Clock::now() + config_.timeout).time_since_epoch().count();
      stopping_ = true;
      metrics_due_ = true;  // the spans' last counts
    }
    wake_.notify_all();
    if (sender_.joinable()) sender_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    loss_.unsent += queue_.size();
    queue_.clear();
    return loss_;
  }

 private:
  // The process's resource, computed at its first call (and again when it
  // publishes another context): the process may be gone by send time.
  std::shared_ptr<const otlp_resource::Resource> resource_of(const Call& c) {
    const ProcessContext* ctx = call_span(c).process;
    const std::uint64_t generation = ctx && ctx->published ? ctx->generation : 0;
    auto it = resources_.find(c.pid);
    if (it != resources_.end() && it->second.first == generation) return it->second.second;
    if (resources_.size() >= kMaxResources) resources_.clear();
    std::vector<std::pair<std::string, std::string>> attrs;
    if (generation) attrs = ctx->resource;  // OTEP 4719: the process says who it is
    else environment_resource(c.pid, attrs);
    ProcessIdentity who;
    const bool alive = read_identity(pid_t(c.pid), who);
    const std::string exe = read_link("/proc/" + std::to_string(c.pid) + "/exe");
    const std::string exe_name = exe.substr(exe.rfind('/') + 1);
    const auto has = [&attrs](const std::string& key) {
      return std::any_of(attrs.begin(), attrs.end(), [&key](const auto& kv) { return kv.first == key; });
    };
    if (!has("service.name"))
      attrs.emplace_back("service.name", !exe_name.empty() ? exe_name : alive ? who.comm : std::string(c.comm()));
    for (const auto& kv : config_.resource)
      if (!has(kv.first)) attrs.push_back(kv);
    auto r = std::make_shared<otlp_resource::Resource>();
    for (const auto& [key, value] : attrs) add_string(*r, key, value);
    if (!has("process.pid")) {
      auto* pid = r->add_attributes();
      pid->set_key("process.pid");
      pid->mutable_value()->set_int_value(c.pid);
    }
    const auto add_unless_set = [&](const char* key, const std::string& value) {
      if (!value.empty() && !has(key)) add_string(*r, key, value);
    };
    add_unless_set("process.executable.name", exe_name);
    add_unless_set("host.name", host_);
    add_unless_set("container.id", who.cgroup.container_id);
    add_unless_set("k8s.pod.uid", who.cgroup.pod_uid);
    resources_[c.pid] = {generation, r};
    return r;
  }

  static std::string read_link(const std::string& path) {
    char buf[4096];
    const ssize_t n = readlink(path.c_str(), buf, sizeof buf);
    return n > 0 ? std::string(buf, std::size_t(n)) : std::string();
  }

  bool past_deadline() const {
    const std::int64_t deadline = deadline_ns_.load();
    return deadline && Clock::now().time_since_epoch().count() >= deadline;
  }

  void send_loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait_for(lock, kBatchDelay,
                     [this] { return stopping_ || queue_.size() >= kBatchSpans || metrics_due_; });
      send_due_metrics(lock);
      if (queue_.empty()) {
        if (stopping_) return;
        continue;
      }
      if (stopping_ && past_deadline()) return;  // stop() counts what is left
      std::vector<QueuedSpan> batch;
      const std::size_t n = std::min(queue_.size(), kBatchSpans);
      batch.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        queued_bytes_ -= queue_.front().bytes;
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      lock.unlock();
      const std::string body = encode(batch);
      lock.lock();
      send(body, batch.size(), lock);
    }
  }

  // One request of the batch's spans, grouped by process.
  std::string encode(std::vector<QueuedSpan>& batch) const {
    ExportTraceServiceRequest request;
    std::map<const otlp_resource::Resource*, otlp_trace::ScopeSpans*> scopes;
    for (QueuedSpan& q : batch) {
      otlp_trace::ScopeSpans*& scope = scopes[q.resource.get()];
      if (!scope) {
        auto* rs = request.add_resource_spans();
        *rs->mutable_resource() = *q.resource;
        scope = rs->add_scope_spans();
        scope->mutable_scope()->set_name("cudatrace");
        scope->mutable_scope()->set_version(CUDATRACE_VERSION);
      }
      scope->add_spans()->Swap(&q.span);
    }
    std::string body = request.SerializeAsString();
    return config_.gzip ? gzipped(body) : body;
  }

  // The node's exposition the driver hands over, when it hands one
  // (node_metrics), else on a timer of its own, with the spans' own counts
  // now. Called and returns locked; also between a batch's retries.
  void send_due_metrics(std::unique_lock<std::mutex>& lock) {
    if (!config_.node_metrics && Clock::now() >= next_own_metrics_) {
      metrics_due_ = true;
      next_own_metrics_ = Clock::now() + config_.metrics_interval;
    }
    if (!metrics_due_ || past_deadline()) return;
    metrics_due_ = false;
    if (config_.node_metrics && pending_exposition_.empty()) return;  // sent already
    std::string exposition = std::move(pending_exposition_);
    pending_exposition_.clear();
    if (config_.spans) exposition += spans_exposition();
    lock.unlock();
    const std::string body = encode_metrics(exposition);
    lock.lock();
    send_metrics(body, lock);
  }

  // What became of the spans so far, in the text format (docs/otlp.md).
  // Called locked.
  std::string spans_exposition() const {
    std::string out =
        "# HELP cudatrace_otlp_spans_total Calls handed to the OTLP exporter as spans, by what became of them\n"
        "# TYPE cudatrace_otlp_spans_total counter\n";
    for (const auto& [outcome, n] : {std::pair<const char*, std::uint64_t>{"sent", loss_.sent},
                                     {"dropped_queue_full", loss_.queue_full},
                                     {"refused", loss_.rejected}})
      out += std::string("cudatrace_otlp_spans_total{outcome=\"") + outcome + "\"} " + std::to_string(n) + "\n";
    out += "# HELP cudatrace_otlp_queued_spans Spans waiting to be sent\n"
           "# TYPE cudatrace_otlp_queued_spans gauge\n"
           "cudatrace_otlp_queued_spans " + std::to_string(queue_.size()) + "\n";
    return out;
  }

  std::string encode_metrics(const std::string& exposition) const {
    ExportMetricsServiceRequest request;
    auto* rm = request.add_resource_metrics();
    otlp_resource::Resource& r = *rm->mutable_resource();
    add_string(r, "service.name", "cudatrace");
    auto* pid = r.add_attributes();
    pid->set_key("process.pid");
    pid->mutable_value()->set_int_value(getpid());
    if (!host_.empty()) add_string(r, "host.name", host_);
    for (const auto& [key, value] : config_.resource)
      if (key != "service.name") add_string(r, key, value);
    auto* scope = rm->add_scope_metrics();
    scope->mutable_scope()->set_name("cudatrace");
    scope->mutable_scope()->set_version(CUDATRACE_VERSION);
    exposition_to_otlp(exposition, started_unix_ns_, unix_now_ns(), *scope);
    std::string body = request.SerializeAsString();
    return config_.gzip ? gzipped(body) : body;
  }

  // Metrics are sent once: a retry would be overtaken by the next interval's
  // values, which say all these did. Called and returns locked.
  void send_metrics(const std::string& body, std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    const PostResult r = post(config_.metrics_url, body);
    lock.lock();
    if (r.status >= 200 && r.status < 300) {
      ++loss_.metrics_sent;
      return;
    }
    ++loss_.metrics_failed;
    loss_.last_error = r.status ? "HTTP " + std::to_string(r.status) : r.error;
  }

  static std::string gzipped(const std::string& in) {
    z_stream zs{};
    if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return in;
    std::string out(deflateBound(&zs, in.size()), '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = uInt(in.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = uInt(out.size());
    deflate(&zs, Z_FINISH);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
  }

  // Sends `body` (n spans) until it is taken, refused or the stop deadline
  // passes, retrying what may succeed later. Called and returns locked.
  void send(const std::string& body, std::size_t n, std::unique_lock<std::mutex>& lock) {
    std::chrono::milliseconds backoff = kFirstBackoff;
    while (true) {
      lock.unlock();
      const PostResult r = post(config_.traces_url, body);
      lock.lock();
      if (r.status >= 200 && r.status < 300) {
        loss_.sent += n;
        return;
      }
      loss_.last_error = r.status ? "HTTP " + std::to_string(r.status) : r.error;
      const bool retryable = r.status == 0 || r.status == 429 || r.status == 502 || r.status == 503 || r.status == 504;
      if (!retryable) {
        loss_.rejected += n;
        return;
      }
      // Once stopping, the last metrics go before a retry: retries may run
      // to the exit deadline and leave them no time.
      if (stopping_) send_due_metrics(lock);
      std::chrono::milliseconds wait = backoff;
      if (r.retry_after) wait = std::min<std::chrono::milliseconds>(*r.retry_after, kMaxBackoff);
      backoff = std::min(backoff * 2, kMaxBackoff);
      const Clock::time_point until = Clock::now() + wait;
      // Woken by stop(): from then on the wait ends at the exit deadline.
      while (Clock::now() < until && !past_deadline()) {
        Clock::time_point limit = std::min(until, Clock::now() + kBatchDelay);  // metrics go on meanwhile
        if (const std::int64_t d = deadline_ns_.load()) limit = std::min(limit, Clock::time_point(Clock::duration(d)));
        wake_.wait_until(lock, limit);
        send_due_metrics(lock);
      }
      if (past_deadline()) {
        loss_.unsent += n;
        return;
      }
    }
  }

  static std::size_t discard(char*, std::size_t size, std::size_t n, void*) { return size * n; }
  static std::size_t header(char* data, std::size_t size, std::size_t n, void* user) {
    const std::string_view line(data, size * n);
    constexpr std::string_view kRetryAfter = "retry-after:";
    if (line.size() > kRetryAfter.size() &&
        strncasecmp(line.data(), kRetryAfter.data(), kRetryAfter.size()) == 0) {
      const std::string value(line.substr(kRetryAfter.size()));
      char* end = nullptr;
      const long seconds = std::strtol(value.c_str(), &end, 10);
      if (end != value.c_str() && seconds >= 0)  // an HTTP date instead: the backoff's own wait
        static_cast<PostResult*>(user)->retry_after = std::chrono::seconds(seconds);
    }
    return size * n;
  }
  // Ends a request in progress once stop()'s deadline has passed.
  static int progress(void* self, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<const OtlpExporter*>(self)->past_deadline() ? 1 : 0;
  }

  PostResult post(const std::string& url, const std::string& body) {
    PostResult r;
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/x-protobuf");
    if (config_.gzip) headers = curl_slist_append(headers, "Content-Encoding: gzip");
    for (const std::string& h : config_.headers) headers = curl_slist_append(headers, h.c_str());
    curl_easy_reset(curl_);
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_POST, 1L);
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.size()));
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, long(config_.timeout.count()));
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &OtlpExporter::discard);
    curl_easy_setopt(curl_, CURLOPT_HEADERFUNCTION, &OtlpExporter::header);
    curl_easy_setopt(curl_, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(curl_, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl_, CURLOPT_XFERINFOFUNCTION, &OtlpExporter::progress);
    curl_easy_setopt(curl_, CURLOPT_XFERINFODATA, this);
    curl_easy_setopt(curl_, CURLOPT_PROTOCOLS_STR, "http,https");
    const CURLcode rc = curl_easy_perform(curl_);
    if (rc == CURLE_OK)
      curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &r.status);
    else
      r.error = curl_easy_strerror(rc);
    curl_slist_free_all(headers);
    return r;
  }

  const OtlpConfig config_;
  const std::string host_;
  const std::int64_t offset_ns_;
  std::mt19937_64 ids_;
  const std::uint64_t started_unix_ns_;  // the counters' start
  // pid -> (context generation, resource): the reader's thread's alone.
  std::unordered_map<std::uint32_t, std::pair<std::uint64_t, std::shared_ptr<const otlp_resource::Resource>>>
      resources_;
  CURL* curl_ = nullptr;  // the sender's

  std::mutex mutex_;  // guards what follows
  std::condition_variable wake_;
  std::deque<QueuedSpan> queue_;
  std::string pending_exposition_;  // node_metrics: the exposition to send next
  bool metrics_due_ = false;
  Clock::time_point next_own_metrics_ = Clock::now();
  std::size_t queued_bytes_ = 0;
  OtlpLoss loss_;
  bool stopping_ = false;
  std::atomic<std::int64_t> deadline_ns_{0};  // steady clock; 0 until stop()
  std::thread sender_;
};

}  // namespace

bool otlp_export_built() { return true; }

std::unique_ptr<OtlpWriter> make_otlp_writer(const OtlpConfig& config, std::string& error) {
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  auto w = init == CURLE_OK ? std::make_unique<OtlpExporter>(config, host) : nullptr;
  if (!w || !w->ok()) {
    error = "--otlp: cannot start libcurl";
    return nullptr;
  }
  return w;
}

}  // namespace cudatrace
