// How many records per second the reader thread formats, on one core: the
// JSON and text writers fed typical records (issue 11: the JSON writer must
// sustain 2 M records/s). No BPF, no root. Results in docs/benchmarks.md.
//   output_bench [--records N] [--reps R]
// "format": Writer::call on decoded calls, as the driver calls it, cutting
// chunks as the session does (what the writer thread then writes is not
// counted: it runs on another core). "decode+format": from the raw ring
// record, decode_call included.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/render/writer.h"
#include "cudatrace/render/output_writer.h"

namespace {

using namespace cudatrace;

// A PyTorch kernel, as long names go.
constexpr const char* kKernel =
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13BUnaryFunctorIfffNS0_15binary_internal10MulFunctorIf"
    "EEEESt5arrayIPcLm3EEEEviT0_T1_";

ct_call base(const char* symbol, std::uint64_t ts) {
  ct_call r{};
  const Api* api = api_by_symbol(symbol);
  if (!api) {
    std::fprintf(stderr, "output_bench: no API %s\n", symbol);
    std::exit(1);
  }
  r.type = CT_REC_CALL;
  r.api = api->id;
  r.parent_api = kNoApi;
  r.pid = 81234;
  r.tid = 81240;
  r.ts_ns = ts;
  r.dur_ns = 1234;
  r.caller = 0x7f3a12345678;
  std::strncpy(r.comm, "python3", CT_COMM_LEN);
  return r;
}

// The records: one kind each, as a PyTorch step makes them.
std::vector<std::pair<const char*, ct_call>> sample_records() {
  std::vector<std::pair<const char*, ct_call>> out;
  ct_call get = base("cudaGetDevice", 5'123'456'789'012);
  get.args[0] = 0x7ffd5e3c1a2c;
  get.outs[0] = 0;
  out.emplace_back("cudaGetDevice", get);

  ct_call launch = base("cudaLaunchKernel", 5'123'456'791'345);
  launch.args[0] = 0x7f3a0c2d4e60;
  launch.args[1] = 1024 | (std::uint64_t(1) << 32);
  launch.args[2] = 1;
  launch.args[3] = 128 | (std::uint64_t(1) << 32);
  launch.args[4] = 1;
  launch.args[5] = 0x7ffd5e3c1b00;
  launch.args[6] = 0;
  launch.args[7] = 0x55d1c3a0b2f0;
  out.emplace_back("cudaLaunchKernel", launch);

  ct_call driver = base("cuLaunchKernel", 5'123'456'791'512);
  driver.parent_api = api_by_symbol("cudaLaunchKernel")->id;
  driver.depth = 1;
  driver.args[0] = 0x7f3a0c2d4e60;
  driver.args[1] = 1024;
  driver.args[2] = 1;
  driver.args[3] = 1;
  driver.args[4] = 128;
  driver.args[5] = 1;
  driver.args[6] = 1;
  driver.args[7] = 0;
  driver.args[8] = 0x55d1c3a0b2f0;
  driver.args[9] = 0x7ffd5e3c1b00;
  driver.args[10] = 0;
  out.emplace_back("cuLaunchKernel", driver);

  ct_call copy = base("cudaMemcpyAsync", 5'123'456'795'001);
  copy.args[0] = 0x7f39e0000000;
  copy.args[1] = 0x7f3a20001000;
  copy.args[2] = 4194304;
  copy.args[3] = 1;
  copy.args[4] = 0x55d1c3a0b2f0;
  out.emplace_back("cudaMemcpyAsync", copy);
  return out;
}

struct Timing {
  double records_per_s;
  double bytes_per_record;
};

// CPU time of this thread: on a shared machine, wall time would count the
// other processes' turns too.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

// Runs `records` records through `out`, `reps` times; the best repetition.
// The writers read nothing of it for a call without annotations.
const CallAnalysis kNoAnalysis;

Timing measure(Writer& out, std::size_t records, int reps, const std::function<void(std::size_t)>& one) {
  double best = 0, bytes_per_record = 0;
  std::vector<std::uint32_t> record_ends;
  record_ends.reserve(OutputWriter::kChunkBytes / 64);
  out.buffer()->reserve(OutputWriter::kChunkCapacity);
  for (int rep = 0; rep < reps; ++rep) {
    std::uint64_t bytes = 0;
    out.buffer()->clear();
    const double start = thread_cpu_s();
    for (std::size_t i = 0; i < records; ++i) {
      one(i);
      const std::size_t size = out.buffer()->size();
      record_ends.push_back(Chunk::record_end(size, false));
      if (size >= OutputWriter::kChunkBytes) {  // handed to the writer thread
        bytes += size;
        out.buffer()->clear();
        record_ends.clear();
      }
    }
    const double s = thread_cpu_s() - start;
    bytes += out.buffer()->size();
    best = std::max(best, records / s);
    bytes_per_record = double(bytes) / records;
  }
  return {best, bytes_per_record};
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t records = 2'000'000;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--records") == 0) records = std::strtoull(argv[i + 1], nullptr, 10);
    else if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  if (records == 0 || reps <= 0) {
    std::fprintf(stderr, "usage: output_bench [--records N] [--reps R]\n");
    return 2;
  }
  KernelNames names;
  names.set_symbolizer([](std::uint32_t, std::uint64_t) { return std::string(kKernel); });
  const auto samples = sample_records();

  std::printf("%zu records per run, best of %d runs, one thread, its CPU time\n\n", records, reps);
  std::printf("| format | record | format only (records/s) | decode+format (records/s) | bytes/record |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  for (const bool json : {true, false}) {
    auto out = json ? make_json_writer() : make_text_writer(5'000'000'000'000, false);
    // Each kind alone, then the four in turn.
    for (std::size_t kind = 0; kind <= samples.size(); ++kind) {
      std::vector<const ct_call*> recs;
      if (kind < samples.size())
        recs.push_back(&samples[kind].second);
      else
        for (const auto& s : samples) recs.push_back(&s.second);
      std::vector<Call> decoded(recs.size());
      for (std::size_t i = 0; i < recs.size(); ++i) decode_call(*recs[i], &names, decoded[i]);
      Call scratch;
      const Timing fmt_only = measure(*out, records, reps, [&](std::size_t i) { out->call(decoded[i % recs.size()], kNoAnalysis); });
      const Timing full = measure(*out, records, reps, [&](std::size_t i) {
        decode_call(*recs[i % recs.size()], &names, scratch);
        out->call(scratch, kNoAnalysis);
      });
      std::printf("| %s | %s | %.2f M | %.2f M | %.0f |\n", json ? "JSON" : "text",
                  kind < samples.size() ? samples[kind].first : "mix of the four", fmt_only.records_per_s / 1e6,
                  full.records_per_s / 1e6, fmt_only.bytes_per_record);
    }
  }
  return 0;
}
