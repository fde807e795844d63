// Finds the entry points of a CUDA runtime that is linked in statically and
// stripped of its symbols (cuBLAS, cuBLASLt, cuDNN, cuSPARSE, cuSOLVER,
// cuRAND, NCCL, stripped `nvcc` programs), so that they can be probed as the
// runtime layer. It matches code fingerprints made at build time from the
// toolkit's libcudart_static.a (gen_static_runtime): each traced runtime
// function's bytes with every field the linker rewrites masked. A match
// counts only if it is the only one in the file and its calls agree with the
// other matches' calls. See docs/static-runtime.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "cudatrace/decode/api_table.h"

namespace cudatrace {

class ElfFile;

// A relocated field of a fingerprinted function: its bytes differ in every
// linked copy, so they are not compared.
struct RelocSite {
  enum Kind : std::uint8_t {
    PcRelative,  // rel32 to a symbol (call, jmp, lea): same target from every site
    GotRelaxable,  // rel32 to a GOT entry that the linker may rewrite with the instruction
  };
  std::uint32_t offset;  // of the rel32 field in the function
  Kind kind;
  std::uint8_t lead;     // masked bytes before the field (the instruction the linker may rewrite)
  std::uint32_t target;  // PcRelative: id of the symbol + addend it resolves to, shared across functions
};

struct Fingerprint {
  const char* name;            // the runtime API symbol
  std::uint32_t size;          // bytes of code
  const unsigned char* code;   // masked bytes are zero
  std::uint32_t key_offset;    // where the key run starts (see kKeyRun)
  std::uint32_t origin;        // offset in the archive's code (for validating a whole-runtime match)
  const RelocSite* sites;
  std::uint32_t site_count;
};

// Each fingerprint has a run of kKeyRun compared bytes at key_offset, chosen
// at build time as the rarest in the archive. The matcher reads the code 8
// bytes at a time, every kKeyStride bytes, and looks the word up among the
// kKeyStride 8-byte windows of every key run: one of them lines up with any
// copy of the function.
inline constexpr std::uint32_t kKeyStride = 8;
inline constexpr std::uint32_t kKeyRun = 8 + kKeyStride - 1;

struct FingerprintTable {
  const Fingerprint* functions;
  std::size_t count;
  const char* source;  // the archive(s) it was made from
};

// The table compiled in (generated at build time).
const FingerprintTable& static_runtime_fingerprints();
// Whether the build fingerprints runtime API `a`: every runtime row, so that
// a call the libraries that embed a runtime (cuBLAS, cuDNN, NCCL) make through
// it is traced whenever the same call through libcudart.so would be. A
// fingerprint costs a probe only where it is found and selected.
bool fingerprinted_runtime_api(const Api& a);

// How many APIs `table` has fingerprints of (some may have several).
std::size_t fingerprinted_api_count(const FingerprintTable& table);

struct FingerprintMatch {
  std::size_t index;  // into the table
  std::uint64_t position;  // in `code`
};

// The functions of `table` found in `code` (loaded at `vaddr`): for each API
// name only a match that is the only one of its fingerprints, and only if
// every call it makes goes where the other matches' calls to the same symbol
// go. Sorted by position. `progress` hears how far the scan of `code` is.
std::vector<FingerprintMatch> match_fingerprints(std::string_view code, std::uint64_t vaddr,
                                                 const FingerprintTable& table,
                                                 const std::function<void(std::size_t scanned)>& progress = {});

// The traced APIs of the CUDA runtime linked into `elf`, as (API, file
// offset) for uprobes. Only files that look driver entry points up through
// cuGetProcAddress and name the runtime's errors, as the runtime does, are
// scanned.
std::vector<std::pair<const Api*, std::uint64_t>> find_static_runtime(const ElfFile& elf,
                                                                       const FingerprintTable& table);

}  // namespace cudatrace
