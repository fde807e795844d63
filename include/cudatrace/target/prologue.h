// Where in a function's first instructions a uprobe costs least.
//
// On x86-64 the kernel emulates a probed instruction for a few kinds only —
// a push of a register (push %rbp, push %r15, ...), the one-byte nop, and
// jmp/call/jcc with a relative target — and single-steps any other one out of
// line, which costs 10 to 20 times more on virtual machines (about 0.6 us
// against 6-7 us a hit on the H200's Firecracker VM, 1.2 against 12-25 us on
// the build VM; docs/benchmarks.md). A function that starts with endbr64
// (CET builds) or a register move and then pushes can be probed on its push
// instead, provided nothing before it changes what the BPF programs read at
// entry: the argument registers and the stack pointer (at a return probe's
// breakpoint the return address must still be at (%rsp)). So the instructions
// skipped are only those that write neither: endbr64, multi-byte nops, moves
// and xors into a register that carries no argument. The decoder knows just
// these; anything else ends the search, and then the probe stays on the entry
// (single-stepped, and said so).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cudatrace {

struct ProbePlace {
  std::uint32_t offset = 0;   // from the function's entry
  bool emulated = false;      // the kernel emulates the probed instruction
  std::string instruction;    // what is probed ("push %rbp", "endbr64", "sub $imm,%rsp", ...)
  std::string skipped;        // what was skipped to get there ("endbr64", ...), "" if nothing
};

// `code` holds the function's first `size` bytes (fewer near the end of a
// file or of the function); the result's offset is < size.
ProbePlace place_probe(const std::uint8_t* code, std::size_t size);

// One line for -v and --list-apis: "+4 push %rbp (after endbr64)",
// "+0 sub $imm,%rsp: single-stepped".
std::string describe(const ProbePlace& p);

}  // namespace cudatrace
