// What cudatrace says when the kernel refuses its BPF programs
// (src/record/bpf_load.cpp): libbpf's messages read back, the verifier's
// rejection told apart from a permission problem, and one real rejection
// (tests/fixtures/verifier_rejects.bpf.c, as root).
#include "cudatrace/record/bpf_load.h"

#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "cudatrace/options.h"
#include "verifier_rejects.skel.h"

namespace cudatrace {
namespace {

// What libbpf 1.1 (Debian 12) prints when the verifier rejects a program;
// the log is the end of Linux 6.1's for the bug of issue 26.
const std::string kVerifierRejection =
    "libbpf: prog 'ct_enter': BPF program load failed: Permission denied\n"
    "libbpf: prog 'ct_enter': -- BEGIN PROG LOAD LOG --\n"
    "0: R1=ctx(off=0,imm=0) R10=fp0\n"
    "; int ct_enter(struct pt_regs *ctx)\n"
    "0: (bf) r6 = r1                       ; R1=ctx(off=0,imm=0) R6_w=ctx(off=0,imm=0)\n"
    "; struct ct_frame *top = &st->frames[(depth - 1) & (CT_MAX_DEPTH - 1)];\n"
    "62: (bc) w2 = w1                      ; R1_w=scalar(umax=7) R2_w=scalar(umax=7)\n"
    "63: (04) w2 += -1                     ; R2_w=scalar(umax=4294967295,var_off=(0x0; 0xffffffff))\n"
    "64: (27) r2 *= 216                    ; R2_w=scalar(umax=927712935720)\n"
    "65: (0f) r6 += r2\n"
    "66: (71) r3 = *(u8 *)(r6 +48)\n"
    "R6 unbounded memory access, make sure to bounds check any such access\n"
    "processed 61 insns (limit 1000000) max_states_per_insn 0 total_states 4 peak_states 4 mark_read 2\n"
    "-- END PROG LOAD LOG --\n"
    "libbpf: prog 'ct_enter': failed to load: -13\n"
    "libbpf: failed to load object 'cudatrace_bpf'\n"
    "libbpf: failed to load BPF skeleton 'cudatrace_bpf': -13\n";

TEST(BpfLoad, LibbpfMessagesNameTheProgramAndKeepTheVerifiersLog) {
  const BpfLoadFailure f = parse_libbpf_messages(kVerifierRejection);
  EXPECT_EQ(f.program, "ct_enter");
  EXPECT_EQ(f.verifier_log.rfind("0: R1=ctx(off=0,imm=0) R10=fp0\n", 0), 0u) << f.verifier_log;
  EXPECT_EQ(f.verifier_log.substr(f.verifier_log.size() - 12), "mark_read 2\n");
}

TEST(BpfLoad, AVerifierRejectionIsTheKernelsWithTheEndOfItsLog) {
  const LoadErrorReport r = report_load_error(-EACCES, parse_libbpf_messages(kVerifierRejection), false);
  EXPECT_EQ(r.exit_status, kExitKernel);
  ASSERT_EQ(r.lines.size(), 10u);
  EXPECT_EQ(r.lines[0], "the kernel's BPF verifier rejected program ct_enter (Permission denied); the end of its log:");
  EXPECT_EQ(r.lines[1], "  ; struct ct_frame *top = &st->frames[(depth - 1) & (CT_MAX_DEPTH - 1)];");
  EXPECT_EQ(r.lines[7], "  R6 unbounded memory access, make sure to bounds check any such access");
  EXPECT_EQ(r.lines[8].rfind("  processed 61 insns", 0), 0u);
  EXPECT_EQ(r.lines[9], "-v prints the verifier's whole log");
  for (const std::string& line : r.lines) EXPECT_EQ(line.find("root"), std::string::npos) << line;

  // -v: libbpf has printed the whole log already.
  const LoadErrorReport verbose = report_load_error(-EACCES, parse_libbpf_messages(kVerifierRejection), true);
  EXPECT_EQ(verbose.exit_status, kExitKernel);
  ASSERT_EQ(verbose.lines.size(), 1u);
  EXPECT_EQ(verbose.lines[0], "the kernel's BPF verifier rejected program ct_enter (Permission denied); its log is above");
}

TEST(BpfLoad, ARefusalWithoutAVerifierLogIsAPermissionProblemOnlyForEpermAndEacces) {
  const BpfLoadFailure no_log =
      parse_libbpf_messages("libbpf: prog 'ct_exit': BPF program load failed: Operation not permitted\n"
                            "libbpf: prog 'ct_exit': failed to load: -1\n");
  EXPECT_EQ(no_log.program, "ct_exit");
  EXPECT_TRUE(no_log.verifier_log.empty());
  const LoadErrorReport denied = report_load_error(-EPERM, no_log, false);
  EXPECT_EQ(denied.exit_status, kExitPermission);
  ASSERT_EQ(denied.lines.size(), 1u);
  EXPECT_EQ(denied.lines[0].rfind("the kernel refused to load BPF program ct_exit: Operation not permitted, although "
                                  "cudatrace has CAP_BPF and CAP_PERFMON",
                                  0),
            0u)
      << denied.lines[0];

  // A map that cannot be created names no program.
  const BpfLoadFailure map = parse_libbpf_messages(
      "libbpf: Error in bpf_create_map_xattr(events):Invalid argument(-22). Retrying without BTF.\n"
      "libbpf: map 'events': failed to create: Invalid argument(-22)\n"
      "libbpf: failed to load object 'cudatrace_bpf'\n");
  EXPECT_TRUE(map.program.empty());
  const LoadErrorReport other = report_load_error(-EINVAL, map, false);
  EXPECT_EQ(other.exit_status, kExitKernel);
  ASSERT_EQ(other.lines.size(), 1u);
  EXPECT_EQ(other.lines[0], "cannot load the BPF programs: Invalid argument (run with -v for details)");
}

TEST(BpfLoad, CapabilitiesAreBpfAndPerfmonOrSysAdmin) {
  constexpr unsigned long long kSysAdmin = 1ull << 21, kPerfmon = 1ull << 38, kBpf = 1ull << 39;
  EXPECT_TRUE(has_bpf_capabilities(kBpf | kPerfmon));
  EXPECT_TRUE(has_bpf_capabilities(kSysAdmin));
  EXPECT_TRUE(has_bpf_capabilities(0x000001ffffffffffull));  // root's full set
  EXPECT_FALSE(has_bpf_capabilities(kBpf));
  EXPECT_FALSE(has_bpf_capabilities(kPerfmon));
  EXPECT_FALSE(has_bpf_capabilities(0));
}

// The real thing: this kernel's verifier on a program that uses a map value
// without checking it for NULL, loaded the way cudatrace loads its own.
TEST(BpfLoad, ARealVerifierRejectionNamesTheProgramAndItsVerdict) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load BPF programs";
  verifier_rejects_bpf* skel = verifier_rejects_bpf__open();
  ASSERT_NE(skel, nullptr);
  BpfLoadFailure failure;
  const libbpf_print_fn_t printer = libbpf_set_print(nullptr);  // kept, not printed
  const int err = load_keeping_messages([skel] { return verifier_rejects_bpf__load(skel); }, failure);
  libbpf_set_print(printer);
  verifier_rejects_bpf__destroy(skel);
  ASSERT_NE(err, 0);
  EXPECT_EQ(failure.program, "rejected");
  EXPECT_NE(failure.verifier_log.find("invalid mem access 'map_value_or_null'"), std::string::npos)
      << failure.verifier_log;
  const LoadErrorReport r = report_load_error(err, failure, false);
  EXPECT_EQ(r.exit_status, kExitKernel);
  ASSERT_GE(r.lines.size(), 3u);
  EXPECT_EQ(r.lines[0].rfind("the kernel's BPF verifier rejected program rejected (", 0), 0u) << r.lines[0];
  EXPECT_EQ(r.lines.back(), "-v prints the verifier's whole log");
}

}  // namespace
}  // namespace cudatrace
