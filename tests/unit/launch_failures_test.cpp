// A failed launch's warning (issue 35): once per cause and process, naming
// the kernel and saying what the status means; the GPU code a file holds,
// read from its fat binaries.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cudatrace/analysis/launch_failures.h"
#include "cudatrace/target/elf_file.h"
#include "cudatrace/target/gpu_code.h"
#include "stream_feed.h"

namespace {

using namespace cudatrace;
using cudatrace_test::CallSpec;
using cudatrace_test::StreamFeed;

CallSpec launch(std::int64_t ret, std::uint32_t pid = 100) {
  CallSpec s;
  s.symbol = "cudaLaunchKernel";
  s.args = {{"func", 0xa1}, {"grid", 4 | std::uint64_t(2) << 32}, {"block", 128 | std::uint64_t(1) << 32}};
  s.ret = ret;
  s.pid = s.tid = pid;
  return s;
}

TEST(LaunchFailures, OnceForEachCauseInAProcess) {
  StreamFeed feed;
  LaunchFailures failures;
  EXPECT_FALSE(failures.first_of_its_cause(feed.decode(launch(0))));
  EXPECT_TRUE(failures.first_of_its_cause(feed.decode(launch(209))));
  EXPECT_FALSE(failures.first_of_its_cause(feed.decode(launch(209))));
  EXPECT_TRUE(failures.first_of_its_cause(feed.decode(launch(98))));
  EXPECT_TRUE(failures.first_of_its_cause(feed.decode(launch(209, 200)))) << "another process";
  failures.forget_process(100);
  EXPECT_TRUE(failures.first_of_its_cause(feed.decode(launch(209)))) << "a new process of that id";
  CallSpec nested = launch(209);
  nested.parent = "cudaLaunchKernel";
  EXPECT_FALSE(failures.first_of_its_cause(feed.decode(nested))) << "part of its parent's failure";
  CallSpec copy;
  copy.symbol = "cudaMemcpyAsync";
  copy.ret = 1;
  EXPECT_FALSE(failures.first_of_its_cause(feed.decode(copy))) << "not a launch";
  // Graph launches are launches too.
  CallSpec graph;
  graph.symbol = "cudaGraphLaunch";
  graph.ret = 400;
  EXPECT_TRUE(failures.first_of_its_cause(feed.decode(graph)));
}

// A runtime launch of `s` whose grid and block have z = 1 (a dim3's z is
// the register after its x and y).
const Call& with_z_of_one(StreamFeed& feed, const CallSpec& s) {
  feed.decode(s);
  ct_call& rec = feed.record().rec;
  const Api& api = *api_by_symbol(s.symbol);
  for (std::size_t i = 0; i < api.spec->args.size(); ++i)
    if (api.spec->args[i].type == ArgType::Dim3) rec.args[api.slots[i] + 1] = 1;
  EXPECT_TRUE(decode_call(rec, nullptr, feed.call()));
  return feed.call();
}

TEST(LaunchFailures, MessagesSayWhatEachStatusMeans) {
  StreamFeed feed;
  LaunchFacts facts;
  facts.site = "app+0x1234 (main+0x2a)";
  facts.code = "app holds sm_80 only, no PTX";
  EXPECT_EQ(launch_failure_message(feed.decode(launch(209)), facts),
            "cudaLaunchKernel of k1 failed with cudaErrorNoKernelImageForDevice at app+0x1234 (main+0x2a): no code "
            "for this GPU: app holds sm_80 only, no PTX; build with code for its compute capability (nvidia-smi "
            "--query-gpu=compute_cap gives it: 9.0 is -gencode arch=compute_90,code=sm_90) or with PTX a newer "
            "GPU can compile");
  facts.func_site = "app+0x2000 (helper(float*))";
  EXPECT_NE(launch_failure_message(feed.decode(launch(98)), facts)
                .find("cudaErrorInvalidDeviceFunction at app+0x1234 (main+0x2a): its function (app+0x2000 "
                      "(helper(float*))) is not a kernel this runtime registered: a host function passed as a kernel"),
            std::string::npos);
  CallSpec big_block = launch(9);
  big_block.args = {{"func", 0xa1}, {"grid", 1 | std::uint64_t(1) << 32}, {"block", 2048 | std::uint64_t(1) << 32}};
  EXPECT_NE(launch_failure_message(with_z_of_one(feed, big_block), facts).find(": a block of 2048 threads: at most 1024"),
            std::string::npos);
  CallSpec zero = launch(9);
  zero.args = {{"func", 0xa1}, {"grid", 0 | std::uint64_t(1) << 32}, {"block", 32 | std::uint64_t(1) << 32}};
  EXPECT_NE(launch_failure_message(with_z_of_one(feed, zero), facts).find(": a grid or block dimension is 0"),
            std::string::npos);
  CallSpec smem = launch(1);
  smem.args.push_back({"sharedMem", 4 << 20});
  EXPECT_NE(launch_failure_message(with_z_of_one(feed, smem), facts)
                .find(": 4096 KiB of dynamic shared memory: above 48 KiB"),
            std::string::npos);
  EXPECT_NE(launch_failure_message(feed.decode(launch(701)), facts).find("more registers or shared memory"),
            std::string::npos);
  // A status with nothing more to say: the line names it and stops.
  EXPECT_EQ(launch_failure_message(feed.decode(launch(999)), facts),
            "cudaLaunchKernel of k1 failed with cudaErrorUnknown at app+0x1234 (main+0x2a)");
}

// A fat binary's bytes as nvcc lays them out: a 16-byte header, then
// entries of a 64-byte (ELF) or 80-byte (PTX) header and their payload.
std::string fatbin(const std::vector<std::pair<std::uint16_t, std::uint32_t>>& entries) {
  std::string body;
  for (const auto& [kind, arch] : entries) {
    std::string e(kind == 1 ? 80 : 64, '\0');
    const std::uint32_t header = static_cast<std::uint32_t>(e.size());
    const std::uint64_t payload = 24;
    std::memcpy(&e[0], &kind, 2);
    std::memcpy(&e[4], &header, 4);
    std::memcpy(&e[8], &payload, 8);
    std::memcpy(&e[28], &arch, 4);
    body += e + std::string(payload, 'x');
  }
  std::string out(16, '\0');
  const std::uint32_t magic = 0xBA55ED50;
  const std::uint16_t version = 1, header = 16;
  const std::uint64_t size = body.size();
  std::memcpy(&out[0], &magic, 4);
  std::memcpy(&out[4], &version, 2);
  std::memcpy(&out[6], &header, 2);
  std::memcpy(&out[8], &size, 8);
  return out + body;
}

TEST(GpuCode, ArchitecturesOfEveryFatBinaryInTheSection) {
  std::string section = fatbin({{2, 90}, {2, 75}}) + fatbin({{2, 90}, {1, 90}});
  section += std::string(8 - section.size() % 8, '\0') + fatbin({{2, 80}});
  const GpuCode code = gpu_code_of_fatbins(section);
  EXPECT_EQ(code.cubins, (std::vector<unsigned>{75, 80, 90}));
  EXPECT_EQ(code.ptx, (std::vector<unsigned>{90}));
  EXPECT_EQ(describe(code), "sm_75, sm_80 and sm_90 and PTX for compute_90");
  EXPECT_EQ(describe(gpu_code_of_fatbins(fatbin({{2, 80}}))), "sm_80 only, no PTX");
  EXPECT_EQ(describe(gpu_code_of_fatbins(fatbin({{1, 70}}))), "PTX for compute_70");
  EXPECT_EQ(describe(GpuCode{}), "no GPU code");
}

TEST(GpuCode, TruncatedOrHostileBytesEndTheWalk) {
  const std::string whole = fatbin({{2, 80}, {2, 90}});
  for (std::size_t n = 0; n < whole.size(); ++n) {
    const GpuCode code = gpu_code_of_fatbins(whole.substr(0, n));
    EXPECT_LE(code.cubins.size(), 2u) << n;
  }
  std::string huge = fatbin({{2, 80}});
  const std::uint64_t lie = ~0ull;
  std::memcpy(&huge[8], &lie, 8);  // the fat binary claims more than there is
  EXPECT_TRUE(gpu_code_of_fatbins(huge).empty());
  std::string zero_header = fatbin({{2, 80}, {2, 90}});
  std::memset(&zero_header[16 + 4], 0, 4);  // an entry whose header has no size
  EXPECT_LE(gpu_code_of_fatbins(zero_header).cubins.size(), 1u);
}

#ifdef REAL_APP_SHARED
// nvcc's own layout: the demo program holds machine code for its build's architectures.
TEST(GpuCode, TheDemoProgramHoldsMachineCode) {
  std::string error;
  const auto elf = ElfFile::open(REAL_APP_SHARED, error);
  ASSERT_NE(elf, nullptr) << error;
  const auto section = elf->section(".nv_fatbin");
  ASSERT_TRUE(section.has_value());
  const GpuCode code = gpu_code_of_fatbins(elf->contents().substr(section->offset, section->size));
  EXPECT_FALSE(code.cubins.empty());
  for (unsigned arch : code.cubins) EXPECT_GE(arch, 50u) << arch;
}
#endif

}  // namespace
