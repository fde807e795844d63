// Where probes go in a function's prologue (target/prologue.h).
#include "cudatrace/target/prologue.h"

#include <gtest/gtest.h>

#include <vector>

namespace cudatrace {
namespace {

ProbePlace place(std::vector<std::uint8_t> code) {
  code.resize(code.size() + 8, 0xcc);  // what follows: int3 padding, never decoded as skippable
  return place_probe(code.data(), code.size());
}

TEST(Prologue, PushFirstIsProbedAtTheEntry) {
  const ProbePlace p = place({0x55, 0x48, 0x89, 0xe5});
  EXPECT_EQ(p.offset, 0u);
  EXPECT_TRUE(p.emulated);
  EXPECT_EQ(describe(p), "+0 push %rbp");
}

TEST(Prologue, Endbr64IsSkippedToThePush) {
  const ProbePlace p = place({0xf3, 0x0f, 0x1e, 0xfa, 0x41, 0x57, 0x41, 0x56});
  EXPECT_EQ(p.offset, 4u);
  EXPECT_TRUE(p.emulated);
  EXPECT_EQ(describe(p), "+4 push %r15 (after endbr64)");
}

TEST(Prologue, MovesIntoRegistersThatCarryNoArgumentAreSkipped) {
  // mov %rdi,%r10; xor %eax,%eax; push %rbx
  const ProbePlace p = place({0x49, 0x89, 0xfa, 0x31, 0xc0, 0x53});
  EXPECT_EQ(p.offset, 5u);
  EXPECT_TRUE(p.emulated);
  EXPECT_EQ(p.skipped, "mov %rdi,%r10, xor %rax,%rax");
}

TEST(Prologue, AWriteToAnArgumentRegisterOrTheStackPointerStopsTheSearch) {
  // mov %rax,%rdi; push %rbp: the push would see another %rdi.
  ProbePlace p = place({0x48, 0x89, 0xc7, 0x55});
  EXPECT_EQ(p.offset, 0u);
  EXPECT_FALSE(p.emulated);
  EXPECT_EQ(describe(p), "+0 mov %rax,%rdi: single-stepped");
  // endbr64; sub $0x18,%rsp; push %rbp: past the sub, (%rsp) is no longer the return address.
  p = place({0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x18, 0x55});
  EXPECT_EQ(p.offset, 0u);
  EXPECT_FALSE(p.emulated);
  EXPECT_EQ(p.instruction, "endbr64");
  // 32-bit moves into an argument register count too (they zero its top half).
  p = place({0x89, 0xc6, 0x55});  // mov %eax,%esi
  EXPECT_FALSE(p.emulated);
}

TEST(Prologue, ImmediateMovesIntoOtherRegistersAreSkipped) {
  // mov $0x0,%eax; push %rbp
  EXPECT_EQ(place({0xb8, 0x00, 0x00, 0x00, 0x00, 0x55}).offset, 5u);
  // movabs $imm64,%rax; push %rbp
  EXPECT_EQ(place({0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8, 0x55}).offset, 10u);
  // mov $0x1,%edi: an argument register
  EXPECT_FALSE(place({0xbf, 0x01, 0x00, 0x00, 0x00, 0x55}).emulated);
}

TEST(Prologue, SubFirstStaysAtTheEntry) {
  const ProbePlace p = place({0x48, 0x83, 0xec, 0x18, 0xc7, 0x07});
  EXPECT_EQ(p.offset, 0u);
  EXPECT_FALSE(p.emulated);
  EXPECT_EQ(describe(p), "+0 sub $imm,%rsp: single-stepped");
}

TEST(Prologue, ALazyBindingStubIsProbedOnItsBranch) {
  // XLA's plugin: cmpq $0x0,0x1234(%rip); je +6; jmp *0x1234(%rip)
  const ProbePlace p = place({0x48, 0x83, 0x3d, 0x34, 0x12, 0x00, 0x00, 0x00, 0x74, 0x06, 0xff, 0x25});
  EXPECT_EQ(p.offset, 8u);
  EXPECT_TRUE(p.emulated);
  EXPECT_EQ(describe(p), "+8 jcc (after cmp)");
  // test %edi,%edi; js: a test writes the flags alone too.
  EXPECT_EQ(place({0x85, 0xff, 0x78, 0x10}).offset, 2u);
}

TEST(Prologue, UnknownInstructionsAreNotGuessedAt) {
  // lea 0x10(%rip),%rax; push %rbp: lea is not decoded.
  const ProbePlace p = place({0x48, 0x8d, 0x05, 0x10, 0x00, 0x00, 0x00, 0x55});
  EXPECT_EQ(p.offset, 0u);
  EXPECT_FALSE(p.emulated);
}

TEST(Prologue, NopsAreSkippedButOnlyThePlainNopIsProbed) {
  // nopl 0x0(%rax,%rax,1); push %rbp: the 5-byte nop is skipped.
  ProbePlace p = place({0x0f, 0x1f, 0x44, 0x00, 0x00, 0x55});
  EXPECT_EQ(p.offset, 5u);
  EXPECT_EQ(p.instruction, "push %rbp");
  // xchg %ax,%ax (66 90): the kernel refuses a probe on it; skipped.
  p = place({0x66, 0x90, 0x55});
  EXPECT_EQ(p.offset, 2u);
  // A plain nop is emulated.
  p = place({0x90, 0x55});
  EXPECT_EQ(p.offset, 0u);
  EXPECT_TRUE(p.emulated);
}

TEST(Prologue, RelativeBranchesAreEmulated) {
  // endbr64; jmp rel32: a thunk.
  const ProbePlace p = place({0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 0x10, 0x20, 0x00, 0x00});
  EXPECT_EQ(p.offset, 4u);
  EXPECT_EQ(p.instruction, "jmp");
  EXPECT_TRUE(place({0x74, 0x05}).emulated);  // je rel8
}

TEST(Prologue, PushesWithOtherPrefixesAreSingleStepped) {
  EXPECT_FALSE(place({0x48, 0x55}).emulated);  // rex.w push %rbp
  EXPECT_FALSE(place({0x66, 0x55}).emulated);  // pushw
}

TEST(Prologue, TheSearchStaysInsideTheBytesGiven) {
  const std::uint8_t endbr_only[] = {0xf3, 0x0f, 0x1e, 0xfa};
  const ProbePlace p = place_probe(endbr_only, sizeof endbr_only);
  EXPECT_EQ(p.offset, 0u);
  EXPECT_FALSE(p.emulated);
  EXPECT_EQ(place_probe(endbr_only, 2).offset, 0u);
  EXPECT_EQ(place_probe(endbr_only, 0).offset, 0u);
}

}  // namespace
}  // namespace cudatrace
