#include "cudatrace/target/prologue.h"

#include <fmt/format.h>

namespace cudatrace {
namespace {

// The registers the BPF programs read at entry (the six argument registers)
// and %rsp; ModRM/REX register numbers.
bool read_at_entry(unsigned reg) {
  switch (reg) {
    case 7: case 6: case 2: case 1: case 8: case 9:  // rdi rsi rdx rcx r8 r9
    case 4:                                          // rsp
      return true;
    default:
      return false;
  }
}

const char* const kRegNames[16] = {"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
                                   "r8",  "r9",  "r10", "r11", "r12", "r13", "r14", "r15"};

// Bytes of a ModRM operand (ModRM, SIB, displacement) at p; 0 if cut short.
std::size_t modrm_length(const std::uint8_t* p, std::size_t n) {
  if (n < 1) return 0;
  const unsigned mod = p[0] >> 6, rm = p[0] & 7;
  std::size_t len = 1;
  if (mod != 3 && rm == 4) {
    if (n < 2) return 0;
    if (mod == 0 && (p[1] & 7) == 5) len += 4;  // SIB with no base: disp32
    ++len;
  }
  if (mod == 1) len += 1;
  else if (mod == 2 || (mod == 0 && rm == 5)) len += 4;  // disp32, or %rip-relative
  return len <= n ? len : 0;
}

// One decoded instruction of the few kinds that matter here.
struct Insn {
  std::size_t length = 0;  // 0: not one the decoder knows
  enum Kind { Unknown, Emulated, Skippable, Blocking } kind = Unknown;
  std::string text;
};

Insn decode(const std::uint8_t* p, std::size_t n) {
  Insn in;
  std::size_t i = 0;
  bool opsize = false;  // 0x66
  while (i < n && p[i] == 0x66) {
    opsize = true;
    ++i;
  }
  if (i + 4 <= n && p[i] == 0xf3 && p[i + 1] == 0x0f && p[i + 2] == 0x1e && p[i + 3] == 0xfa && !opsize)
    return {i + 4, Insn::Skippable, "endbr64"};
  unsigned rex = 0;
  if (i < n && (p[i] & 0xf0) == 0x40) rex = p[i++];
  if (i >= n) return in;
  const std::uint8_t op = p[i];
  if (op == 0x90 && !rex)
    // The kernel refuses to probe a nop with a 0x66 prefix (-ENOTSUPP).
    return opsize ? Insn{i + 1, Insn::Skippable, "nop"} : Insn{i + 1, Insn::Emulated, "nop"};
  if (op >= 0x50 && op <= 0x57 && !opsize) {
    // push: emulated with no REX prefix or with exactly 0x41 (r8-r15).
    const unsigned reg = (op - 0x50) + (rex & 1 ? 8 : 0);
    const std::string text = std::string("push %") + kRegNames[reg];
    if (rex == 0 || rex == 0x41) return {i + 1, Insn::Emulated, text};
    return {i + 1, Insn::Blocking, text};
  }
  // Relative branches; a 0x66 prefix makes the kernel refuse them.
  if (!opsize && !rex) {
    if ((op == 0xe8 || op == 0xe9) && i + 5 <= n) return {i + 5, Insn::Emulated, op == 0xe8 ? "call" : "jmp"};
    if (op == 0xeb && i + 2 <= n) return {i + 2, Insn::Emulated, "jmp"};
    if (op >= 0x70 && op <= 0x7f && i + 2 <= n) return {i + 2, Insn::Emulated, "jcc"};
    if (op == 0x0f && i + 6 <= n && p[i + 1] >= 0x80 && p[i + 1] <= 0x8f) return {i + 6, Insn::Emulated, "jcc"};
  }
  // Multi-byte nop: 0f 1f /0.
  if (op == 0x0f && i + 3 <= n && p[i + 1] == 0x1f && ((p[i + 2] >> 3) & 7) == 0) {
    const std::size_t m = modrm_length(p + i + 2, n - i - 2);
    return m ? Insn{i + 2 + m, Insn::Skippable, "nop"} : in;
  }
  // Compares and tests write the flags alone: a lazy-binding stub's
  // "cmpq $0,ptr(%rip); je ...; jmp *ptr(%rip)" is probed on its je.
  const bool cmp_imm8 = op == 0x83 && i + 2 <= n && ((p[i + 1] >> 3) & 7) == 7;
  const bool cmp_imm32 = op == 0x81 && i + 2 <= n && ((p[i + 1] >> 3) & 7) == 7;
  const bool test_imm = (op == 0xf6 || op == 0xf7) && i + 2 <= n && ((p[i + 1] >> 3) & 7) == 0;
  const bool cmp_test_reg = (op == 0x38 || op == 0x39 || op == 0x3a || op == 0x3b || op == 0x84 || op == 0x85) &&
                            i + 2 <= n;
  if (!opsize && (cmp_imm8 || cmp_imm32 || test_imm || cmp_test_reg)) {
    const std::size_t m = modrm_length(p + i + 1, n - i - 1);
    const std::size_t imm = cmp_imm8 ? 1 : cmp_imm32 ? 4 : test_imm ? (op == 0xf6 ? 1 : 4) : 0;
    if (m && i + 1 + m + imm <= n) return {i + 1 + m + imm, Insn::Skippable, test_imm || op == 0x84 || op == 0x85 ? "test" : "cmp"};
    return in;
  }
  // Register-to-register mov and xor (ModRM mod 11).
  if ((op == 0x89 || op == 0x8b || op == 0x31 || op == 0x33) && i + 2 <= n && (p[i + 1] >> 6) == 3) {
    const std::uint8_t modrm = p[i + 1];
    const unsigned reg = ((modrm >> 3) & 7) + (rex & 4 ? 8 : 0);
    const unsigned rm = (modrm & 7) + (rex & 1 ? 8 : 0);
    const unsigned dst = (op == 0x89 || op == 0x31) ? rm : reg;
    const std::string text = fmt::format("{} %{},%{}", op == 0x89 || op == 0x8b ? "mov" : "xor",
                                         kRegNames[op == 0x89 || op == 0x31 ? reg : rm], kRegNames[dst]);
    return {i + 2, read_at_entry(dst) ? Insn::Blocking : Insn::Skippable, text};
  }
  // mov $imm,%reg (b8+r: imm32, or imm64 with REX.W).
  if (op >= 0xb8 && op <= 0xbf && !opsize) {
    const unsigned dst = (op - 0xb8) + (rex & 1 ? 8 : 0);
    const std::size_t len = i + 1 + (rex & 8 ? 8 : 4);
    if (len > n) return in;
    return {len, read_at_entry(dst) ? Insn::Blocking : Insn::Skippable, std::string("mov $imm,%") + kRegNames[dst]};
  }
  // The common prologue instructions the search must stop at, named.
  if (rex & 8) {
    if (op == 0x83 && i + 3 <= n && p[i + 1] == 0xec) return {i + 3, Insn::Blocking, "sub $imm,%rsp"};
    if (op == 0x81 && i + 6 <= n && p[i + 1] == 0xec) return {i + 6, Insn::Blocking, "sub $imm,%rsp"};
  }
  in.text = fmt::format("{:02x}{}", op, rex ? fmt::format(" (rex {:02x})", rex) : "");
  return in;
}

}  // namespace

ProbePlace place_probe(const std::uint8_t* code, std::size_t size) {
  constexpr int kMaxInstructions = 8;
  ProbePlace entry;
  std::size_t at = 0;
  std::string skipped;
  for (int k = 0; k < kMaxInstructions && at < size; ++k) {
    const Insn in = decode(code + at, size - at);
    if (in.kind == Insn::Emulated) {
      ProbePlace p;
      p.offset = static_cast<std::uint32_t>(at);
      p.emulated = true;
      p.instruction = in.text;
      p.skipped = skipped;
      return p;
    }
    if (k == 0) entry.instruction = in.text.empty() ? "an unknown instruction" : in.text;
    if (in.kind != Insn::Skippable) break;
    skipped += (skipped.empty() ? "" : ", ") + in.text;
    at += in.length;
  }
  // Nothing emulated within reach: the entry, single-stepped.
  if (entry.instruction.empty()) entry.instruction = "nothing (end of the function)";
  return entry;
}

std::string describe(const ProbePlace& p) {
  if (p.emulated)
    return fmt::format("+{} {}{}", p.offset, p.instruction, p.skipped.empty() ? "" : " (after " + p.skipped + ")");
  return fmt::format("+{} {}: single-stepped", p.offset, p.instruction);
}

}  // namespace cudatrace
