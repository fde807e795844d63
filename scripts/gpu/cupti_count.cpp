// CUPTI injection library: counts CUDA runtime and driver API calls per name
// and the kernels that actually ran (and, per CUDA graph, the kernels its
// launches ran), then writes one JSON object at exit.
//
// Load with CUDA_INJECTION64_PATH=/path/libcupti_count.so; the driver calls
// InitializeInjection() from inside the process's first cuInit().
// Output: file named by CUPTI_COUNT_OUT, or stderr. CUPTI_COUNT_CALLBACKS_ONLY=1
// leaves out the kernel activity records (scripts/bench-torch.py's reference).

#include <cupti.h>
#include <cxxabi.h>
#include <time.h>
#include <fcntl.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unistd.h>

namespace {

// Larger than any CBID in CUPTI 13 (runtime 523, driver 807) with headroom
// for a newer libcupti at run time.
constexpr uint32_t kMaxCbid = 2048;
constexpr int kRuntime = 0;
constexpr int kDriver = 1;
constexpr int kDomains = 2;
const char *const kDomainKey[kDomains] = {"runtime", "driver"};

// Everything here is trivially destructible on purpose: CUDA keeps making
// API calls (and so callbacks) during its own teardown, after static C++
// objects registered by this library would already have been destroyed.
std::atomic<uint64_t> g_calls[kDomains][kMaxCbid];
std::atomic<uint64_t> g_nested[kDomains][kMaxCbid];
std::atomic<uint64_t> g_cbid_overflow{0};
std::atomic<uint64_t> g_dropped_records{0};
const char *g_names[kDomains][kMaxCbid];  // resolved once at init

std::mutex g_kernel_mutex;
std::map<std::string, uint64_t> *g_kernels = new std::map<std::string, uint64_t>;

// Kernels run by graph launches, per CUPTI graph id: how many of each ran and
// the launch calls (correlation ids) that ran them, so that one replay's
// contents can be compared with what cudatrace says a graph launch runs.
struct GraphKernels {
  std::map<std::string, uint64_t> kernels;
  std::set<uint32_t> launches;
  std::map<uint64_t, uint64_t> runs_per_node;  // replays, should correlation ids not tell them
};
std::map<uint32_t, GraphKernels> *g_graphs = new std::map<uint32_t, GraphKernels>;

// API callbacks of this thread currently between ENTER and EXIT (both domains).
thread_local int t_depth = 0;

// CLOCK_MONOTONIC (cudatrace's clock) when CUPTI's callbacks began (the end
// of InitializeInjection) and when the counts were first written (at exit,
// where CUDA's teardown begins): calls outside cannot be in CUPTI's counts.
uint64_t g_visible_from_ns = 0;
uint64_t g_exit_ns = 0;

uint64_t monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}

char g_error[512];
uint32_t g_cupti_version = 0;

void set_error(const char *what, CUptiResult r) {
  const char *s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "?";
  if (!g_error[0]) snprintf(g_error, sizeof g_error, "%s: %s (%d)", what, s, (int)r);
}

void CUPTIAPI on_api(void *, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                     const void *cbdata) {
  int d;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) d = kRuntime;
  else if (domain == CUPTI_CB_DOMAIN_DRIVER_API) d = kDriver;
  else return;
  bool enter = static_cast<const CUpti_CallbackData *>(cbdata)->callbackSite == CUPTI_API_ENTER;
  if (cbid >= kMaxCbid) {
    if (enter) g_cbid_overflow.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (enter) {
    g_calls[d][cbid].fetch_add(1, std::memory_order_relaxed);
    if (t_depth > 0) g_nested[d][cbid].fetch_add(1, std::memory_order_relaxed);
    ++t_depth;
  } else if (t_depth > 0) {  // no ENTER was seen for calls in flight at subscription
    --t_depth;
  }
}

// As cudatrace names kernels (the C++ ABI's demangler), for the graph check.
std::string demangled(const char *mangled) {
  int status = 0;
  char *out = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && out ? out : mangled;
  free(out);
  return name;
}

constexpr size_t kActivityBufSize = 4 << 20;

void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = static_cast<uint8_t *>(aligned_alloc(8, kActivityBufSize));
  *size = *buffer ? kActivityBufSize : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t,
                               size_t valid) {
  CUpti_Activity *rec = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_kernel_mutex);
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
          rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
        continue;
      const auto *kernel = reinterpret_cast<CUpti_ActivityKernel10 *>(rec);
      const char *name = kernel->name ? kernel->name : "?";
      ++(*g_kernels)[name];
      if (kernel->graphId) {
        GraphKernels &g = (*g_graphs)[kernel->graphId];
        ++g.kernels[demangled(name)];
        g.launches.insert(kernel->correlationId);
        ++g.runs_per_node[kernel->graphNodeId];
      }
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
    g_dropped_records.fetch_add(dropped, std::memory_order_relaxed);
  free(buffer);
}

// "cudaLaunchKernel_ptsz_v7000" -> "cudaLaunchKernel_ptsz". Only CUPTI's
// 4+ digit version tags go; driver ABI suffixes such as "_v2" stay.
std::string normalize(const char *raw) {
  std::string s(raw);
  size_t p = s.rfind("_v");
  if (p == std::string::npos || s.size() - (p + 2) < 4) return s;
  for (size_t i = p + 2; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return s;
  return s.substr(0, p);
}

void put_string(FILE *f, const std::string &s) {
  fputc('"', f);
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

void put_object(FILE *f, const char *key, const std::map<std::string, uint64_t> &m) {
  fprintf(f, ",\"%s\":{", key);
  bool first = true;
  for (const auto &kv : m) {
    if (!first) fputc(',', f);
    first = false;
    put_string(f, kv.first);
    fprintf(f, ":%" PRIu64, kv.second);
  }
  fputc('}', f);
}

std::string cbid_name(int d, uint32_t cbid) {
  if (g_names[d][cbid]) return g_names[d][cbid];
  return std::string(kDomainKey[d]) + "_cbid_" + std::to_string(cbid);
}

// The first process of a run to initialise CUPTI owns CUPTI_COUNT_OUT; any
// other (a child that also uses CUDA) writes CUPTI_COUNT_OUT.PID, so counts
// of different processes never overwrite each other.
std::string g_out_path;

void claim_output_path() {
  const char *path = getenv("CUPTI_COUNT_OUT");
  if (!path || !*path) return;
  const std::string claim = std::string(path) + ".claim";
  const int fd = open(claim.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  g_out_path = fd >= 0 ? std::string(path) : std::string(path) + "." + std::to_string(getpid());
  if (fd >= 0) close(fd);
}

void write_json() {
  FILE *f = stderr;
  if (!g_out_path.empty()) {
    const char *path = g_out_path.c_str();
    f = fopen(path, "w");
    if (!f) {
      fprintf(stderr, "cupti_count: cannot open %s, writing to stderr\n", path);
      f = stderr;
    }
  }
  fprintf(f, "{\"pid\":%d,\"cupti_version\":%u,\"visible_from_ns\":%" PRIu64 ",\"exit_ns\":%" PRIu64,
          (int)getpid(), g_cupti_version, g_visible_from_ns, g_exit_ns);
  for (int d = 0; d < kDomains; ++d) {
    std::map<std::string, uint64_t> norm, raw, nested;
    for (uint32_t id = 0; id < kMaxCbid; ++id) {
      uint64_t n = g_calls[d][id].load(std::memory_order_relaxed);
      if (!n) continue;
      std::string name = cbid_name(d, id);
      std::string base = normalize(name.c_str());
      norm[base] += n;
      raw[name] += n;
      if (uint64_t nn = g_nested[d][id].load(std::memory_order_relaxed)) nested[base] += nn;
    }
    std::string k = kDomainKey[d];
    put_object(f, k.c_str(), norm);
    put_object(f, (k + "_raw").c_str(), raw);
    put_object(f, (k + "_nested").c_str(), nested);
  }
  // The driver runs InitializeInjection inside the process's first cuInit,
  // whose callbacks CUPTI never delivers (seen on CUDA 13.0 / driver 580).
  fputs(",\"driver_at_attach\":{\"cuInit\":1}", f);
  {
    std::lock_guard<std::mutex> lock(g_kernel_mutex);
    put_object(f, "kernels", *g_kernels);
    fputs(",\"graphs\":{", f);
    const char *sep = "";
    for (const auto &[id, g] : *g_graphs) {
      uint64_t fewest = UINT64_MAX, most = 0;
      for (const auto &node : g.runs_per_node) {
        fewest = node.second < fewest ? node.second : fewest;
        most = node.second > most ? node.second : most;
      }
      fprintf(f, "%s\"%u\":{\"launches\":%zu,\"node_runs_min\":%" PRIu64 ",\"node_runs_max\":%" PRIu64, sep, id,
              g.launches.size(), fewest, most);
      put_object(f, "kernels", g.kernels);
      fputc('}', f);
      sep = ",";
    }
    fputc('}', f);
  }
  fprintf(f, ",\"activity_dropped\":%" PRIu64 ",\"cbid_overflow\":%" PRIu64,
          g_dropped_records.load(), g_cbid_overflow.load());
  if (g_error[0]) {
    fputs(",\"error\":", f);
    put_string(f, g_error);
  }
  fputs("}\n", f);
  if (f != stderr) fclose(f);
  else fflush(f);
}

bool g_at_exit_done = false;

bool g_activity = true;  // kernel activity records enabled

void at_exit() {
  g_exit_ns = monotonic_ns();
  CUptiResult r = g_activity ? cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) : CUPTI_SUCCESS;
  if (r != CUPTI_SUCCESS) set_error("cuptiActivityFlushAll", r);
  write_json();
  g_at_exit_done = true;
}

// CUDA's own exit handlers (module unregistration, context teardown) were
// registered before ours and so run after at_exit(); rewrite the file once
// more so API calls made there are counted too. CUPTI is not called here.
__attribute__((destructor)) void rewrite_at_unload() {
  if (g_at_exit_done) write_json();
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return 1;
  claim_output_path();
  atexit(at_exit);

  cuptiGetVersion(&g_cupti_version);
  for (uint32_t id = 0; id < kMaxCbid; ++id) {
    const char *n = nullptr;
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, id, &n) == CUPTI_SUCCESS && n)
      g_names[kRuntime][id] = strdup(n);
    n = nullptr;
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, id, &n) == CUPTI_SUCCESS && n)
      g_names[kDriver][id] = strdup(n);
  }

  CUpti_SubscriberHandle sub;
  CUptiResult r = cuptiSubscribe(&sub, on_api, nullptr);
  if (r != CUPTI_SUCCESS) {
    set_error("cuptiSubscribe", r);
    return 0;
  }
  if ((r = cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API)) != CUPTI_SUCCESS)
    set_error("cuptiEnableDomain(runtime)", r);
  if ((r = cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API)) != CUPTI_SUCCESS)
    set_error("cuptiEnableDomain(driver)", r);
  // CUPTI_COUNT_CALLBACKS_ONLY=1: API callbacks alone (an overhead reference), no kernel records.
  const char *callbacks_only = getenv("CUPTI_COUNT_CALLBACKS_ONLY");
  g_visible_from_ns = monotonic_ns();
  if (callbacks_only && strcmp(callbacks_only, "1") == 0) {
    g_activity = false;
    return g_error[0] ? 0 : 1;
  }
  if ((r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS)
    set_error("cuptiActivityRegisterCallbacks", r);
  else if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS &&
           (r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_KERNEL)) != CUPTI_SUCCESS)
    set_error("cuptiActivityEnable(CONCURRENT_KERNEL and KERNEL)", r);
  return g_error[0] ? 0 : 1;
}
